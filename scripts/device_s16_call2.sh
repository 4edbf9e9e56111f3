#!/usr/bin/env bash
# Session 16's second call (on the machine the first left warm):
#   1. pagecheck beside its peers (scripts/device_bench_peers.sh: bench with
#      FlashInfer's entries through --kernel, bench_torch.py's cuDNN and
#      FlashAttention-2, interleaved twice), carrying build-fi/carry
#      (pagecheck.gz and external.tgz of scripts/device_flashinfer_check.sh
#      build 90);
#   2. the fp8 decode's 32-key stages against 16 (issue 18: E4M3 tokens/s
#      against BF16 at 64 x 4096 was 1.797x, target 1.8x): devbin/decode_probe
#      and devbin/decode_probe_k32 (scripts/build_decode_probe.sh
#      [-DPC_DECODE_TC_FP8_KEYS=32]) bench4t twice, interleaved, then the k32
#      probe's checks and memcheck on its small cases. PROBE=0 skips it.
#   there: D=$OUT; OUT=/tmp/s16b PACK=$D scripts/device_s16_call2.sh   (carry build-fi/carry, devbin)
# Logs in $OUT, packed into $PACK/s16b.tgz; summary.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s16bout}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
(sleep "${WATCHDOG:-560}" && cd "$OUT" && tar czf "${PACK:-.}/s16b_partial.tgz" --exclude='*.tgz' .) &
watchdog=$!
if [ "${PEERS:-1}" = 1 ]; then
  OUT=$OUT/peers CARRY=build-fi/carry bash scripts/device_bench_peers.sh 2>&1 | tee "$OUT/peers_summary.txt" |
    tee -a "$OUT/summary.txt" >/dev/null
fi
if [ "${PROBE:-1}" = 1 ]; then
  chmod +x devbin/*
  for round in 1 2; do
    for b in decode_probe decode_probe_k32; do
      timeout 120 "devbin/$b" bench4t >"$OUT/${b}_bench4t_$round.log" 2>&1
      echo "== $b bench4t r$round rc=$?" | tee -a "$OUT/summary.txt"
      grep -E "GB/s|^[0-9]+x[0-9]+" "$OUT/${b}_bench4t_$round.log" | head -40 | tee -a "$OUT/summary.txt" >/dev/null
    done
  done
  timeout 200 devbin/decode_probe_k32 check >"$OUT/k32_check.log" 2>&1
  echo "k32 check rc=$?: $(grep -ciE 'fail' "$OUT/k32_check.log") fail lines; $(tail -1 "$OUT/k32_check.log")" |
    tee -a "$OUT/summary.txt"
  timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 devbin/decode_probe_k32 small \
    >"$OUT/k32_memcheck.log" 2>&1
  echo "k32 memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/k32_memcheck.log" | tail -1)" | tee -a "$OUT/summary.txt"
fi
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "${PACK:-.}/s16b.tgz" --exclude='*.tgz' .)
