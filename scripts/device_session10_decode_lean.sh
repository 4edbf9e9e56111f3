#!/usr/bin/env bash
# The lean whole-page copy of the tensor-core decode loop
# (PC_DECODE_TC_LEAN_COPY=1, decode_mma.cuh; built in session 9, not yet run),
# on the device in one call (about 4 minutes), carrying build-ab9:
#   decode_base        scripts/build_decode_probe.sh -DPC_DECODE_SWEEP_ONLY -o build-ab9/decode_base
#   decode_lean        ... -DPC_DECODE_SWEEP_ONLY -DPC_DECODE_TC_LEAN_COPY=1 -o build-ab9/decode_lean
#   decode_probe_lean  scripts/build_decode_probe.sh -DPC_DECODE_TC_LEAN_COPY=1 -o build-ab9/decode_probe_lean
# and mufu_probe (below) (gzip -9 each). Steps: the probe's checks with the lean copy (both loops
# against the float64 CPU loop over every cache dtype, block sizes 1-256,
# windows, graphs with a changed table) and memcheck on its small cases;
# then `bench4t` (direct and split:1024 of the four BF16 shapes, mma and simt
# rows) of base and lean, interleaved twice. Prediction: the loop's copy
# shrinks from ~240 to ~95 instructions a chunk (of ~500), so the split
# path at 1 x 32768 (one warp per scheduler) gains most.
# $OUT: summary.txt, lean.tgz.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-lean}
work=/tmp/lean
mkdir -p "$dest" "$work"
. scripts/device_steps.sh
BIN=/tmp/leanbin unpack_carry build-ab9
summary="$dest/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$summary"
probe_checks /tmp/leanbin/decode_probe_lean "$work" "$summary"
# The special-function unit's exponential throughput against FFMA on one SM
# (kernels/src/dev/mufu_probe.cu: nvcc -O3 -arch=sm_90 ... -o build-ab9/mufu_probe):
# whether the prefill softmax's ~1000 cycles for 66 MUFU.EX2 a warp are the
# unit's rate (16 results per SM per cycle would make them 528).
timeout 30 /tmp/leanbin/mufu_probe 2>&1 | tee -a "$summary"
for round in 1 2; do
  for v in base lean; do
    echo "== $v (round $round)" | tee -a "$summary"
    timeout 60 "/tmp/leanbin/decode_$v" bench4t >"$work/bench_${v}_$round.log" 2>&1
    grep -E "GB/s|FAIL|rror" "$work/bench_${v}_$round.log" | tee -a "$summary"
  done
done
(cd "$work" && tar czf "$dest/lean.tgz" .)
