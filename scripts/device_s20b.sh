#!/usr/bin/env bash
# Session 20's second call (issue 24, E4M3), carrying build-ab:
#   here:  scripts/build_prefill_dev.sh sts   (FP8 widening stores without bank conflicts)
#          scripts/build_prefill_dev.sh base  (at ab7ccda)
#          for n in sts base; do gzip -9 -c build-sm90dev/prefill_dev_$n >build-ab/prefill_dev_$n.gz; done
#   there: D=$OUT; OUT=/tmp/s20b PACK=$D scripts/device_s20b.sh
# The producer's FP8 widening stores each lane's two BF16 halves in an order
# that gives a quarter warp's eight 16-byte stores eight different swizzle
# columns (session 20's Nsight Compute profile of E4M3 8 x 2048: every one
# of those STS.128 took two wavefronts a quarter warp, 13% of the kernel's
# shared wavefronts in excess). sts's checks (the dev driver's, default
# loaders and rows forced; its small suite under memcheck, racecheck and
# synccheck), then `prefill_dev fp8` (E4M3 at the bench shapes, BF16
# beside) of sts and base, two interleaved rounds.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s20bout}
PACK=${PACK:-.}
mkdir -p "$OUT"
(sleep "${WATCHDOG:-400}" && cd "$OUT" && tar czf "$PACK/s20b_partial.tgz" .) &
watchdog=$!
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
OUT=$OUT/ab MODE=fp8 timeout 380 scripts/prefill_ab_run.sh sts base >"$OUT/summary.txt" 2>&1
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s20b.tgz" .)
cat "$OUT/summary.txt"
