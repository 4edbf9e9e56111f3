#!/usr/bin/env bash
# Session 17's second call (on the machine scripts/device_s17_call.sh left
# warm, which still holds build-mutants/carry): FP8-K's crossover, then
# Nsight Compute on the product's prefill kernels where issue 24 is short.
#   here:  scripts/build_prefill_dev.sh prof; gzip -9 -c build-sm90dev/prefill_dev_prof >build-ab/prefill_dev_prof.gz
#   there: D=$OUT; OUT=/tmp/s17p PACK=$D scripts/device_s17_prof.sh   (carry build-ab)
# 1. FP8-K's crossover (when the control is at hand: /tmp/s15bin of the
#    first call, else unpacked from build-mutants/carry): E4M3 causal
#    prefill of about 4096 tokens at 512-2048 keys a sequence, FP8-K forced
#    on (PAGECHECK_WS_FP8_K_MIN_KEYS=0) and off (a billion). XO=0 skips it.
# 2. scripts/prefill_prof.sh on the dev driver of HEAD: BF16 16 x 512 (0.88
#    of cuDNN), E4M3 8 x 2048 on FP8-K (0.78 of BF16), head dim 64 8 x 2048
#    on three warpgroups (0.72 of head dim 128). PROF=0 skips it.
# Logs in $OUT, packed into $PACK/s17p.tgz; summary.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s17pout}
PACK=${PACK:-.}
mkdir -p "$OUT/xo"
: >"$OUT/summary.txt"
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
(sleep "${WATCHDOG:-560}" && cd "$OUT" && tar czf "$PACK/s17p_partial.tgz" --exclude='*.tgz' .) &
watchdog=$!

pc=/tmp/s15bin/00-control
if [ ! -x "$pc" ] && [ -f build-mutants/carry/binaries.tar.xz ]; then
  mkdir -p /tmp/s15bin && tar -C /tmp/s15bin -xJf build-mutants/carry/binaries.tar.xz --wildcards '*00-control'
  pc=$(find /tmp/s15bin -name 00-control | head -1)
fi
if [ "${XO:-1}" = 1 ] && [ -x "$pc" ]; then
  for len in 512 768 1024 1536 2048; do
    for k in 0 1000000000; do
      PAGECHECK_WS_FP8_K_MIN_KEYS=$k timeout 90 "$pc" run --name "xo-$len" --seqs $((4096 / len)) --seq-len "$len" \
        --mode prefill --q-heads 32 --kv-heads 8 --head-dim 128 --kv-dtype F8_E4M3 --paths prefill --no-checks \
        --json "$OUT/xo/xo_${len}_$k.json" >"$OUT/xo/xo_${len}_$k.log" 2>&1
      echo "xo $len min_keys=$k rc=$?" >>"$OUT/summary.txt"
    done
  done
  python3 scripts/bench_summary.py "$OUT/xo" >>"$OUT/summary.txt" 2>&1
else
  echo "xo: skipped (XO=${XO:-1}; control at '$pc')" >>"$OUT/summary.txt"
fi
if [ "${PROF:-1}" = 1 ]; then
  OUT=$OUT/prof timeout 420 scripts/prefill_prof.sh prof "16 512 16" "8 2048 16 e4m3" "8 2048 16 bf16 64" \
    >"$OUT/prof.log" 2>&1
  echo "prof rc=$?" >>"$OUT/summary.txt"
  for f in "$OUT"/prof/stalls_*_0.txt; do
    [ -f "$f" ] && { echo "== $(basename "$f")"; head -30 "$f"; } >>"$OUT/summary.txt"
  done
fi
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s17p.tgz" --exclude='*.tgz' .)
cat "$OUT/summary.txt"
