#!/usr/bin/env bash
# FP8 P V's first device call (issue 24; docs/performance.md, "Session 17",
# Next (2)), carrying build-ab:
#   here:  nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels/src \
#            kernels/src/dev/wgmma_fp8_probe.cu -o devbin/wgmma_fp8_probe
#          scripts/build_prefill_dev.sh base; scripts/build_prefill_dev.sh fp8pv -DPAGECHECK_WS_FP8_PV=1;
#          scripts/build_prefill_dev.sh fp8kq -DPAGECHECK_WS_FP8K_QTMA=1
#          gzip -9 each into build-ab (wgmma_fp8_probe.gz, prefill_dev_{base,fp8pv,fp8kq}.gz)
#   there: D=$OUT; OUT=/tmp/s18 PACK=$D scripts/device_s18_fp8pv.sh
# 1. The one-tile probe of the operand layouts (P from S's registers, V^T
#    key-permuted). It must PASS before the rest means anything.
# 2. Each candidate's (CANDS, default "fp8pv fp8kq": FP8 P V; FP8-K's query
#    by tensor copy) dev-driver checks and its small cases under memcheck,
#    racecheck and synccheck, FP8-K on every FP8 case
#    (PAGECHECK_WS_FP8_K_MIN_KEYS=0: the checks' sequences are short).
# 3. `prefill_dev fp8` of base and the candidates, two interleaved rounds
#    (E4M3 at the bench shapes, BF16 beside).
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
for n in ${CANDS:-fp8pv fp8kq}; do
  PAGECHECK_WS_FP8_K_MIN_KEYS=0 SAN=1 QUICK=0 OUT=$OUT/$n timeout 400 scripts/prefill_ab_run.sh "$n" base \
    >"$OUT/${n}_check.log" 2>&1
  echo "$n checks rc=$?: $(tr '\n' ' ' <"$OUT/${n}_check.log" | cut -c1-500)" | tee -a "$OUT/summary.txt"
done
for round in 1 2; do
  for n in base ${CANDS:-fp8pv fp8kq}; do
    timeout 60 "build-sm90dev/prefill_dev_$n" fp8 >"$OUT/fp8_${n}_$round.log" 2>&1
    echo "fp8 $n r$round: $(grep -E 'TFLOP' "$OUT/fp8_${n}_$round.log" | tr -s ' ' | tr '\n' ';' | cut -c1-400)" |
      tee -a "$OUT/summary.txt"
  done
done
(cd "$OUT" && tar czf "$PACK/s18.tgz" .)
