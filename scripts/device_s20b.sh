#!/usr/bin/env bash
# Session 20's second call (issues 24 and 18), carrying build-ab:
#   here:  scripts/build_prefill_dev.sh sts   (FP8 widening stores without bank conflicts, 9fd4b09)
#          (build-sm90dev/prefill_dev_base: built at ab7ccda)
#          for n in sts base; do gzip -9 -c build-sm90dev/prefill_dev_$n >build-ab/prefill_dev_$n.gz; done
#          scripts/build_decode_probe.sh -o build-ab/decode_probe_tma && gzip -9 build-ab/decode_probe_tma
#   there: D=$OUT; OUT=/tmp/s20b PACK=$D scripts/device_s20b.sh
# 1. (issue 18) The direct decode kernel's K/V by tensor copies
#    (PC_DECODE_TC_TMA; PAGECHECK_DECODE_TMA=0 turns them off at run time,
#    the same binary): `decode_probe check` (every dtype, head dim, block
#    size 1-256, both layouts, windows, graphs; unused pages NaN), then
#    `decode_probe bench4` with and without, interleaved with step 2's
#    timings, two rounds while the call's clock (BUDGET, 250 s) allows.
# 2. (issue 24) The producer's FP8 widening stores each lane's two BF16
#    halves in an order that gives a quarter warp's eight 16-byte stores
#    eight different swizzle columns (Nsight Compute, E4M3 8 x 2048: each of
#    those STS.128 took two wavefronts a quarter warp, 13% of the kernel's
#    shared wavefronts in excess). sts's checks (the dev driver's, beside
#    step 1's), then `prefill_dev fp8` of sts and base in each round.
# (The sanitizers were left for a later call: 377 s of device time were
# left when this call was written.)
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s)
OUT=${OUT:-s20bout}
PACK=${PACK:-.}
mkdir -p "$OUT" /tmp/s20bbin
(sleep "${WATCHDOG:-560}" && cd "$OUT" && tar czf "$PACK/s20b_partial.tgz" .) &
watchdog=$!
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >"$S"
dp=/tmp/s20bbin/decode_probe
gunzip -c build-ab/decode_probe_tma.gz >"$dp" && chmod +x "$dp"
for n in sts base; do
  gunzip -c "build-ab/prefill_dev_$n.gz" >"/tmp/s20bbin/prefill_dev_$n" && chmod +x "/tmp/s20bbin/prefill_dev_$n"
done
# The checks side by side (correctness only), then the timings one at a time.
timeout 120 "$dp" check >"$OUT/dp_check.log" 2>&1 &
timeout 120 /tmp/s20bbin/prefill_dev_sts check >"$OUT/sts_check.log" 2>&1 &
wait
echo "decode check at $(($(date +%s) - t0)) s: $(grep -E 'checks:|graph checks|large-cache' "$OUT/dp_check.log" | tr '\n' ';')" >>"$S"
grep -E "FAIL|fail" "$OUT/dp_check.log" | head -8 >>"$S"
echo "sts check: $(grep -c FAIL "$OUT/sts_check.log") FAIL lines; $(tail -1 "$OUT/sts_check.log")" >>"$S"
for round in 1 2; do
  [ $(($(date +%s) - t0)) -lt "${BUDGET:-250}" ] || break
  for tma in 1 0; do
    PAGECHECK_DECODE_TMA=$tma timeout 60 "$dp" bench4 >"$OUT/dp_bench_tma${tma}_$round.log" 2>&1
    { echo "== decode bench4, tensor copies $tma, round $round"; grep -vE "^device|^copy" "$OUT/dp_bench_tma${tma}_$round.log"; } >>"$S"
  done
  for n in sts base; do
    timeout 60 "/tmp/s20bbin/prefill_dev_$n" fp8 >"$OUT/fp8_${n}_$round.log" 2>&1
    { echo "== prefill fp8 $n, round $round"; grep -E "TFLOP|FAIL" "$OUT/fp8_${n}_$round.log"; } >>"$S"
  done
  echo "round $round done at $(($(date +%s) - t0)) s" >>"$S"
done
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s20b.tgz" .)
cat "$S"
