#!/usr/bin/env bash
# Session 9's third device call (about 5 minutes on an H100), carrying
# build-ab8 (gzip -9 of build-sm90dev/prefill_dev_NAME, built by
# scripts/build_prefill_dev.sh):
#   stmdef = e25fe8c's kernel (stmatrix staging, the default);
#   mk     = stmdef + the causal/window mask's row -> token by fast_div
#            (the integer division it had on masked key tiles);
#   cr     = mk + -DPC_WS_LAZY_RESCALE=1 (softmax_rows_lazy: a row's
#            reference max moves only when a tile's max exceeds it by 2^8);
#   tlcr   = cr + -DPAGECHECK_WS_TRACE=4 (the key-tile timeline).
# cr: the dev checks with both loaders and memcheck / racecheck / synccheck;
# mk: the dev checks; then `prefill_dev quick` of stmdef, mk, cr, twice, and
# the timeline of tlcr at 8 x 2048 and 1 x 8192 (scripts/prefill_timeline.py).
# $OUT: summary.txt, s9c3.tgz.
set -u
cd "$(dirname "$0")/.."
final=${OUT:-./devout-s9c3}
work=/tmp/s9c3
mkdir -p "$final" "$work/trace" build-sm90dev
for n in stmdef mk cr tlcr; do
  gunzip -c "build-ab8/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
summary="$final/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$summary"
QUICK=0 OUT="$work/ab_cr" timeout 330 scripts/prefill_ab_run.sh cr 2>&1 | grep -E "^check|FAIL|memcheck|racecheck|synccheck" |
  head -10 | sed "s|^|cr |" | tee -a "$summary"
SAN=0 QUICK=0 OUT="$work/ab_mk" timeout 200 scripts/prefill_ab_run.sh mk 2>&1 | grep -E "^check|FAIL" | head -6 |
  sed "s|^|mk |" | tee -a "$summary"
quick() {
  for n in stmdef mk cr; do
    echo "== $n (round $1)"
    timeout 100 "build-sm90dev/prefill_dev_$n" quick 2>&1 | grep -E "TFLOP|FAIL|rror"
  done 2>&1 | tee -a "$summary"
}
quick 1
for s in "8 2048 16" "1 8192 16" "16 512 16"; do
  WS_TRACE="$work/trace/tlcr_${s// /_}" timeout 60 build-sm90dev/prefill_dev_tlcr trace $s >/dev/null 2>&1
  for t in "$work/trace/tlcr_${s// /_}".timeline.*; do
    echo "== $(basename "$t")"
    python3 scripts/prefill_timeline.py "$t" 40 6
  done
done 2>&1 | tee "$work/timeline.txt" | grep -E "^==|median" | tee -a "$summary"
quick 2
(cd "$work" && tar czf "$final/s9c3.tgz" .)
