#!/usr/bin/env bash
# Session 21's first call (issues 18 and 24), carrying build-ab. Written in
# session 20, whose device time ran out before it could run.
#   here:  scripts/build_prefill_dev.sh sts   (HEAD: FP8 widening stores without bank conflicts, 9fd4b09)
#          git show ab7ccda:kernels/src/prefill/attn_sm90_ws.cu >/tmp/ws_base.cu
#          WS_SRC=/tmp/ws_base.cu scripts/build_prefill_dev.sh base   (the kernel before sts)
#          scripts/build_prefill_dev.sh trbase3 -DPAGECHECK_WS_TRACE=3   (step 3)
#          mkdir -p build-ab; for n in sts base trbase3; do gzip -9 -c build-sm90dev/prefill_dev_$n >build-ab/prefill_dev_$n.gz; done
#          scripts/build_decode_probe.sh -o build-ab/decode_probe_tma && gzip -9 build-ab/decode_probe_tma
#          scripts/build_decode_probe.sh -DPC_DECODE_TC_TMA_SPLIT=1 -o build-ab/decode_probe_tmasplit &&
#            gzip -9 build-ab/decode_probe_tmasplit   (optional: split's partitions by tensor copies too)
#   there: D=$OUT; OUT=/tmp/s21 PACK=$D scripts/device_s21_call.sh
# 1. (issue 18) The direct decode kernel's K/V by tensor copies
#    (PC_DECODE_TC_TMA; PAGECHECK_DECODE_TMA=1 turns them on at run time,
#    the same binary): `decode_probe check` (every dtype, head dim, block
#    size 1-256, both layouts, windows, graphs; unused pages NaN) and its
#    small cases under memcheck and racecheck, with them on; then
#    `decode_probe bench4` with and without, interleaved with step 2's
#    timings, two rounds while the call's clock (BUDGET, 400 s) allows.
#    Where build-ab holds decode_probe_tmasplit.gz (PC_DECODE_TC_TMA_SPLIT:
#    split's partitions take them too), its check and bench4 as well.
# 2. (issue 24) The producer's FP8 widening stores each lane's two BF16
#    halves in an order that gives a quarter warp's eight 16-byte stores
#    eight different swizzle columns (Nsight Compute, session 20, E4M3
#    8 x 2048: each of those STS.128 took two wavefronts a quarter warp, 13%
#    of the kernel's shared wavefronts in excess). sts's checks (the dev
#    driver's, beside step 1's; its small suite under memcheck and
#    racecheck), then `prefill_dev fp8` of sts and base in each round.
# 3. (issue 24, if build-ab holds prefill_dev_trbase3.gz and the clock
#    allows) the epilogue's clock stamps (PAGECHECK_WS_TRACE=3: row sums
#    and scales, staging, fence and release, stores) at 16 x 512 and
#    8 x 2048, where trbase5 put about 2000 cycles a work tile.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s)
OUT=${OUT:-s21out}
PACK=${PACK:-.}
mkdir -p "$OUT" /tmp/s21bin
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "$PACK/s21_partial.tgz" .) &
watchdog=$!
disown "$watchdog"  # a bare `wait` below must not wait for it (session 21 lost a call to that)
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >"$S"
dp=/tmp/s21bin/decode_probe
gunzip -c build-ab/decode_probe_tma.gz >"$dp" && chmod +x "$dp"
dps=
if [ -f build-ab/decode_probe_tmasplit.gz ]; then
  dps=/tmp/s21bin/decode_probe_tmasplit
  gunzip -c build-ab/decode_probe_tmasplit.gz >"$dps" && chmod +x "$dps"
fi
for n in sts base; do
  gunzip -c "build-ab/prefill_dev_$n.gz" >"/tmp/s21bin/prefill_dev_$n" && chmod +x "/tmp/s21bin/prefill_dev_$n"
done
# The checks side by side (correctness only), then the timings one at a time.
if [ -z "${SKIP_CHECKS:-}" ]; then
PAGECHECK_DECODE_TMA=1 timeout 120 "$dp" check >"$OUT/dp_check.log" 2>&1 &
timeout 120 /tmp/s21bin/prefill_dev_sts check >"$OUT/sts_check.log" 2>&1 &
[ -n "$dps" ] && PAGECHECK_DECODE_TMA=1 timeout 120 "$dps" check >"$OUT/dps_check.log" 2>&1 &
wait
[ -n "$dps" ] && echo "decode (split by tensor copies) check: $(grep -E 'checks:|graph checks|large-cache' "$OUT/dps_check.log" | tr '\n' ';')" >>"$S"
echo "decode check at $(($(date +%s) - t0)) s: $(grep -E 'checks:|graph checks|large-cache' "$OUT/dp_check.log" | tr '\n' ';')" >>"$S"
grep -E "FAIL|fail" "$OUT/dp_check.log" | head -8 >>"$S"
echo "sts check: $(grep -c FAIL "$OUT/sts_check.log") FAIL lines; $(tail -1 "$OUT/sts_check.log")" >>"$S"
for tool in memcheck racecheck; do
  PAGECHECK_DECODE_TMA=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$dp" small \
    >"$OUT/dp_san_$tool.log" 2>&1 &
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 /tmp/s21bin/prefill_dev_sts small \
    >"$OUT/sts_san_$tool.log" 2>&1 &
  wait
  echo "$tool: decode $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/dp_san_$tool.log" | tail -1);" \
    "sts $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sts_san_$tool.log" | tail -1)" >>"$S"
done
fi
for round in 1 2; do
  [ $(($(date +%s) - t0)) -lt "${BUDGET:-400}" ] || break
  for tma in 1 0; do
    PAGECHECK_DECODE_TMA=$tma timeout 60 "$dp" bench4 >"$OUT/dp_bench_tma${tma}_$round.log" 2>&1
    { echo "== decode bench4, tensor copies $tma, round $round"; grep -vE "^device|^copy" "$OUT/dp_bench_tma${tma}_$round.log"; } >>"$S"
  done
  if [ -n "$dps" ]; then
    PAGECHECK_DECODE_TMA=1 timeout 60 "$dps" bench4 >"$OUT/dps_bench_$round.log" 2>&1
    { echo "== decode bench4, split by tensor copies too, round $round"; grep -vE "^device|^copy" "$OUT/dps_bench_$round.log"; } >>"$S"
  fi
  for n in sts base; do
    timeout 60 "/tmp/s21bin/prefill_dev_$n" fp8 >"$OUT/fp8_${n}_$round.log" 2>&1
    { echo "== prefill fp8 $n, round $round"; grep -E "TFLOP|FAIL" "$OUT/fp8_${n}_$round.log"; } >>"$S"
  done
  echo "round $round done at $(($(date +%s) - t0)) s" >>"$S"
done
if [ -f build-ab/prefill_dev_trbase3.gz ] && [ -z "${SKIP_TRACE:-}" ] && [ $(($(date +%s) - t0)) -lt 480 ]; then
  scripts/prefill_trace_run.sh "$OUT/trace" "$S" trbase3
fi
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s21.tgz" .)
cat "$S"
