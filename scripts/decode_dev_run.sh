#!/usr/bin/env bash
# Device-side run of the decode-kernel experiments (kernels/src/dev/decode_probe.cu;
# the tensor-core loop of issue 18 in kernels/src/decode_mma.cuh beside the
# CUDA-core loop), one call, about 3-4 minutes on an H200: SASS summary (HMMA, local memory),
# the probe's checks (both loops against the float64 CPU loop), memcheck and
# racecheck on its small cases, the bench shapes (the four BF16 ones, fp8 e4m3 64 x 4096) with mma and simt rows
# side by side (twice, around the tile variants), and ncu on direct 64 x 4096
# and split 1 x 32768 / 8 x 8192 for both loops.
# Build here (no GPU needed; devbin is git-ignored, so carry it):
#   scripts/build_decode_probe.sh                                            -> devbin/decode_probe
#   scripts/build_decode_probe.sh -DPC_DECODE_SWEEP_ONLY -DPC_DECODE_TC_WARPS=1 -o devbin/probe_tc_w1   (optional variants)
# Run there (carry devbin): scripts/decode_dev_run.sh     (logs under $OUT, summary on stdout)
set -u
cd "$(dirname "$0")/.."
out=${OUT:-devout}
mkdir -p "$out"
chmod +x devbin/* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
run() {  # NAME TIMEOUT CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "$name rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/steps.txt"
}
# SASS of the decode kernels: per kernel, HMMA / LDSM / LDGSTS counts and any local memory.
objdump=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$objdump" ]; then
  "$objdump" -sass devbin/decode_probe >"$out/sass.txt" 2>&1
  awk '/Function :/ {if (n) print n, h, l, s, g, loc; n=$3; h=l=s=g=loc=0}
       /HMMA/ {h++} /LDSM/ {l++} /LDGSTS/ {g++} /(^|[^A-Z])(LDL|STL)[. ]/ {loc++}
       END {print n, h, l, s, g, loc}' "$out/sass.txt" |
    awk '$1 ~ /decode/ {printf "%-6s HMMA %4d LDSM %4d LDGSTS %4d local %d  %s\n", ($1 ~ /Tc/ ? "mma" : "simt"), $2, $3, $5, $6, substr($1, 1, 140)}' \
      >"$out/sass_summary.txt"
  gzip -f "$out/sass.txt"
else
  echo "no cuobjdump on this machine" >"$out/sass_summary.txt"
fi
run check 120 devbin/decode_probe check
run small_memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 devbin/decode_probe small
run small_racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 9 devbin/decode_probe small
run bench_probe 45 devbin/decode_probe bench4
for v in devbin/probe_*; do
  [ -x "$v" ] || continue
  run "bench_$(basename "$v")" 45 "$v" bench4
done
run bench_probe_again 45 devbin/decode_probe bench4
run ncu 75 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
  -k regex:decode_ devbin/decode_probe ncu1
grep -E "decode_|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots|Warp Cycles Per Issued" \
  "$out/ncu.log" | sed 's/  */ /g' | cut -c1-160 | head -80 >"$out/ncu_summary.txt"
echo "== sass (decode kernels)"
sort -u "$out/sass_summary.txt" | head -60
echo "== checks"
for f in check small_memcheck small_racecheck; do
  echo "-- $f: $(grep -E "RESULT|ERROR SUMMARY|RACECHECK SUMMARY" "$out/$f.log" | tail -2 | tr '\n' ' ')"
  grep -m 20 FAIL "$out/$f.log"
done
echo "== ncu"
cat "$out/ncu_summary.txt"
echo "== benches (us, KV GB/s)"
for f in "$out"/bench_*.log; do
  echo "-- $(basename "$f" .log)"
  grep -E "^[0-9]+x[0-9]+ " "$f" | awk '{printf "  %-10s %-19s med %7s  GB/s %7s  graph %7s\n", $1, $2, $3, $6, $7}'
done
echo "== steps"
cat "$out/steps.txt"
