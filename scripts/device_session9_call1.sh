#!/usr/bin/env bash
# Session 9's first device call (about 3.5 minutes), carrying build-ab7:
#   fd  = a24cb20's kernel (ot: the output by tensor copies) with the work
#         decoding's and the epilogue's run-time divisions as multiply-high
#         and shift (pagecheck/fast_div.hpp);
#   stm = fd with the output rows staged by stmatrix (-DPC_WS_STMATRIX=1: 8
#         stores a thread where st.shared.b32 took 32);
#   alt = fd with the turn passed after the softmax in the steady key tiles
#         (-DPC_WS_TURN_AFTER_SOFTMAX=1: the two warpgroups' softmaxes never
#         at once);
#   the dev driver's checks (both loaders) and memcheck / racecheck /
#   synccheck of stm (which holds fd's code too), alt's checks, then
#   `prefill_dev quick` ot, fd, stm, alt, twice;
#   tl2 = fd with -DPAGECHECK_WS_TRACE=4: CTA 0's steady key tiles one by
#         one at 8 x 2048 and 1 x 8192, read by scripts/prefill_timeline.py
#         (when the two consumer warpgroups' S, softmax and P V run against
#         each other: session 8 found the key tile at ~2900 cycles against
#         the tensor cores' 2048, with each warpgroup's softmax at ~1500).
# Results in $OUT/summary.txt as they come, logs in $OUT/s9c1.tgz.
# build-ab7 (git-ignored; rebuild here if it is gone):
#   WS_SRC=<a24cb20's attn_sm90_ws.cu> scripts/build_prefill_dev.sh ot
#   scripts/build_prefill_dev.sh fd; scripts/build_prefill_dev.sh tl2 -DPAGECHECK_WS_TRACE=4
#   scripts/build_prefill_dev.sh stm -DPC_WS_STMATRIX=1
#   scripts/build_prefill_dev.sh alt -DPC_WS_TURN_AFTER_SOFTMAX=1
#   for n in ot fd stm alt tl2; do gzip -9 -c build-sm90dev/prefill_dev_$n > build-ab7/prefill_dev_$n.gz; done
set -u
cd "$(dirname "$0")/.."
final=${OUT:-./devout-s9c1}
work=/tmp/s9c1
mkdir -p "$final" "$work/trace" build-sm90dev
for n in ot fd stm alt tl2; do
  gunzip -c "build-ab7/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
summary="$final/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$summary"
QUICK=0 OUT="$work/ab" scripts/prefill_ab_run.sh stm 2>&1 | grep -E "^check|FAIL|memcheck|racecheck|synccheck" | head -10 |
  tee -a "$summary"
SAN=0 QUICK=0 OUT="$work/ab_alt" scripts/prefill_ab_run.sh alt 2>&1 | grep -E "^check" | sed "s|^|alt |" | tee -a "$summary"
quick() {
  for n in ot fd stm alt; do
    echo "== $n (round $1)"
    timeout 100 "build-sm90dev/prefill_dev_$n" quick 2>&1 | grep -E "TFLOP|FAIL|rror"
  done 2>&1 | grep -v " b[18] \| b64 " | tee -a "$summary"
}
quick 1
for s in "8 2048 16" "1 8192 16"; do
  WS_TRACE="$work/trace/tl2_${s// /_}" timeout 60 build-sm90dev/prefill_dev_tl2 trace $s >/dev/null 2>&1
  for t in "$work/trace/tl2_${s// /_}".timeline.*; do
    echo "== $(basename "$t")"
    python3 scripts/prefill_timeline.py "$t" 40 6
  done
done 2>&1 | tee "$work/timeline.txt" | grep -E "^==|median" | tee -a "$summary"
quick 2
(cd "$work" && tar czf "$final/s9c1.tgz" .)
