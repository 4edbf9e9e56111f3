#!/usr/bin/env bash
# Nsight Compute on the split decode path's partition kernel (device side;
# issue 18): one launch per chosen bench shape with WarpStateStats,
# SourceCounters and SpeedOfLight, then the stall samples by SASS line
# (scripts/ncu_source_stalls.py) as text under $OUT, the source table
# gzipped for reading on the build machine.
#   scripts/decode_stalls.sh [SKIP ...]    (pagecheck on PATH)
# SKIP is the partition launch to profile in `pagecheck bench --shapes decode
# --paths split --no-checks --no-timing` (one launch per shape, in the
# bench's order: 0 = 64 x 4096, 1 = 256 x 1024, 2 = 8 x 8192, 3 = 1 x 32768;
# default 3 2).
set -u
cd "$(dirname "$0")/.."
out=${OUT:-devout}
mkdir -p "$out"
[ $# -gt 0 ] || set -- 3 2
for skip in "$@"; do
  rep=/tmp/decode_stalls_$skip
  timeout 200 ncu --clock-control none --kernel-name regex:decode_partition --launch-skip "$skip" --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis \
    -f -o "$rep" pagecheck bench --shapes decode --paths split --no-checks --no-timing >"$out/ncu_decode_$skip.log" 2>&1
  echo "ncu launch $skip rc=$?"
  ncu --import "$rep.ncu-rep" --page details --print-units base >"$out/details_decode_$skip.txt" 2>&1
  ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"/tmp/src_decode_$skip.csv" 2>/dev/null
  python3 scripts/ncu_source_stalls.py "/tmp/src_decode_$skip.csv" >"$out/stalls_decode_$skip.txt" 2>&1
  gzip -9 -c "/tmp/src_decode_$skip.csv" >"$out/src_decode_$skip.csv.gz"
  head -3 "$out/stalls_decode_$skip.txt"
done
