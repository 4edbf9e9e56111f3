#!/usr/bin/env bash
# Clock-stamp runs of prefill_dev trace builds on the GPU machine, for the
# device calls (scripts/device_s19_ab.sh, device_s20_call.sh):
#   scripts/prefill_trace_run.sh DIR SUMMARY NAME...
# Unpacks build-ab/prefill_dev_NAME.gz (a build with -DPAGECHECK_WS_TRACE=N),
# runs `prefill_dev_NAME trace` at 16 x 512 and 8 x 2048 (block 16) with the
# stamps written to DIR/NAME_SHAPE.prefill and .fmha, and reads each with
# scripts/prefill_trace.py into DIR/*.txt; a line a run and every table are
# appended to SUMMARY.
set -u
cd "$(dirname "$0")/.."
dir=$1
summary=$2
shift 2
mkdir -p "$dir" build-sm90dev
for n in "$@"; do
  gunzip -c "build-ab/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
for s in "16 512 16" "8 2048 16"; do
  for n in "$@"; do
    WS_TRACE="$dir/${n}_${s// /_}" timeout 60 "build-sm90dev/prefill_dev_$n" trace $s >/dev/null 2>&1
    echo "$n $s rc=$?" >>"$summary"
  done
done
for t in "$dir"/*.prefill "$dir"/*.fmha; do
  [ -f "$t" ] || continue
  python3 scripts/prefill_trace.py "$t" >"$t.txt" 2>&1
  { echo "== $(basename "$t")"; cat "$t.txt"; } >>"$summary"
done
