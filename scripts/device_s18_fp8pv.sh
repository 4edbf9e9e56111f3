#!/usr/bin/env bash
# FP8 P V's first device call (issue 24; docs/performance.md, "Session 17",
# Next (2)), carrying build-ab:
#   here:  nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels/src \
#            kernels/src/dev/wgmma_fp8_probe.cu -o devbin/wgmma_fp8_probe
#          scripts/build_prefill_dev.sh base; scripts/build_prefill_dev.sh fp8pv -DPAGECHECK_WS_FP8_PV=1
#          gzip -9 each into build-ab (wgmma_fp8_probe.gz, prefill_dev_base.gz, prefill_dev_fp8pv.gz)
#   there: D=$OUT; OUT=/tmp/s18 PACK=$D scripts/device_s18_fp8pv.sh
# 1. The one-tile probe of the operand layouts (P from S's registers, V^T
#    key-permuted). It must PASS before the rest means anything.
# 2. The fp8pv dev driver's checks and its small cases under memcheck,
#    racecheck and synccheck, FP8-K (and so FP8 P V) on every FP8 case
#    (PAGECHECK_WS_FP8_K_MIN_KEYS=0: the checks' sequences are short).
# 3. `prefill_dev fp8` of base and fp8pv, two interleaved rounds (E4M3 at
#    the bench shapes, BF16 beside).
# Logs in $OUT, packed into $PACK/s18.tgz; summary.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s18out}
PACK=${PACK:-.}
mkdir -p "$OUT" build-sm90dev devbin
: >"$OUT/summary.txt"
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
gunzip -c build-ab/wgmma_fp8_probe.gz >devbin/wgmma_fp8_probe && chmod +x devbin/wgmma_fp8_probe
timeout 30 devbin/wgmma_fp8_probe >"$OUT/probe.log" 2>&1
echo "probe rc=$?: $(tail -1 "$OUT/probe.log")" | tee -a "$OUT/summary.txt"
PAGECHECK_WS_FP8_K_MIN_KEYS=0 SAN=1 QUICK=0 OUT=$OUT/fp8pv timeout 400 scripts/prefill_ab_run.sh fp8pv base \
  >"$OUT/fp8pv_check.log" 2>&1
echo "fp8pv checks rc=$?: $(tr '\n' ' ' <"$OUT/fp8pv_check.log" | cut -c1-500)" | tee -a "$OUT/summary.txt"
for round in 1 2; do
  for n in base fp8pv; do
    timeout 60 "build-sm90dev/prefill_dev_$n" fp8 >"$OUT/fp8_${n}_$round.log" 2>&1
    echo "fp8 $n r$round: $(grep -E 'TFLOP' "$OUT/fp8_${n}_$round.log" | tr -s ' ' | tr '\n' ';' | cut -c1-400)" |
      tee -a "$OUT/summary.txt"
  done
done
(cd "$OUT" && tar czf "$PACK/s18.tgz" .)
