#!/usr/bin/env bash
# Hardware-counter profiles of the benchmark shapes (issue 10: the profile
# that explains each gap), on the GPU machine (ncu needs the Firecracker
# runtime; --clock-control none leaves the clocks as found):
#   scripts/profile_ncu.sh            after device_check.sh's unpack (pagecheck on PATH)
# For each kernel family, ncu's speed-of-light, occupancy, launch, warp-state
# (stall reasons), scheduler, compute/memory workload and source-counter
# sections over one launch per benchmark shape: the sm_90a wgmma prefill and
# FMHA kernels, the portable mma.sync kernel (PAGECHECK_ATTN_KERNEL=mma), the
# direct decode kernel and the split partition kernel. Reports and a summary
# of the key lines go to $OUT/ncu-*.txt.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-devout}
mkdir -p "$out"
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section SourceCounters)
prof() {  # NAME KERNEL_REGEX COUNT TIMEOUT CMD...
  local name=$1 regex=$2 count=$3 limit=$4; shift 4
  local t0=$SECONDS
  timeout "$limit" ncu --clock-control none -k "regex:$regex" --launch-count "$count" "${sections[@]}" "$@" \
    >"$out/ncu-$name.txt" 2>&1
  echo "ncu-$name rc=$? ($((SECONDS - t0)) s)"
}
one=(--no-checks --no-timing)
prof prefill attn_sm90 4 150 pagecheck bench --shapes prefill --paths prefill "${one[@]}"
prof fmha attn_sm90 4 150 pagecheck bench --shapes prefill --paths fmha "${one[@]}"
prof prefill_mma attn_kernel 2 120 env PAGECHECK_ATTN_KERNEL=mma pagecheck bench --shapes prefill --paths prefill "${one[@]}"
prof decode_direct decode_direct 2 120 pagecheck bench --shapes decode --paths direct "${one[@]}"
prof decode_split "decode_partition|decode_merge" 8 120 pagecheck bench --shapes decode --paths split "${one[@]}"
for f in "$out"/ncu-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Stall|Block Limit|Executed Ipc A|Dynamic Shared" "$f" |
    sed 's/   */ /g' | head -80
done
