#!/usr/bin/env bash
# Session 12, call 4 (~2 min): FP8 caches in the ws kernel with K widened to
# BF16 and V to F16 (prefill_dev_s12mx, -DPAGECHECK_WS_FP8_F16=2, this
# tree's default) against both to BF16 (prefill_dev_s12bf, =0): the dev
# driver's `check` of the first, then its `fp8` bench, two rounds
# interleaved. Carry build-s12c4. Returns $OUT/summary.txt and the logs.
set -u
cd "$(dirname "$0")/.."
D=${OUT:-./s12out}
W=/tmp/s12c4
mkdir -p "$D" "$W"
BIN=/tmp/s12c4bin
. scripts/device_steps.sh
unpack_carry build-s12c4/carry
OUT=$W
S=$W/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a "$S"
step check_mx 150 prefill_dev_s12mx check
echo "check_mx: $(tail -1 $W/check_mx.log); FAIL lines: $(grep -c FAIL $W/check_mx.log)" | tee -a "$S"
grep FAIL "$W/check_mx.log" | head -5 | tee -a "$S"
for round in 1 2; do
  for v in s12mx s12bf; do
    timeout 60 prefill_dev_$v fp8 >"$W/fp8_${v}_$round.log" 2>&1
    grep "TFLOP" "$W/fp8_${v}_$round.log" | grep e4m3 | sed "s/^/$v r$round /" | tee -a "$S"
  done
done
cp "$S" "$D/"
(cd "$W" && tar czf "$D/s12c4.tgz" .)
