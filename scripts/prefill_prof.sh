#!/usr/bin/env bash
# Nsight Compute on the warp-specialised prefill kernel (device side): one
# launch of the FMHA (contiguous) and one of the paged kernel per shape of
# `prefill_dev prof SEQS LEN BLOCK`, with WarpStateStats and SourceCounters;
# then, per launch, the instructions and stall reasons of the producer and
# the consumers, the SASS lines with the most stall samples (where the warps
# wait) and the warp-state breakdown, as text under $OUT, with the source
# table gzipped (src_*.csv.gz, for reading on the build machine).
#   scripts/prefill_prof.sh NAME "SEQS LEN BLOCK" ...   (binary build-sm90dev/prefill_dev_NAME)
set -u
cd "$(dirname "$0")/.."
out=${OUT:-devout}
mkdir -p "$out"
name=$1; shift
mkdir -p build-sm90dev
bin=$PWD/build-sm90dev/prefill_dev_$name
[ -f "build-ab/prefill_dev_$name.gz" ] && gunzip -c "build-ab/prefill_dev_$name.gz" >"$bin"
chmod +x "$bin"
for shape in "$@"; do
  tag=$(echo "$shape" | tr ' ' '_')
  rep=/tmp/prof_$tag
  timeout 200 ncu --clock-control none --kernel-name regex:attn_ws_kernel --launch-count 2 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -f -o "$rep" "$bin" prof $shape \
    >"$out/ncu_$tag.log" 2>&1
  ncu --import "$rep.ncu-rep" --page details --print-units base >"$out/details_$tag.txt" 2>&1
  for id in 0 1; do
    ncu --import "$rep.ncu-rep" --page source --csv --print-source sass --launch-skip $id --launch-count 1 \
      >"/tmp/src_${tag}_$id.csv" 2>/dev/null ||
      ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"/tmp/src_${tag}_$id.csv" 2>/dev/null
    python3 scripts/ncu_source_stalls.py "/tmp/src_${tag}_$id.csv" >"$out/stalls_${tag}_$id.txt" 2>&1
    gzip -9 -c "/tmp/src_${tag}_$id.csv" >"$out/src_${tag}_$id.csv.gz"  # the whole table, for reading here
  done
done
ls -la "$out"
