#!/usr/bin/env bash
# One device call (session 3 of issue 18/24): the decode default (tensor cores)
# checked (GPU tests, suite, split plan, presets, four sanitizers) beside the
# prefill candidate's dev checks, then decode timing beside PyTorch twice,
# interleaved, the simt/fp8/block-1 variants, and the prefill A/B.
# Carry build-devcheck/carry (scripts/device_check.sh build, packed) and build-ab
# (prefill_dev_NAME.gz from scripts/build_prefill_dev.sh). Logs under $OUT.
set -u
cd "$(dirname "$0")/.."
source scripts/device_steps.sh
unpack_carry build-devcheck/carry
S=$OUT/s; mkdir -p $S
st() { local n=$1; shift; OUT=$S step "$n" 300 "$@" >/dev/null; }  # $S/NAME.log, a line in $S/steps.txt
presets=(); for p in $(pagecheck run --list-presets 2>/dev/null | awk '{print $1}'); do presets+=(--preset "$p"); done
# phase 1: correctness of the decode default (tensor cores) and of the prefill candidate, all at once
st t_decode test_gpu_decode &
st t_core test_gpu_core &
st suite pagecheck run --paths reference,direct,split,auto,prefill,fmha --no-timing &
st suite_split64 pagecheck run --paths reference,split,auto --plan split:64:100 --no-timing &
st presets pagecheck run "${presets[@]}" --paths reference,direct,split,auto --no-timing &
st memcheck compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 pagecheck run --paths direct,split,auto --no-timing -q &
st racecheck compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 pagecheck run --paths direct,split,auto --no-timing --no-checks -q &
st initcheck compute-sanitizer --tool initcheck --error-exitcode 9 --print-limit 20 pagecheck run --paths direct,split,auto --no-timing --no-checks -q &
st synccheck compute-sanitizer --tool synccheck --error-exitcode 9 --print-limit 20 pagecheck run --paths direct,split,auto --no-timing --no-checks -q &
QUICK=0 SAN=1 scripts/prefill_ab_run.sh new3 base > $S/ab_check.log 2>&1 &
wait
{ echo "== phase 1"; cat $S/steps.txt
  grep -hE "test cases|assertions" $S/t_*.log; grep -hE "path runs" $S/suite*.log $S/presets.log
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" $S/memcheck.log $S/racecheck.log $S/initcheck.log $S/synccheck.log
  sed -n '/failed (/,$p' $S/suite.log $S/suite_split64.log $S/presets.log | head -20
  grep -E "ERROR:|mismatches," $S/t_decode.log | head -10
  grep -vE "^== |TFLOP" $S/ab_check.log
} > $OUT/phase1.txt
cat $OUT/phase1.txt
# phase 2: timing alone (pagecheck, peers, pagecheck, peers; then variants)
echo "== phase 2"
dec="--shapes decode --paths direct,split,auto"
for r in 1 2; do
  pagecheck bench $dec --json $OUT/bench_dec$r.json > $S/bench_dec$r.log 2>&1
  PYTHONUNBUFFERED=1 timeout 120 python3 scripts/bench_torch.py --shapes decode > $S/torch_dec$r.log 2>&1
done
PAGECHECK_DECODE_KERNEL=simt pagecheck bench $dec > $S/bench_dec_simt.log 2>&1
pagecheck bench $dec --kv-dtype F8_E4M3 > $S/bench_dec_fp8.log 2>&1
pagecheck bench $dec --block-size 1 > $S/bench_dec_b1.log 2>&1
for f in bench_dec1 torch_dec1 bench_dec2 torch_dec2 bench_dec_simt bench_dec_fp8 bench_dec_b1; do echo "-- $f"; grep -vE "^\s*$" $S/$f.log | cut -c1-180 | tail -14; done > $OUT/phase2.txt
for r in 1 2; do for n in new3 base; do echo "== $n ($r)"; timeout 100 build-sm90dev/prefill_dev_$n quick 2>&1 | grep -E "TFLOP|FAIL|rror"; done; done > $OUT/ab_quick.txt
cat $OUT/phase2.txt $OUT/ab_quick.txt
tar czf $OUT/logs.tgz -C $S .
