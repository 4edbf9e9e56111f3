#!/usr/bin/env bash
# One device call (session 3): test_gpu_core and test_gpu_external with the
# legacy-stream gate's 0.5 s hold (test durations printed), then a stall
# profile of the prefill kernel by SASS line (scripts/prefill_prof.sh).
# Carry build-devcheck/carry and build-ab. Logs in $OUT.
set -u
cd "$(dirname "$0")/.."
S=$OUT/s; mkdir -p $S
BIN=/tmp/pcbin; mkdir -p $BIN
for f in build-devcheck/carry/*.gz; do gunzip -c $f > $BIN/$(basename $f .gz); done; chmod +x $BIN/*
EXT=/tmp/pcext; mkdir -p $EXT; tar xzf build-devcheck/carry/external.tgz -C $EXT
export PATH=$BIN:$PATH NO_COLOR=1
start=$SECONDS
(timeout 280 test_gpu_core -d > $S/t_core.log 2>&1; echo "t_core rc=$? $((SECONDS - start)) s" >> $S/rc.txt) &
(timeout 280 $EXT/tests/gpu/test_gpu_external -d > $S/t_external.log 2>&1; echo "t_external rc=$? $((SECONDS - start)) s" >> $S/rc.txt) &
wait
{ cat $S/rc.txt; grep -hE "test cases|assertions" $S/t_*.log; grep -hE "^[0-9.]+ s: " $S/t_core.log | sort -rn | head -8; grep -hE "ERROR:|logged" $S/t_*.log | head -20; } > $OUT/tests.txt
cat $OUT/tests.txt
OUT=$S/prof timeout 240 scripts/prefill_prof.sh base "16 512 16" "8 2048 16" > $S/prof.log 2>&1
for f in $S/prof/stalls_*; do echo "== $f"; head -50 $f | cut -c1-200; done > $OUT/stalls.txt
for f in $S/prof/details_*; do echo "== $f"; grep -E "attn_ws_kernel|Duration|Issue Slots|No Eligible|Warp Cycles Per Issued|Stall|Theoretical Occ|Achieved Occ" $f | cut -c1-150 | head -40; done > $OUT/details.txt
tail -5 $S/prof.log
tar czf $OUT/logs.tgz -C $S .
