#!/usr/bin/env bash
# Session 20's first call (issues 24 and 18), carrying build-ab:
#   here:  scripts/build_prefill_dev.sh base      (at ab7ccda)
#          (at 2dce714, where the half-width last key tile is; removed since:)
#          scripts/build_prefill_dev.sh half
#          scripts/build_prefill_dev.sh half3 -DPAGECHECK_WS_HALF_LAST=3
#          scripts/build_prefill_dev.sh trbase5 -DPAGECHECK_WS_TRACE=5
#          scripts/build_prefill_dev.sh trearly5 -DPAGECHECK_WS_TRACE=5 -DPAGECHECK_WS_EARLY_S=1
#          git show c55d13a:kernels/src/prefill/attn_sm90_ws.cu >/tmp/ws_nopf.cu
#          WS_SRC=/tmp/ws_nopf.cu scripts/build_prefill_dev.sh nopf
#          mkdir -p build-ab; for n in half half3 base nopf trbase5 trearly5; do
#            gzip -9 -c build-sm90dev/prefill_dev_$n >build-ab/prefill_dev_$n.gz; done
#          scripts/build_decode_probe.sh -DPC_DECODE_SWEEP_ONLY -o build-ab/decode_probe && gzip -9 build-ab/decode_probe
#          cp ex2t.cubin build-ab/   (a cubin of ex2.approx.f16x2 / bf16x2, nvcc -arch=sm_90a -cubin)
#   there: D=$OUT; OUT=/tmp/s20 PACK=$D scripts/device_s20_call.sh
# AB. The half-width last key tile (PAGECHECK_WS_HALF_LAST, `half`): the
# dev driver's checks and its small suite under memcheck, racecheck and
# synccheck, then `prefill_dev quick` of half, half3 (its softmax at half
# width too), base and nopf (B below),
# two interleaved rounds (scripts/prefill_ab_run.sh).
# A. Where head dim 128's early S_0 loses its 1300-1700 cycles a work tile
# (docs/performance.md, session 19): the stamps of PAGECHECK_WS_TRACE=5
# (trbase5: the default kernel; trearly5: the early S_0 at head dim 128)
# at 16 x 512 and 8 x 2048, block 16, prefill and fmha. Per key-tile
# count, scripts/prefill_trace.py splits the time before the last turn:
# S_0's softmax where it came early, the steady key tiles, decoding the
# next work tile and the early test, the row sums, the early S_0's query
# and K tile waits, and the last V tile's wait and the turn.
# B. The output's tensor map prefetched at the
# kernel's start (base, since session 19) against c55d13a's kernel
# without it (nopf): `prefill_dev quick`, two interleaved rounds.
# C. (issue 18) `decode_probe roof_paged`, now with NHD pages by tensor
# copies (a tensor map over the pool, boxes of 64 dims x 1 head x 16 slot
# rows) beside 16-byte loads and bulk copies, where build-ab holds
# decode_probe.gz: whether any loader reads the bench's NHD pages faster
# than the direct kernel does (2958 GB/s at 64 x 4096, session 19).
# D. Nsight Compute (scripts/prefill_prof.sh) on base at E4M3 8 x 2048
# (FP8-K with the query by tensor copy: the producer's and the consumers'
# issue and stalls, for E4M3's 0.84 of BF16) and BF16 16 x 512 (the
# work-tile boundary), while the call's clock allows.
# Logs in $OUT, packed into $PACK/s20.tgz (s20_partial.tgz at WATCHDOG s).
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s)
left() { echo $((${1} - ($(date +%s) - t0))); }  # left LINE: seconds until the call's clock reaches LINE
OUT=${OUT:-s20out}
PACK=${PACK:-.}
mkdir -p "$OUT/trace" build-sm90dev
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "$PACK/s20_partial.tgz" .) &
watchdog=$!
export PATH="/usr/local/cuda/bin:$PATH" NO_COLOR=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/summary.txt"
# Whether sm_90a runs ex2.approx.f16x2 / bf16x2 as one MUFU (two
# exponentials an instruction) or two (a probe cubin, if carried).
[ -f build-ab/ex2t.cubin ] && cuobjdump -sass build-ab/ex2t.cubin | grep -E "MUFU|F2F|HADD2|PRMT" >>"$OUT/summary.txt"
OUT=$OUT/ab timeout 330 scripts/prefill_ab_run.sh half half3 base nopf >"$OUT/ab.log" 2>&1
cat "$OUT/ab.log" >>"$OUT/summary.txt"
echo "AB and B done at $(($(date +%s) - t0)) s" >>"$OUT/summary.txt"
if [ -f build-ab/decode_probe.gz ]; then
  gunzip -c build-ab/decode_probe.gz >build-sm90dev/decode_probe && chmod +x build-sm90dev/decode_probe
  timeout 90 build-sm90dev/decode_probe roof_paged >"$OUT/roof_paged.log" 2>&1
  echo "roof_paged rc=$?" >>"$OUT/summary.txt"
  cat "$OUT/roof_paged.log" >>"$OUT/summary.txt"
fi
if [ "$(left 420)" -gt 0 ]; then
  scripts/prefill_trace_run.sh "$OUT/trace" "$OUT/summary.txt" trbase5 trearly5
  echo "A done at $(($(date +%s) - t0)) s" >>"$OUT/summary.txt"
fi
for shape in "8 2048 16 e4m3" "16 512 16"; do
  [ "$(left 380)" -gt 0 ] || continue
  OUT=$OUT/prof timeout "$(left 540)" scripts/prefill_prof.sh base "$shape" >>"$OUT/prof.log" 2>&1
  echo "prof $shape rc=$? at $(($(date +%s) - t0)) s" >>"$OUT/summary.txt"
done
for f in "$OUT"/prof/stalls_*.txt; do
  [ -f "$f" ] && { echo "== $(basename "$f")"; head -40 "$f"; } >>"$OUT/summary.txt"
done
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s20.tgz" .)
cat "$OUT/summary.txt"
