#!/usr/bin/env bash
# Prepared in session 10 for session 11 (about 8 minutes), carrying build-s11
# (decode probes, gzipped: decode_base and decode_wm are the BF16 d128 sweep
# builds without and with PC_DECODE_WARP_MERGE=1, decode_probe_wm the whole
# probe with it) and build-soak/carry:
#   1. the warp-per-head merge (decode_split.cu, PC_DECODE_WARP_MERGE): the
#      probe's checks with it and memcheck on its small cases; `bench4t` of
#      base and wm, interleaved twice. Prediction: the merge's work after the
#      partitions (~2.4 us at 1 x 32768) falls to ~1 us: split 1 x 32768
#      -1.5 us (+2%), 8 x 8192 +1%, the other rows unchanged;
#   2. issue 21's soak on the built-in paths (scripts/device_soak_check.sh run
#      with STEPS=builtin, SOAK_MINUTES=4).
# $OUT: summary.txt, merge.tgz, soakcheck.tgz, steps.txt.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s11c2}
work=/tmp/s11c2
mkdir -p "$dest" "$work"
. scripts/device_steps.sh
BIN=/tmp/s11bin unpack_carry build-s11
summary="$dest/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$summary"
timeout 150 decode_probe_wm check >"$work/check.log" 2>&1
echo "check rc=$? :: $(tail -2 "$work/check.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$summary"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 decode_probe_wm small >"$work/memcheck.log" 2>&1
echo "memcheck rc=$? :: $(grep 'ERROR SUMMARY' "$work/memcheck.log" | tail -1)" | tee -a "$summary"
for round in 1 2; do
  for v in base wm; do
    echo "== $v (round $round)" | tee -a "$summary"
    timeout 60 "decode_$v" bench4t >"$work/bench_${v}_$round.log" 2>&1
    grep -E "^[0-9]" "$work/bench_${v}_$round.log" | grep "/mma" | tee -a "$summary"
  done
done
(cd "$work" && tar czf "$dest/merge.tgz" .)
# The soak check's files stay on the device but for its archive and steps
# (the device tool returns 8 files).
OUT=/tmp/s11soak STEPS=builtin SOAK_MINUTES=4 timeout $((580 - SECONDS)) scripts/device_soak_check.sh run 2>&1 | tail -15 |
  tee -a "$summary"
cp /tmp/s11soak/soakcheck.tgz /tmp/s11soak/steps.txt "$dest/" 2>/dev/null
