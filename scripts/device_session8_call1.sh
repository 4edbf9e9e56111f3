#!/usr/bin/env bash
# The first device call session 7 left (docs/performance.md, session 7,
# "Left for the next call"), about 5 minutes, carrying build-ab4:
#   1. prefill: e4 (scripts/pending/ws_deferred_store.patch: a work tile's
#      output stored under the next work tile's S_0) against base (the
#      committed kernel): the dev driver's checks with the default loaders
#      and with rows forced, memcheck / racecheck / synccheck on e4's small
#      suite; clock stamps of both (trace3 = base, trace4 = e4) at 16 x 512
#      and 8 x 2048, and the steady key tiles' phases of base (trace5,
#      -DPAGECHECK_WS_TRACE=2) at 8 x 2048 and 1 x 8192: what holds a key
#      tile at ~2900 cycles against the 2048 of the tensor cores; then
#      `prefill_dev quick` e4, base, e4, base.
#   2. decode: the split path's stamps at 1 x 32768 and 8 x 8192
#      (partition 1024) and `decode_probe bench4t` for decode_base (2 warps,
#      3 stages of 16 keys, 48 KB a CTA), decode_s6 (6 stages, 96 KB: more
#      loads in flight per warp for long partitions) and decode_k32s3
#      (stages of 32 keys, 3 stages, 96 KB).
# Logs in $OUT/s8.tgz, the summary in $OUT/summary.txt.
# build-ab4 (git-ignored; rebuild here if it is gone):
#   cp kernels/src/prefill/attn_sm90_ws.cu /tmp/e4.cu && patch /tmp/e4.cu scripts/pending/ws_deferred_store.patch
#   scripts/build_prefill_dev.sh base && WS_SRC=/tmp/e4.cu scripts/build_prefill_dev.sh e4
#   scripts/build_prefill_dev.sh trace3 -DPAGECHECK_WS_TRACE=1
#   WS_SRC=/tmp/e4.cu scripts/build_prefill_dev.sh trace4 -DPAGECHECK_WS_TRACE=1
#   scripts/build_prefill_dev.sh trace5 -DPAGECHECK_WS_TRACE=2
#   for n in base e4 trace3 trace4 trace5; do gzip -9 -c build-sm90dev/prefill_dev_$n > build-ab4/prefill_dev_$n.gz; done
#   scripts/build_decode_probe.sh -DPC_DECODE_TRACE=1 -DPC_DECODE_SWEEP_ONLY -o build-ab4/decode_base
#   scripts/build_decode_probe.sh -DPC_DECODE_TRACE=1 -DPC_DECODE_SWEEP_ONLY -DPC_DECODE_TC_SMEM_KB=96 -o build-ab4/decode_s6
#   scripts/build_decode_probe.sh -DPC_DECODE_TRACE=1 -DPC_DECODE_SWEEP_ONLY -DPC_DECODE_TC_KEYS=32 \
#     -DPC_DECODE_TC_SMEM_KB=96 -o build-ab4/decode_k32s3
set -u
cd "$(dirname "$0")/.."
final=${OUT:-./devout-s8}
work=/tmp/s8
mkdir -p "$final" "$work/trace" build-sm90dev
for n in base e4 trace3 trace4 trace5; do
  gunzip -c "build-ab4/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
chmod +x build-ab4/decode_* 2>/dev/null
summary="$final/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$summary"

for s in "16 512 16" "8 2048 16"; do
  for n in trace3 trace4; do
    WS_TRACE="$work/trace/${n}_${s// /_}" timeout 60 "build-sm90dev/prefill_dev_$n" trace $s >/dev/null 2>&1
  done
done
for s in "8 2048 16" "1 8192 16"; do
  WS_TRACE="$work/trace/trace5_${s// /_}" timeout 60 build-sm90dev/prefill_dev_trace5 trace $s >/dev/null 2>&1
done
for t in "$work"/trace/trace*; do python3 scripts/prefill_trace.py "$t" | grep -E "^(fit|steady)" | sed "s|^|$(basename "$t"): |"; done |
  tee -a "$summary"

QUICK=0 OUT="$work/ab" scripts/prefill_ab_run.sh e4 >"$work/checks.log" 2>&1
tee -a "$summary" <"$work/checks.log"
for round in 1 2; do
  for n in e4 base; do
    echo "== $n (round $round)"
    timeout 100 "build-sm90dev/prefill_dev_$n" quick 2>&1 | grep -E "TFLOP|FAIL|rror"
  done
done 2>&1 | tee "$work/quick.log" | grep -v " b[18] \| b64 " | tee -a "$summary"

for v in base s6 k32s3; do
  b=build-ab4/decode_$v
  [ -x "$b" ] || { echo "decode_$v: not built" | tee -a "$summary"; continue; }
  for s in "1 32768" "8 8192"; do
    timeout 60 "$b" trace $s 1024 "$work/trace/decode_${v}_${s// /_}" >"$work/decode_trace_${v}_${s// /_}.log" 2>&1
    python3 scripts/decode_trace.py "$work/trace/decode_${v}_${s// /_}" 2>&1 | sed -n '3,4p;6p' |
      sed "s|^|decode_$v $s: |" | tee -a "$summary"
  done
  timeout 90 "$b" bench4t >"$work/decode_bench_$v.log" 2>&1
  grep -E "mma" "$work/decode_bench_$v.log" | sed "s|^|decode_$v: |" | tee -a "$summary"
done
(cd "$work" && tar czf "$final/s8.tgz" .)
