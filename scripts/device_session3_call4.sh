#!/usr/bin/env bash
# One device call (session 3): issue 19's items 5/6 on the H200 (the clean
# suite with the example kernels, stale_lengths and wrong_stream), the GPU
# tests on the merged harness (the legacy-stream gate runs on every eager
# run), a stall profile of the prefill kernel by SASS line, and a decode
# partition sweep for issue 18 item 2.
# Carry build-devcheck/carry (pagecheck.gz, the example .so files, the GPU
# tests .gz, external.tgz) and build-ab (prefill_dev_base.gz). Logs in $OUT.
set -u
cd "$(dirname "$0")/.."
S=$OUT/s; mkdir -p $S
source scripts/device_steps.sh
unpack_carry build-devcheck/carry
st() { local n=$1; shift; OUT=$S step "$n" 300 "$@" >/dev/null; }  # $S/NAME.log, a line in $S/steps.txt
st t_core test_gpu_core &
st t_decode test_gpu_decode &
st t_prefill test_gpu_prefill &
st t_external $EXT/tests/gpu/test_gpu_external &
OUT=$S step iso 420 env ENTRIES="stale_lengths wrong_stream" SIGTERM_STEPS=0 BUILD=build-devcheck OUT=$S/iso \
  scripts/device_isolation_check.sh run >/dev/null &
wait
{ /usr/bin/time -v pagecheck --version 2>&1 | grep -E "pagecheck|Elapsed|Maximum resident"; pagecheck run --preset mqa --paths reference,direct 2>&1 | grep -iE "ceiling|cublas|mma" | head -3; } > $S/startup.log 2>&1
{ cat $S/steps.txt; cat $S/startup.log; grep -hE "test cases|assertions" $S/t_*.log; grep -hE "ERROR:|logged|values" $S/t_*.log | head -30
  echo "== isolation"; cat $S/iso/steps.txt 2>/dev/null | tail -40; tail -5 $S/iso.log; } > $OUT/phase1.txt
cat $OUT/phase1.txt
# timing alone: decode partition sweep
{ for plan in split:256:256 split:512:512 split:1024:1024 split:2048:2048; do
    echo "== $plan"; pagecheck bench --shapes decode --paths split --plan $plan 2>&1 | grep -E "^decode-|GB/s" | cut -c1-60
  done; } > $OUT/sweep.txt
cat $OUT/sweep.txt
OUT=$S/prof scripts/prefill_prof.sh base "16 512 16" "8 2048 16" > $S/prof.log 2>&1
for f in $S/prof/stalls_*; do echo "== $f"; head -45 $f | cut -c1-190; done > $OUT/stalls.txt
grep -hE "Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Stall|stall" $S/prof/details_* | head -80 > $OUT/details.txt
tar czf $OUT/logs.tgz -C $S .
