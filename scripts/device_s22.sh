#!/usr/bin/env bash
# Session 22's layout experiment (issue 24): what the cold code between
# the key-tile loop and the epilogue costs. Nsight Compute (session 22,
# 16 x 512) put a third of the epilogue's stall samples on "no
# instruction"; the softcap copy of the loop and the cold output paths sit
# between and inside the hot code. Developer knobs (attn_sm90_ws.cu) drop
# them, running the kept path where a case needs them (wrong results), so
# only `prefill_dev quick` (BF16, whole tiles, no softcap) runs on them:
#   here:  scripts/prepare_device_calls.sh ab   (the variants and their
#          defines are listed there; each is scripts/build_prefill_dev.sh NAME
#          -D..., gzipped into build-ab, with decode_probe; s22tanh
#          -DPAGECHECK_WS_FAST_TANH=1 and s22ls -DPAGECHECK_WS_LEAN_SOFTCAP=1
#          only on request)
#   there: D=$OUT; OUT=/tmp/s22 PACK=$D scripts/device_s22.sh   (carrying build-ab)
# The lean builds give wrong results wherever a case needs what they
# dropped, so they only time. s22flat (the row statistics without jumps)
# and s22tanh (the softcap's tanh by ex2 and rcp) are product candidates,
# s22cand both, and s22sk (softcap cases in kernels of their own, what
# s22ls times in product form), and s22desc (the wgmma descriptors of the
# k-steps by one add from a base, wgmma_tile.cuh): the dev checks run on
# s22cand, s22sk and s22desc (softcap cases included).
# 1. `prefill_dev quick` for each build in round 1, and for NS2 in round 2;
#    then `prefill_dev fp8` (E4M3 beside BF16) for FP8S: s22wb2 and s22wb4
#    load 2 or 4 staged FP8 chunks before widening the first (issue 24's
#    E4M3 target; the producer's most sampled lines waited on each load).
# 2. `prefill_dev check` on s22cand, s22sk, s22desc and s22wb4.
# 2b. (issue 18) `decode_probe roof`: this card's read ceilings, contiguous
#    and paged, for the decode ratios of the product call that follows on
#    the same machine (session 22's cuDNN read 3045 GB/s at 64 x 4096,
#    2.8% above pagecheck's direct kernel, on a card whose ceiling that
#    call did not measure).
# 3. Nsight Compute's stall samples by SASS line at 16 x 512 for s22base
#    and s22lean (scripts/prefill_prof.sh), while the clock allows.
# 4. The SASS of both (cuobjdump and nvdisasm are on the device machine),
#    for where the epilogue lands.
# Logs in $OUT, packed into $PACK/s22.tgz (the device returns 8 files at
# most); the summary beside it.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s22out}
PACK=${PACK:-.}
root=$(pwd)
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
mkdir -p "$OUT" build-sm90dev
t0=$(date +%s)
# Output to /dev/null: a watchdog holding the caller's stdout keeps the
# device call open until its sleep ends (session 22's product call).
(sleep "${WATCHDOG:-560}" && cd "$OUT" && tar czf "$PACK/s22_partial.tgz" .) >/dev/null 2>&1 &
watchdog=$!
disown "$watchdog"  # no `wait` may wait for it
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader >"$S"
NS=${NS:-s22base s22flat s22cand s22sk s22desc s22lean s22le}  # s22tanh, s22ls: built on request
NS2=${NS2:-s22base s22flat s22sk s22desc}
FP8S=${FP8S:-s22base s22wb2 s22wb4}
for n in $NS $FP8S; do
  [ -x "build-sm90dev/prefill_dev_$n" ] && continue
  [ -f "build-ab/prefill_dev_$n.gz" ] || { echo "missing build-ab/prefill_dev_$n.gz" >>"$S"; continue; }
  gunzip -c "build-ab/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
# timed MODE TAG BEFORE NAME...: `prefill_dev_NAME MODE` for each build
# while the clock is under BEFORE s, its log as MODE_NAME_TAG.log and its
# timing lines in the summary.
timed() {
  local mode=$1 tag=$2 before=$3 n
  shift 3
  for n in "$@"; do
    [ -x "build-sm90dev/prefill_dev_$n" ] || continue
    [ $(($(date +%s) - t0)) -lt "$before" ] || break
    timeout 60 "build-sm90dev/prefill_dev_$n" "$mode" >"$OUT/${mode}_${n}_$tag.log" 2>&1
    { echo "== $mode $n, $tag (rc $?, $(($(date +%s) - t0)) s)"; grep -E "TFLOP|FAIL|rror" "$OUT/${mode}_${n}_$tag.log"; } >>"$S"
  done
}
timed quick 1 "${BUDGET:-300}" $NS
timed quick 2 "${BUDGET:-300}" $NS2
timed fp8 1 "${FP8_BEFORE:-390}" $FP8S
for n in s22cand s22sk s22desc s22wb4; do
  [ -x "build-sm90dev/prefill_dev_$n" ] || continue
  timeout "${CHECK_S:-90}" "build-sm90dev/prefill_dev_$n" check >"$OUT/check_$n.log" 2>&1
  echo "check $n: rc=$? $(grep -c FAIL "$OUT/check_$n.log") FAIL lines; $(tail -1 "$OUT/check_$n.log") ($(($(date +%s) - t0)) s)" >>"$S"
done
if [ -f build-ab/decode_probe.gz ]; then
  gunzip -c build-ab/decode_probe.gz >build-sm90dev/decode_probe && chmod +x build-sm90dev/decode_probe
  timeout 90 build-sm90dev/decode_probe roof >"$OUT/roof.log" 2>&1
  { echo "== decode_probe roof rc=$? ($(($(date +%s) - t0)) s)"; cat "$OUT/roof.log"; } >>"$S"
fi
for n in ${PROF:-s22base s22lean}; do
  [ $(($(date +%s) - t0)) -lt "${PROF_BEFORE:-440}" ] || break
  OUT=$OUT/prof_$n timeout 150 scripts/prefill_prof.sh "$n" "16 512 16" >/dev/null 2>&1
  echo "prof $n rc=$? at $(($(date +%s) - t0)) s" >>"$S"
  for f in "$OUT"/prof_"$n"/stalls_*.txt; do
    [ -f "$f" ] && { echo "== $n $(basename "$f")"; grep -E "^consumers|^producer|^total" "$f"; } >>"$S"
  done
done
echo "done at $(($(date +%s) - t0)) s" >>"$S"
(cd "$OUT" && tar czf "$PACK/s22.tgz" .)
cp "$S" "$PACK/s22_summary.txt"
for n in ${SASS:-s22base s22lean}; do
  [ $(($(date +%s) - t0)) -lt "${SASS_BEFORE:-540}" ] && command -v cuobjdump >/dev/null || break
  rm -rf "/tmp/s22_cubin_$n" && mkdir -p "/tmp/s22_cubin_$n"
  (cd "/tmp/s22_cubin_$n" && cuobjdump -xelf all "$root/build-sm90dev/prefill_dev_$n" >/dev/null 2>&1)
  for c in /tmp/s22_cubin_"$n"/*sm_90a*.cubin; do
    [ -f "$c" ] || continue
    if nvdisasm -g -c "$c" 2>/dev/null | grep -q attn_ws_kernel; then
      nvdisasm -g -c "$c" 2>/dev/null | gzip -9 >"$PACK/sass_$n.gz"
      break
    fi
  done
done
ls -la "$PACK" >>"$PACK/s22_summary.txt"
pkill -P "$watchdog" 2>/dev/null  # its sleep
kill "$watchdog" 2>/dev/null
cat "$S"
