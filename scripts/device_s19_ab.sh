#!/usr/bin/env bash
# Session 19's A/B call (issue 24), carrying build-ab:
#   here:  scripts/build_prefill_dev.sh base
#          scripts/build_prefill_dev.sh fp8v3 -DPAGECHECK_WS_FP8K_VSTAGES=3
#          scripts/build_prefill_dev.sh trbase -DPAGECHECK_WS_TRACE=1
#          scripts/build_prefill_dev.sh trearly -DPAGECHECK_WS_TRACE=1 -DPAGECHECK_WS_EARLY_S=1
#          gzip -9 each into build-ab (prefill_dev_NAME.gz)
#          scripts/build_prefill_dev.sh early1 -DPAGECHECK_WS_EARLY_S=1
#          scripts/build_prefill_dev.sh earlyfin -DPAGECHECK_WS_EARLY_S=1 -DPAGECHECK_WS_EARLY_FINISH=1
#          scripts/build_prefill_dev.sh q3early -DPAGECHECK_WS_EARLY_S=1 -DPAGECHECK_WS_Q3=1
#          scripts/build_prefill_dev.sh q3earlyfin -DPAGECHECK_WS_EARLY_S=1 -DPAGECHECK_WS_Q3=1 -DPAGECHECK_WS_EARLY_FINISH=1
#          (PAGECHECK_WS_EARLY_FINISH and PAGECHECK_WS_Q3 are in 725db33 only:
#          both lost and were removed after the call; docs/performance.md,
#          session 19)
#   there: D=$OUT; OUT=/tmp/s19a PACK=$D scripts/device_s19_ab.sh
# A. Where head dim 128 loses with the next work tile's S_0 under the
# epilogue (docs/performance.md, session 18: -6% at 16 x 512, +3% at head
# dim 64): the clock stamps of both builds.
# At 16 x 512 and 8 x 2048 (block 16), prefill and fmha: per number of key
# tiles the mean cycles of each phase of a work tile (scripts/prefill_trace.py;
# in trearly's early work tiles "S0" is nil, "lastPV" is the turn of the
# last P V and the next S_0, "epi" the staging, S_0's wait and the copies),
# and the fit cycles = a * key tiles + b. Then the SASS of both builds'
# BF16 rows kernel (cuobjdump, there: this machine has none) for the steady
# loop's instruction count.
# B. FP8-K with three V stages (fp8v3): its checks with FP8-K on every FP8
# case and its small suite under memcheck, racecheck and synccheck, then
# `prefill_dev fp8` of base and fp8v3, two interleaved rounds.
# C. (session 19) The early S_0 at every head dim (early1) with the output
# copies' read waited for a turn later (earlyfin:
# PAGECHECK_WS_EARLY_FINISH=1), with a third Q buffer at head dim 128
# (q3early: PAGECHECK_WS_Q3=1), and both (q3earlyfin), beside base:
# `prefill_dev quick` (head dim 128) of all five and `dims` (head dim 64)
# of base and earlyfin, two interleaved rounds; q3early's checks (default
# loaders and rows, no sanitizers) last. A step starts only while the
# call's clock is below its budget line.
# D. The decode read ceilings (`decode_probe roof`), where build-ab holds
# decode_probe.gz (scripts/device_s19_call.sh says how it is built).
# Logs in $OUT, packed into $PACK/s19a.tgz (s19a_partial.tgz at WATCHDOG s).
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s)
left() { echo $((${1} - ($(date +%s) - t0))); }  # left LINE: seconds until the call's clock reaches LINE
OUT=${OUT:-s19aout}
PACK=${PACK:-.}
mkdir -p "$OUT/trace" build-sm90dev
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "$PACK/s19a_partial.tgz" .) &
watchdog=$!
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/summary.txt"
scripts/prefill_trace_run.sh "$OUT/trace" "$OUT/summary.txt" trbase trearly
for n in trbase trearly; do
  cuobjdump -sass "build-sm90dev/prefill_dev_$n" >"$OUT/sass_$n.txt" 2>&1
  echo "$n: $(grep -c 'HGMMA' "$OUT/sass_$n.txt") HGMMA, $(wc -l <"$OUT/sass_$n.txt") SASS lines" >>"$OUT/summary.txt"
done
gzip -9 "$OUT"/sass_*.txt
echo "A done at $(($(date +%s) - t0)) s" >>"$OUT/summary.txt"
for n in base fp8v3 early1 earlyfin q3early q3earlyfin; do
  gunzip -c "build-ab/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
# Timings first (B's fp8 and C's quick and dims), then the checks.
for round in 1 2; do
  for n in base fp8v3; do
    timeout 60 "build-sm90dev/prefill_dev_$n" fp8 >"$OUT/fp8_${n}_$round.log" 2>&1
    echo "fp8 $n r$round: $(grep -E 'TFLOP|FAIL' "$OUT/fp8_${n}_$round.log" | tr -s ' ' | tr '\n' ';' | cut -c1-600)" \
      >>"$OUT/summary.txt"
  done
done
echo "B timings done at $(($(date +%s) - t0)) s" >>"$OUT/summary.txt"
for mode in quick dims; do
  if [ $mode = quick ]; then names="base early1 q3early q3earlyfin earlyfin"; else names="base earlyfin"; fi
  for round in 1 2; do
    for n in $names; do
      [ "$(left 420)" -gt 0 ] || continue
      timeout 60 "build-sm90dev/prefill_dev_$n" $mode >"$OUT/${mode}_${n}_$round.log" 2>&1
      echo "$mode $n r$round: $(grep -E 'TFLOP|FAIL' "$OUT/${mode}_${n}_$round.log" | tr -s ' ' | tr '\n' ';' | cut -c1-700)" \
        >>"$OUT/summary.txt"
    done
  done
done
echo "C timings done at $(($(date +%s) - t0)) s" >>"$OUT/summary.txt"
# D. (issue 18) `decode_probe roof` where build-ab carries it (device_s19_call.sh's step 3).
if [ -f build-ab/decode_probe.gz ] && [ "$(left 470)" -gt 0 ]; then
  gunzip -c build-ab/decode_probe.gz >build-sm90dev/decode_probe && chmod +x build-sm90dev/decode_probe
  timeout 90 build-sm90dev/decode_probe roof >"$OUT/roof.log" 2>&1
  echo "roof rc=$?" >>"$OUT/summary.txt"
  cat "$OUT/roof.log" >>"$OUT/summary.txt"
fi
if [ "$(left 330)" -gt 0 ]; then
  SAN=0 QUICK=0 OUT=$OUT/q3early timeout "$(left 450)" scripts/prefill_ab_run.sh q3early >"$OUT/q3early_check.log" 2>&1
  echo "q3early checks rc=$?: $(tr '\n' ' ' <"$OUT/q3early_check.log" | cut -c1-400)" >>"$OUT/summary.txt"
fi
if [ "$(left 400)" -gt 0 ]; then
  PAGECHECK_WS_FP8_K_MIN_KEYS=0 SAN=1 QUICK=0 OUT=$OUT/fp8v3 timeout "$(left 540)" scripts/prefill_ab_run.sh fp8v3 \
    >"$OUT/fp8v3_check.log" 2>&1
  echo "fp8v3 checks rc=$?: $(tr '\n' ' ' <"$OUT/fp8v3_check.log" | cut -c1-600)" >>"$OUT/summary.txt"
fi
echo "end at $(($(date +%s) - t0)) s" >>"$OUT/summary.txt"
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s19a.tgz" .)
cat "$OUT/summary.txt"
