#!/usr/bin/env bash
# Session 12, call 2 (~3 min): the prefill dev driver with FP8 caches widened
# to F16 operands (prefill_dev_s12, the default of this tree) and to BF16
# ones (prefill_dev_s12bf, -DPAGECHECK_WS_FP8_F16=0), both with the FP8
# caches on the warp-specialised kernel by default: `check` (every case,
# head dim 64 too), `small` under memcheck and racecheck, and the `fp8`
# bench (E4M3 and BF16 at the bench shapes), twice interleaved.
# Carry build-s12c2. Returns $OUT/s12c2.tgz and $OUT/summary.txt.
set -u
cd "$(dirname "$0")/.."
D=${OUT:-./s12out}
W=/tmp/s12c2
mkdir -p "$D" "$W"
BIN=/tmp/s12c2bin
. scripts/device_steps.sh
unpack_carry build-s12c2/carry
OUT=$W
S=$W/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$S"
for v in s12 s12bf; do
  step "check_$v" 200 prefill_dev_$v check &
done
wait
for v in s12 s12bf; do echo "check_$v: $(tail -1 $W/check_$v.log); FAIL lines: $(grep -c FAIL $W/check_$v.log)" | tee -a "$S"; done
for tool in memcheck racecheck; do
  step "san_$tool" 200 compute-sanitizer --tool $tool --error-exitcode 9 prefill_dev_s12 small
  echo "san_$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/san_$tool.log | tail -1)" | tee -a "$S"
done
for round in 1 2; do
  for v in s12 s12bf; do
    step "fp8_${v}_$round" 120 prefill_dev_$v fp8
    grep TFLOP "$W/fp8_${v}_$round.log" | sed "s/^/$v r$round /" | tee -a "$S"
  done
done
cp "$S" "$D/"
(cd "$W" && tar czf "$D/s12c2.tgz" .)
