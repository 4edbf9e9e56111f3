#!/usr/bin/env bash
# Prepared in session 10 for session 11 (about 9 minutes), carrying build-s11
# (decode probes, gzipped: decode_s10 = session 10's default (the lean copy),
# decode_base = this tree's default (auto's attention loop in one copy),
# decode_wm = decode_base with PC_DECODE_WARP_MERGE=1, all BF16 d128 sweep
# builds; decode_probe_wm = the whole probe of this tree with the warp merge)
# and build-soak/carry:
#   1. the probe's checks (direct, split, auto against the float64 CPU loop)
#      with the warp merge and the one-copy auto, and memcheck on its small
#      cases;
#   2. `bench4` (direct, split 256/512/1024, auto:512:2048) of s10, base and
#      wm, interleaved twice. Predictions: base's auto within noise of its
#      split at every shape (s10's auto ran 1-3% behind split at 1 x 32768);
#      wm's split and auto -1 to -1.5 us at 1 x 32768 (+2%), +1% at 8 x 8192;
#   2b. mufu_probe (kernels/src/dev/mufu_probe.cu, `nvcc -O3 -arch=sm_90`):
#      exp2 on the FMA pipe (`poly`) and half on each unit (`mix`) against
#      MUFU.EX2's 16 results per SM per cycle (the lever for d64);
#   3. issue 21's soak check, STEPS="faulty invariance bench" (the built-in
#      soak of 5 minutes is a call of its own: STEPS=builtin).
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
probe_checks decode_probe_wm "$work" "$summary"
for round in 1 2; do
  for v in s10 base wm; do
    echo "== $v (round $round)" | tee -a "$summary"
    timeout 60 "decode_$v" bench4 >"$work/bench_${v}_$round.log" 2>&1
    grep -E "^[0-9]" "$work/bench_${v}_$round.log" | grep "/mma" | tee -a "$summary"
  done
done
timeout 60 mufu_probe 2>&1 | tee -a "$summary"
# The bench protocol's roofline on this card (decode_roof, session 10's
# `decode_probe roof`): the bound of issue 18's ratios where the card is an
# H200 (measured on the H100 in session 10).
timeout 60 decode_roof roof 2>&1 | tee -a "$summary"
(cd "$work" && tar czf "$dest/merge.tgz" .)
# The soak check's files stay on the device but for its archive and steps
# (the device tool returns 8 files).
OUT=/tmp/s11soak STEPS="faulty invariance bench" timeout $((585 - SECONDS)) scripts/device_soak_check.sh run 2>&1 |
  tail -15 | tee -a "$summary"
cp /tmp/s11soak/soakcheck.tgz /tmp/s11soak/steps.txt "$dest/" 2>/dev/null
