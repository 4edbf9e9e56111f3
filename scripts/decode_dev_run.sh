#!/usr/bin/env bash
# Device-side run of the decode-kernel experiments (kernels/src/dev/decode_probe.cu),
# one call: the full probe's checks and memcheck/racecheck on its small cases,
# the benchmark (twice, around the variants), each tile variant's benchmark (BF16 d128 builds,
# scripts/build_decode_probe.sh -DPC_DECODE_SWEEP_ONLY -D...), and ncu kernel times.
# Build here (no GPU needed), then carry devbin:
#   scripts/build_decode_probe.sh                                   -> devbin/decode_probe
#   scripts/build_decode_probe.sh -DPC_DECODE_SWEEP_ONLY -DPC_DECODE_STAGES=4 ... -o devbin/probe_NAME
# Run there: scripts/decode_dev_run.sh        (logs under $OUT, a table last)
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
run check 150 devbin/decode_probe check
run small_memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 devbin/decode_probe small
run small_racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 9 devbin/decode_probe small
run bench_probe 90 devbin/decode_probe bench4
for v in devbin/probe_*; do
  [ -x "$v" ] || continue
  run "bench_$(basename "$v")" 90 "$v" bench4
done
run bench_probe_again 90 devbin/decode_probe bench4
run ncu 150 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
  --section WarpStateStats devbin/decode_probe ncu1
grep -E "Duration|DRAM Throughput|Memory Throughput|decode_|Registers Per|Achieved Occupancy|Theoretical Occ" \
  "$out/ncu.log" | sed 's/  */ /g' | head -60 >"$out/ncu_summary.txt"
echo "== checks"
for f in check small_memcheck small_racecheck; do
  echo "-- $f: $(grep -E "RESULT|ERROR SUMMARY|RACECHECK SUMMARY" "$out/$f.log" | tail -2 | tr '\n' ' ')"
done
echo "== ncu"
cat "$out/ncu_summary.txt"
echo "== benches (us, KV GB/s)"
for f in "$out"/bench_*.log; do
  echo "-- $(basename "$f" .log)"
  grep -E "^[0-9]+x[0-9]+ " "$f" | awk '{printf "  %-10s %-14s med %7s  GB/s %7s  graph %7s\n", $1, $2, $3, $6, $7}'
done
echo "== steps"
cat "$out/steps.txt"
