#!/usr/bin/env bash
# Session 21's third call (issue 24, 16 x 512): how much K/V the first wave
# of work tiles reads. Each CTA's first work tile cost about 28 000 cycles
# more than its second at 16 x 512 (trbase3 stamps by item,
# docs/performance.md, session 21), where the first section's 100 pairs put
# 25.6 MB of K/V into the first wave. A developer knob sets the section's
# pairs at run time (PAGECHECK_WS_SECTION_PAIRS, built with
# -DPAGECHECK_WS_SECTION_ENV=1).
#   here:  scripts/build_prefill_dev.sh sec -DPAGECHECK_WS_SECTION_ENV=1
#          scripts/build_prefill_dev.sh trsec3 -DPAGECHECK_WS_SECTION_ENV=1 -DPAGECHECK_WS_TRACE=3
#          scripts/build_prefill_dev.sh secw4 -DPAGECHECK_WS_SECTION_WAVES=4 -DPAGECHECK_WS_SECTION_ENV=1
#          for n in sec trsec3 secw4; do gzip -9 -c build-sm90dev/prefill_dev_$n >build-ab/prefill_dev_$n.gz; done
#   there: D=$OUT; OUT=/tmp/s21b PACK=$D scripts/device_s21b.sh   (carrying build-ab)
# 1. `prefill_dev quick` with the default sections, with the candidate
#    rule (w4: secw4, sections capped at 4 waves of work tiles,
#    -DPAGECHECK_WS_SECTION_WAVES=4) and with 33, 16, 9 and 64 pairs, two
#    interleaved rounds.
# 2. trsec3's stamps at 16 x 512 with the default and with 33 pairs.
# 3. The dev driver's checks with 3 pairs a section (many sections, the last
#    one shorter where the pairs are not a multiple of 3).
# 4. Nsight Compute's stall samples by SASS line at 16 x 512 and E4M3
#    8 x 2048 (scripts/prefill_prof.sh), while the clock allows.
# 5. The SASS of trsec3's warp-specialised kernels with line numbers
#    (cuobjdump and nvdisasm are on the device machine, not here), for the
#    epilogue's row sums (stamps 6 to 10: about 870 cycles where their
#    instructions need 150-200).
# Logs in $OUT, packed into $PACK/s21b.tgz (the device returns 8 files at
# most); the summary and the SASS beside it.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s21bout}
PACK=${PACK:-.}
root=$(pwd)
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
mkdir -p "$OUT/trace" build-sm90dev
t0=$(date +%s)
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >"$S"
for n in sec trsec3 secw4; do
  [ -f "build-ab/prefill_dev_$n.gz" ] || continue
  gunzip -c "build-ab/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
for round in 1 2; do
  for n in ${NS:-default w4 33 16 9 64}; do
    [ $(($(date +%s) - t0)) -lt "${BUDGET:-200}" ] || break
    if [ "$n" = default ]; then
      timeout 60 build-sm90dev/prefill_dev_sec quick >"$OUT/quick_${n}_$round.log" 2>&1
    elif [ "$n" = w4 ]; then
      [ -x build-sm90dev/prefill_dev_secw4 ] || continue
      timeout 60 build-sm90dev/prefill_dev_secw4 quick >"$OUT/quick_${n}_$round.log" 2>&1
    else
      PAGECHECK_WS_SECTION_PAIRS=$n timeout 60 build-sm90dev/prefill_dev_sec quick >"$OUT/quick_${n}_$round.log" 2>&1
    fi
    { echo "== quick, sections of $n pairs, round $round ($(($(date +%s) - t0)) s)"; grep -E "TFLOP|FAIL" "$OUT/quick_${n}_$round.log"; } >>"$S"
  done
done
for n in default 33; do
  if [ "$n" = default ]; then
    WS_TRACE="$OUT/trace/sec_${n}_16_512" timeout 60 build-sm90dev/prefill_dev_trsec3 trace 16 512 16 >/dev/null 2>&1
  else
    PAGECHECK_WS_SECTION_PAIRS=$n WS_TRACE="$OUT/trace/sec_${n}_16_512" timeout 60 build-sm90dev/prefill_dev_trsec3 trace 16 512 16 >/dev/null 2>&1
  fi
  echo "trace $n rc=$?" >>"$S"
done
for t in "$OUT"/trace/*.prefill "$OUT"/trace/*.fmha; do
  [ -f "$t" ] || continue
  { echo "== $(basename "$t")"; python3 scripts/prefill_trace.py --by-item "$t" 2>&1; } >>"$S"
done
PAGECHECK_WS_SECTION_PAIRS=3 timeout ${CHECK_S:-120} build-sm90dev/prefill_dev_sec check >"$OUT/check3.log" 2>&1
echo "check, sections of 3 pairs: rc=$? $(grep -c FAIL "$OUT/check3.log") FAIL lines; $(tail -1 "$OUT/check3.log")" >>"$S"
# 4. Nsight Compute's stall samples by SASS line (scripts/prefill_prof.sh)
#    of the default sections at 16 x 512 (what the epilogue waits on) and
#    of E4M3 at 8 x 2048 (0.88 of BF16 after sts), while the clock allows.
for shape in "16 512 16" "8 2048 16 e4m3"; do
  [ $(($(date +%s) - t0)) -lt "${PROF_BEFORE:-420}" ] || break
  OUT=$OUT/prof timeout 150 scripts/prefill_prof.sh sec "$shape" >/dev/null 2>&1
  echo "prof $shape rc=$? at $(($(date +%s) - t0)) s" >>"$S"
done
for f in "$OUT"/prof/stalls_*.txt; do
  [ -f "$f" ] && { echo "== $(basename "$f")"; head -40 "$f"; } >>"$S"
done
echo "done at $(($(date +%s) - t0)) s" >>"$S"
(cd "$OUT" && tar czf "$PACK/s21b.tgz" .)
cp "$S" "$PACK/s21b_summary.txt"
if [ $(($(date +%s) - t0)) -lt "${SASS_BEFORE:-520}" ] && command -v cuobjdump >/dev/null; then
  mkdir -p /tmp/s21b_cubin
  (cd /tmp/s21b_cubin && cuobjdump -xelf all "$root/build-sm90dev/prefill_dev_trsec3" >/dev/null 2>&1)
  for c in /tmp/s21b_cubin/*sm_90a*.cubin; do
    [ -f "$c" ] || continue
    if nvdisasm -g -c "$c" 2>/dev/null | grep -q attn_sm90_ws; then
      nvdisasm -g -c "$c" 2>/dev/null | gzip -9 >"$PACK/sass_trsec3_ws.gz"
      break
    fi
  done
  ls -la "$PACK" >>"$PACK/s21b_summary.txt"
fi
cat "$S"
