#!/usr/bin/env bash
# Where head dim 128 loses with the next work tile's S_0 under the epilogue
# (issue 24; docs/performance.md, session 18: -6% at 16 x 512, +3% at head
# dim 64): the clock stamps of both builds, carrying build-ab:
#   here:  scripts/build_prefill_dev.sh trbase -DPAGECHECK_WS_TRACE=1
#          scripts/build_prefill_dev.sh trearly -DPAGECHECK_WS_TRACE=1 -DPAGECHECK_WS_EARLY_S=1
#          gzip -9 each into build-ab (prefill_dev_trbase.gz, prefill_dev_trearly.gz)
#   there: D=$OUT; OUT=/tmp/s19t PACK=$D scripts/device_s19_trace.sh
# At 16 x 512 and 8 x 2048 (block 16), prefill and fmha: per number of key
# tiles the mean cycles of each phase of a work tile (scripts/prefill_trace.py;
# in trearly's early work tiles "S0" is nil, "lastPV" is the turn of the
# last P V and the next S_0, "epi" the staging, S_0's wait and the copies),
# and the fit cycles = a * key tiles + b. Then the SASS of both builds'
# BF16 rows kernel (cuobjdump, there: this machine has none) for the steady
# loop's instruction count. Logs in $OUT, packed into $PACK/s19t.tgz.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s19tout}
PACK=${PACK:-.}
mkdir -p "$OUT/trace" build-sm90dev
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
for n in trbase trearly; do
  gunzip -c "build-ab/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/summary.txt"
for s in "16 512 16" "8 2048 16"; do
  for n in trbase trearly; do
    WS_TRACE="$OUT/trace/${n}_${s// /_}" timeout 60 "build-sm90dev/prefill_dev_$n" trace $s >/dev/null 2>&1
    echo "$n $s rc=$?" >>"$OUT/summary.txt"
  done
done
for t in "$OUT"/trace/tr*; do
  python3 scripts/prefill_trace.py "$t" >"$t.txt" 2>&1
  grep -E "^(fit|steady)" "$t.txt" | sed "s|^|$(basename "$t"): |"
done | tee -a "$OUT/summary.txt"
for n in trbase trearly; do
  cuobjdump -sass "build-sm90dev/prefill_dev_$n" >"$OUT/sass_$n.txt" 2>&1
  echo "$n: $(grep -c 'HGMMA' "$OUT/sass_$n.txt") HGMMA, $(wc -l <"$OUT/sass_$n.txt") SASS lines" >>"$OUT/summary.txt"
done
gzip -9 "$OUT"/sass_*.txt
(cd "$OUT" && tar czf "$PACK/s19t.tgz" .)
cat "$OUT/summary.txt"
