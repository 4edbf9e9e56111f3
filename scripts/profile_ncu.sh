#!/usr/bin/env bash
# Hardware-counter profiles of the benchmark shapes (issue 10: the profile
# that explains each gap), on the GPU machine (ncu needs the Firecracker
# runtime; --clock-control none leaves the clocks as found):
#   scripts/profile_ncu.sh            after device_check.sh's unpack (pagecheck on PATH)
# For each kernel family, ncu's speed-of-light, occupancy, launch, warp-state
# (stall reasons), scheduler, compute/memory workload and source-counter
# sections over one launch per benchmark shape: the sm_90a wgmma prefill and
# FMHA kernels, the portable mma.sync kernel (PAGECHECK_ATTN_KERNEL=mma), the
# direct decode kernel and the split partition kernel (reports: $OUT/ncu-*.txt);
# then the warp stall reasons of one launch per family ($OUT/stall-*.csv), and
# a summary of both. Numbers of 2026-12-03: docs/performance.md, "Issue 10".
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
# Warp stall reasons (cycles per issued instruction, per warp) of one launch
# per family: the WarpStateStats section's raw metrics as CSV, summarised.
stalls() {  # NAME REGEX SKIP COUNT CMD...
  local name=$1 regex=$2 skip=$3 count=$4; shift 4
  timeout 120 ncu --clock-control none -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
    --section WarpStateStats --section SpeedOfLight --csv --page raw "$@" >"$out/stall-$name.csv" 2>"$out/stall-$name.err"
  echo "stall-$name rc=$?"
}
stalls prefill attn_sm90 0 4 pagecheck bench --shapes prefill --paths prefill "${one[@]}"
stalls direct decode_direct 0 1 pagecheck bench --shapes decode --paths direct "${one[@]}"
stalls split decode_partition 3 1 pagecheck bench --shapes decode --paths split "${one[@]}"
python3 - "$out" <<'PY'
import csv, glob, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "stall-*.csv"))):
    rows = list(csv.reader(l for l in open(f) if l.startswith('"')))
    print("==", os.path.basename(f))
    for d in rows[2:]:
        vals = dict(zip(rows[0], d))
        stalls = []
        for h, v in vals.items():
            if "issue_stalled" in h and h.endswith("per_issue_active.ratio") and "not_issued" not in h:
                try:
                    stalls.append((float(v.replace(",", "")), h.split("issue_stalled_")[1].replace("_per_issue_active.ratio", "")))
                except ValueError:
                    pass
        stalls.sort(reverse=True)
        print(f"  {vals.get('Kernel Name', '?')[:60]} grid {vals.get('Grid Size', '')} {vals.get('gpu__time_duration.sum', '?')} ns")
        print("    " + ", ".join(f"{n} {v:.2f}" for v, n in stalls[:9]))
PY
for f in "$out"/ncu-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Stall|Block Limit|Executed Ipc A|Dynamic Shared" "$f" |
    sed 's/   */ /g' | head -80
done
