#!/usr/bin/env bash
# Session 9's second device call (about 8 minutes on an H100), carrying
# build-call2 (external.tgz and pagecheck.gz of
# `scripts/device_flashinfer_check.sh build 90`, pagecheck-slow.gz of
# `scripts/compare_check.sh build 90`, prefill_dev_stmdef.gz of
# `scripts/build_prefill_dev.sh stmdef`, all from the tree with stmatrix
# staging as the default):
#   1. scripts/device_bench_peers.sh: pagecheck bench with FlashInfer's
#      entries beside PyTorch's cuDNN / FlashAttention-2, twice interleaved
#      (issues 18, 20, 24);
#   2. `prefill_dev quick` (the FMHA kernel alone, the dev driver's shapes);
#   3. scripts/compare_check.sh run (issue 22: one binary twice = same; the
#      split-twice mutant = slower on split rows only);
#   4. Nsight Compute over the split decode path's launches (issue 18: the
#      1 x 32768 partition kernel).
# $OUT: peers.tgz, compare.tgz, ncu-decode-split.txt, summary.txt.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s9c2}
mkdir -p "$dest"
{
  OUT=/tmp/peers CARRY=build-call2 timeout 300 scripts/device_bench_peers.sh 2>&1 | tail -60
  cp /tmp/peers/peers.tgz "$dest/" 2>/dev/null
  echo "== prefill_dev quick (stmatrix staging, the default)"
  timeout 60 /tmp/pcbin/prefill_dev_stmdef quick 2>&1 | grep -E "TFLOP|FAIL|rror"
  echo "== compare_check"
  OUT=/tmp/compareout BIN=/tmp/pcbin timeout 200 scripts/compare_check.sh run 2>&1 | tail -12
  (cd /tmp/compareout && tar czf "$dest/compare.tgz" ./*.json ./*.txt ./*.log ./*.xml 2>/dev/null)
  echo "== ncu decode split"
  timeout 120 ncu --clock-control none -k "regex:decode_partition|decode_merge" --launch-count 8 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis \
    /tmp/pcbin/pagecheck bench --shapes decode --paths split --no-checks --no-timing >"$dest/ncu-decode-split.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "decode_partition|decode_merge|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Waves Per SM|No Eligible|Issued Warp" \
    "$dest/ncu-decode-split.txt" | head -120
} >"$dest/summary.txt" 2>&1
cat "$dest/summary.txt"
