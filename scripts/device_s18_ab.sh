#!/usr/bin/env bash
# Session 18's A/B call (issue 24), carrying build-ab:
#   here:  nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels/src \
#            kernels/src/dev/wgmma_fp8_probe.cu -o devbin/wgmma_fp8_probe
#          scripts/build_prefill_dev.sh base; scripts/build_prefill_dev.sh fp8pv -DPAGECHECK_WS_FP8_PV=1;
#          scripts/build_prefill_dev.sh fp8kq -DPAGECHECK_WS_FP8K_QTMA=1;
#          scripts/build_prefill_dev.sh earlys -DPAGECHECK_WS_EARLY_S=1
#          gzip -9 each into build-ab (wgmma_fp8_probe.gz, prefill_dev_NAME.gz)
#   there: D=$OUT; OUT=/tmp/s18 PACK=$D scripts/device_s18_ab.sh
# 1. The one-tile probe of FP8 P V's operand layouts (P from S's registers,
#    V^T key-permuted). fp8pv's figures mean nothing unless it PASSes.
# 2. Each candidate's (CANDS, default "earlys fp8pv fp8kq": the next work
#    tile's S_0 under the epilogue; FP8 P V; FP8-K's query by tensor copy)
#    dev-driver checks and its small cases under memcheck, racecheck and
#    synccheck, FP8-K on every FP8 case (PAGECHECK_WS_FP8_K_MIN_KEYS=0: the
#    checks' sequences are short).
# 3. Two interleaved rounds: `prefill_dev quick` and `dims` (BF16, the bench
#    shapes, prefill and fmha; head dims 64 and 128) of base and earlys; `prefill_dev fp8` (E4M3) of base,
#    fp8pv and fp8kq.
# Logs in $OUT, packed into $PACK/s18.tgz (s18_partial.tgz at WATCHDOG s);
# summary.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s18out}
PACK=${PACK:-.}
CANDS=${CANDS:-earlys fp8pv fp8kq}
mkdir -p "$OUT" build-sm90dev devbin
: >"$OUT/summary.txt"
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "$PACK/s18_partial.tgz" .) &
watchdog=$!
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
gunzip -c build-ab/wgmma_fp8_probe.gz >devbin/wgmma_fp8_probe && chmod +x devbin/wgmma_fp8_probe
timeout 30 devbin/wgmma_fp8_probe >"$OUT/probe.log" 2>&1
echo "probe rc=$?: $(tail -1 "$OUT/probe.log")" | tee -a "$OUT/summary.txt"
for n in $CANDS; do
  PAGECHECK_WS_FP8_K_MIN_KEYS=0 SAN=1 QUICK=0 OUT=$OUT/$n timeout 300 scripts/prefill_ab_run.sh "$n" base \
    >"$OUT/${n}_check.log" 2>&1
  echo "$n checks rc=$?: $(tr '\n' ' ' <"$OUT/${n}_check.log" | cut -c1-600)" | tee -a "$OUT/summary.txt"
done
for round in 1 2; do
  for n in base $CANDS; do
    case $n in fp8*) continue ;; esac
    for mode in quick dims; do
      timeout 60 "build-sm90dev/prefill_dev_$n" $mode >"$OUT/${mode}_${n}_$round.log" 2>&1
      echo "$mode $n r$round: $(grep -E 'TFLOP' "$OUT/${mode}_${n}_$round.log" | tr -s ' ' | tr '\n' ';' | cut -c1-700)" |
        tee -a "$OUT/summary.txt"
    done
  done
  for n in base $CANDS; do
    case $n in base | fp8*) ;; *) continue ;; esac
    timeout 60 "build-sm90dev/prefill_dev_$n" fp8 >"$OUT/fp8_${n}_$round.log" 2>&1
    echo "fp8 $n r$round: $(grep -E 'TFLOP' "$OUT/fp8_${n}_$round.log" | tr -s ' ' | tr '\n' ';' | cut -c1-400)" |
      tee -a "$OUT/summary.txt"
  done
done
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s18.tgz" .)
