#!/usr/bin/env bash
# Session 8's fourth device call (about 3 minutes), carrying build-ab6:
# ot = the ws kernel with each consumer warp's 16 output rows stored by two
# tensor copies from the Q buffer (released a work tile later, once the
# copies have read it) and approximate division / log2 in the epilogue;
# v0 = the committed kernel (17814a8). The dev checks of ot (default
# loaders, rows forced) first, then `prefill_dev quick` v0 / ot / ot with
# PAGECHECK_WS_OUT_TMA=0 (the old stores), the epilogue's stamps of ot (t9,
# -DPAGECHECK_WS_TRACE=3), memcheck / racecheck / synccheck of ot's small
# suite, and a second quick round. Results go to $OUT/summary.txt as they
# come (a call cut short keeps what it has).
# build-ab6 (git-ignored; rebuild here if it is gone):
#   scripts/build_prefill_dev.sh ot; scripts/build_prefill_dev.sh t9 -DPAGECHECK_WS_TRACE=3
#   WS_SRC=<17814a8's attn_sm90_ws.cu> scripts/build_prefill_dev.sh v0
#   for n in v0 ot t9; do gzip -9 -c build-sm90dev/prefill_dev_$n > build-ab6/prefill_dev_$n.gz; done
set -u
cd "$(dirname "$0")/.."
final=${OUT:-./devout-s8c4}
work=/tmp/s8c4
mkdir -p "$final" "$work/trace" build-sm90dev
for n in v0 ot t9; do
  gunzip -c "build-ab6/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
summary="$final/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$summary"
SAN=0 QUICK=0 OUT="$work/ab" scripts/prefill_ab_run.sh ot 2>&1 | grep -E "^check|FAIL" | head -8 | tee -a "$summary"
quick() {
  for n in v0 ot ot0; do
    echo "== $n (round $1)"
    if [ $n = ot0 ]; then
      PAGECHECK_WS_OUT_TMA=0 timeout 100 build-sm90dev/prefill_dev_ot quick 2>&1 | grep -E "TFLOP|FAIL|rror"
    else
      timeout 100 "build-sm90dev/prefill_dev_$n" quick 2>&1 | grep -E "TFLOP|FAIL|rror"
    fi
  done 2>&1 | grep -v " b[18] \| b64 " | tee -a "$summary"
}
quick 1
for s in "16 512 16" "8 2048 16"; do
  WS_TRACE="$work/trace/t9_${s// /_}" timeout 60 build-sm90dev/prefill_dev_t9 trace $s >/dev/null 2>&1
done
for t in "$work"/trace/*; do python3 scripts/prefill_trace.py "$t" | grep -E "^(fit|epilogue)" | sed "s|^|$(basename "$t"): |"; done |
  tee -a "$summary"
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build-sm90dev/prefill_dev_ot small >"$work/san_$tool.log" 2>&1 &
done
wait
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$work/san_$tool.log" | tail -1)"
done | tee -a "$summary"
quick 2
(cd "$work" && tar czf "$final/s8c4.tgz" .)
