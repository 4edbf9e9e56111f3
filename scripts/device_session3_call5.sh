#!/usr/bin/env bash
# One device call (session 3): test_gpu_core and test_gpu_external with the
# legacy-stream gate's 0.5 s hold (test durations printed), then a stall
# profile of the prefill kernel by SASS line (scripts/prefill_prof.sh).
# Carry build-devcheck/carry and build-ab. Logs in $OUT.
set -u
cd "$(dirname "$0")/.."
S=$OUT/s; mkdir -p $S
source scripts/device_steps.sh
unpack_carry build-devcheck/carry
OUT=$S step t_core 280 test_gpu_core -d >/dev/null &
OUT=$S step t_external 280 "$EXT/tests/gpu/test_gpu_external" -d >/dev/null &
wait
{ cat $S/steps.txt; grep -hE "test cases|assertions" $S/t_*.log; grep -hE "^[0-9.]+ s: " $S/t_core.log | sort -rn | head -8; grep -hE "ERROR:|logged" $S/t_*.log | head -20; } > $OUT/tests.txt
cat $OUT/tests.txt
OUT=$S/prof timeout 240 scripts/prefill_prof.sh base "16 512 16" "8 2048 16" > $S/prof.log 2>&1
for f in $S/prof/stalls_*; do echo "== $f"; head -50 $f | cut -c1-200; done > $OUT/stalls.txt
for f in $S/prof/details_*; do echo "== $f"; grep -E "attn_ws_kernel|Duration|Issue Slots|No Eligible|Warp Cycles Per Issued|Stall|Theoretical Occ|Achieved Occ" $f | cut -c1-150 | head -40; done > $OUT/details.txt
tail -5 $S/prof.log
tar czf $OUT/logs.tgz -C $S .
