#!/usr/bin/env bash
# Device-side run of the decode-kernel experiments (kernels/src/dev/decode_probe.cu;
# the tensor-core loop of issue 18 in kernels/src/decode/decode_mma.cuh beside the
# CUDA-core loop), one call, under 4 minutes on an H200 (every step is cut at
# DECODE_DEADLINE_S, 225 s by default, and a step that would start later is skipped):
#   1. SASS summary of devbin/decode_probe (HMMA, LDSM, LDGSTS, local memory);
#   2. round A of the benches: decode_probe bench4 (every path of the five
#      bench4 shapes, mma and simt rows), then each variant devbin/probe_*
#      bench4t (direct and split:1024 of the BF16 shapes, mma and simt rows);
#   3. the probe's checks (both loops against the float64 CPU loop),
#      memcheck and racecheck on its small cases;
#   4. round B: the variants in reverse order, then decode_probe bench4t;
#   5. ncu on both loops only with DECODE_NCU=1 (about a minute more).
# Every binary times simt beside mma in the same process, so each log carries
# its own reference row.
# Build here (no GPU needed; devbin is git-ignored, so carry it):
#   scripts/build_decode_probe.sh                                  -> devbin/decode_probe
#   scripts/build_decode_probe.sh -DPC_DECODE_SWEEP_ONLY -D... -o devbin/probe_tc_NAME   (variants)
# Run there (carry devbin): scripts/decode_dev_run.sh     (logs under $OUT, summary on stdout)
set -u
cd "$(dirname "$0")/.."
out=${OUT:-devout}
deadline=${DECODE_DEADLINE_S:-225}
mkdir -p "$out"
chmod +x devbin/* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
linebuf=$(command -v stdbuf >/dev/null && echo "stdbuf -oL")
run() {  # NAME TIMEOUT CMD...
  local name=$1 limit=$2; shift 2
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "$name skipped (deadline)" | tee -a "$out/steps.txt"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS
  timeout "$limit" $linebuf "$@" >"$out/$name.log" 2>&1  # line-buffered: a cut step keeps its rows
  echo "$name rc=$? ($((SECONDS - t0)) s)" | tee -a "$out/steps.txt"
}
variants=$(ls devbin/probe_* 2>/dev/null | grep -v '\.log$')
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
run benchA_decode_probe 45 devbin/decode_probe bench4
for v in $variants; do
  run "benchA_$(basename "$v")" 30 "$v" bench4t
done
run check 100 devbin/decode_probe check
run small_memcheck 45 compute-sanitizer --tool memcheck --error-exitcode 9 devbin/decode_probe small
run small_racecheck 45 compute-sanitizer --tool racecheck --error-exitcode 9 devbin/decode_probe small
for v in $(echo "$variants" | tac); do
  run "benchB_$(basename "$v")" 30 "$v" bench4t
done
run benchB_decode_probe 30 devbin/decode_probe bench4t
if [ "${DECODE_NCU:-0}" = 1 ]; then
  deadline=$((deadline + 90))
  run ncu 85 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
    -k regex:decode_ devbin/decode_probe ncu1
  grep -E "decode_|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots|Warp Cycles Per Issued" \
    "$out/ncu.log" | sed 's/  */ /g' | cut -c1-160 | head -80 >"$out/ncu_summary.txt"
fi
echo "== sass (decode kernels)"
sort -u "$out/sass_summary.txt" | head -60
echo "== checks"
for f in check small_memcheck small_racecheck; do
  [ -f "$out/$f.log" ] || continue
  echo "-- $f: $(grep -E "RESULT|ERROR SUMMARY|RACECHECK SUMMARY" "$out/$f.log" | tail -2 | tr '\n' ' ')"
  grep -m 20 FAIL "$out/$f.log"
done
[ -f "$out/ncu_summary.txt" ] && { echo "== ncu"; cat "$out/ncu_summary.txt"; }
echo "== benches: KV GB/s by build (A = first round, B = second), mma and simt rows of each process"
for f in "$out"/bench*.log; do
  grep -E "^[0-9]+x[0-9]+ " "$f" | awk -v b="$(basename "$f" .log)" '{print $1, $2, b, $6}'
done | sort -k1,1 -k2,2 -k3,3 | awk '{k = $1 " " $2; if (k != last) {if (last != "") print line; line = sprintf("%-14s %-20s", $1, $2); last = k}
  sub(/^bench/, "", $3); sub(/_probe_tc_|_decode_/, ":", $3); line = line sprintf(" %s %s", $3, $4)} END {print line}'
echo "== steps"
cat "$out/steps.txt"
