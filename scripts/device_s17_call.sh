#!/usr/bin/env bash
# Session 17's call: issue 23's done-when and the product's figures with
# session 17's defaults (FP8-K picked by sequence length, head dim 64 on
# three consumer warpgroups, 32-key fp8 decode stages), in one device call,
# on the binaries of scripts/mutants/build.sh (the control is the product
# at HEAD):
#   here:  scripts/mutants/build.sh 28 29 30 32 34 35 36   (build-mutants/carry)
#   there: D=$OUT; OUT=/tmp/s17 PACK=$D scripts/device_s17_call.sh   (carry build-mutants/carry)
# 1. scripts/device_s15_call.sh without its A/B, soak and MLA bench: the
#    issue-23 mutants with the control's suite and GPU tests, the presets
#    (deepseek-v3 also at decode) and record_features_check.py, at once.
# 2. Alone on the GPU: `pagecheck bench --shapes decode|prefill` and
#    scripts/bench_torch.py interleaved twice (pagecheck, peers, pagecheck,
#    peers; FlashInfer's adapter does not fit beside the mutants in the
#    carry); then the prefill bench at head dim 64 and with an E4M3 cache,
#    the decode bench with an E4M3 cache and at block size 1; the default
#    suite through prefill with FP8-K on every FP8 case. FP8-K's crossover
#    is in the second call (scripts/device_s17_prof.sh).
# Knobs: BUDGET (run.sh's seconds, default 300), MPATHS (the suite's paths
# under run.sh, default all six), PEERS=0 (step 1 alone: issue 23's call,
# e.g. BUDGET=480 PEERS=0).
# Logs in $OUT, packed into $PACK/s17.tgz (s17_partial.tgz at WATCHDOG s).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s17out}
PACK=${PACK:-.}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
(sleep "${WATCHDOG:-560}" && cd "$OUT" && tar czf "$PACK/s17_partial.tgz" --exclude=s15.tgz .) &
watchdog=$!

OUT=$OUT/s15 PACK=$OUT SOAK=0 MLA=0 AB="" AB_CHECK="" DIMS="" DIMS_CHECK="" BUDGET=${BUDGET:-300} \
  MPATHS=${MPATHS:-reference,direct,split,auto,prefill,fmha} WATCHDOG=600 scripts/device_s15_call.sh >"$OUT/s15.log" 2>&1
echo "step 1 rc=$?" >>"$OUT/summary.txt"
cat "$OUT/s15/summary.txt" >>"$OUT/summary.txt"
tail -25 "$OUT/s15/mutants.log" >>"$OUT/summary.txt"

if [ "${PEERS:-1}" = 0 ]; then  # issue 23's step alone
  kill "$watchdog" 2>/dev/null
  (cd "$OUT" && tar czf "$PACK/s17.tgz" --exclude=s15.tgz --exclude=s17_partial.tgz .)
  cat "$OUT/summary.txt"
  exit 0
fi
export PATH="/tmp/s15bin:$PATH:/usr/local/cuda/bin" NO_COLOR=1
mkdir -p "$OUT/bench"
# FP8-K on every FP8 case (the suite's short ones take the staged kernel by
# default): the default suite through reference and prefill.
PAGECHECK_WS_FP8_K_MIN_KEYS=0 timeout 150 pagecheck run --paths reference,prefill --no-timing --require-gpu -q \
  --json "$OUT/suite_fp8k.json" >"$OUT/suite_fp8k.log" 2>&1
echo "suite with FP8-K everywhere rc=$?: $(tail -3 "$OUT/suite_fp8k.log" | tr '\n' ' ' | cut -c1-300)" >>"$OUT/summary.txt"
scripts/device_peer_benches.sh "$OUT/bench" "$OUT/summary.txt"
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s17.tgz" --exclude=s15.tgz --exclude=s17_partial.tgz .)
cat "$OUT/summary.txt"
