#!/usr/bin/env bash
# Session 10, second device call (issue 18; about 4 minutes), carrying
# build-s10 (decode probes built with the lean copy, gzipped) and build-ab9
# (decode_probe_lean.gz: the whole probe with the lean copy):
#   1. `decode_probe_lean bench`: every bench shape with direct, split 256 /
#      512 / 1024 and auto, and the layout rows (1 x 32768 and 64 x 4096 HND,
#      64 x 4096 with sequential pages): is 1 x 32768's 74% of DRAM the
#      access pattern (HND / sequential pages faster) or the requests in
#      flight?
#   2. Nsight Compute (SpeedOfLight) over `decode_probe_lean ncu1`'s mma
#      launches: the partition kernel alone at 1 x 32768 (P 512 and 1024),
#      8 x 8192, and 64 x 4096 direct.
#   3. `bench4` of the pipeline variants (all with the lean copy): s96 (6
#      stages a warp, 2 CTAs/SM), w4s96 (4 warps x 3 stages), k32s96 (32-key
#      stages x 3), s72 (4 stages, 3 CTAs/SM), against lean (48 KB, 3 stages).
# $OUT: summary.txt, call.tgz.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s10c2}
work=/tmp/s10c2
mkdir -p "$dest" "$work"
. scripts/device_steps.sh
BIN=/tmp/s10bin unpack_carry build-s10
BIN=/tmp/s10bin unpack_carry build-ab9
summary="$dest/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$summary"
timeout 150 decode_probe_lean bench >"$work/bench_full.log" 2>&1
echo "== decode_probe_lean bench rc=$?" | tee -a "$summary"
grep -E "^[0-9]" "$work/bench_full.log" | grep "/mma" | tee -a "$summary"
timeout 120 ncu --clock-control none --kernel-name regex:decode --launch-count 7 --section SpeedOfLight \
  decode_probe_lean ncu1 >"$work/ncu1.log" 2>&1
echo "== ncu1 rc=$?" | tee -a "$summary"
grep -E "decode_|Duration|DRAM Throughput" "$work/ncu1.log" | sed 's/(pagecheck::gpu::decode::DecodeParams)//' | cut -c1-160 | tee -a "$summary"
for round in 1 2; do
  for v in lean s96 w4s96 k32s96 s72; do
    exe=decode_$v
    [ "$v" = lean ] && exe=decode_lean
    echo "== $v (round $round)" | tee -a "$summary"
    timeout 60 "$exe" bench4 >"$work/bench4_${v}_$round.log" 2>&1
    grep -E "^[0-9]" "$work/bench4_${v}_$round.log" | grep "/mma" | tee -a "$summary"
  done
  [ "$SECONDS" -gt 480 ] && break
done
(cd "$work" && tar czf "$dest/call.tgz" .)
