#!/usr/bin/env bash
# Session 12, call 3 (~6 min): scripts/device_pending_check.sh run over the
# product binaries of 580f9fe (head dim 64 in the ws kernel, FP8 caches on
# it by default, widened to F16), then the dev driver's `fp8` bench (E4M3
# and BF16 at the bench shapes) for F16 widening (prefill_dev, this tree)
# against BF16 widening (prefill_dev_s12bf, -DPAGECHECK_WS_FP8_F16=0), two
# rounds interleaved, and `prefill_dev dims`. Carry build-pending (its
# carry/ with prefill_dev_s12bf.gz added). Returns $OUT/s12c3.tgz and
# $OUT/summary.txt.
set -u
cd "$(dirname "$0")/.."
D=${OUT:-./s12out}
W=/tmp/s12c3
mkdir -p "$D" "$W"
BIN=/tmp/pendingbin OUT=$W scripts/device_pending_check.sh run
S=$W/summary.txt
for round in 1 2; do
  for v in prefill_dev prefill_dev_s12bf; do
    timeout 120 /tmp/pendingbin/$v fp8 >"$W/fp8_${v}_$round.log" 2>&1
    grep -E "TFLOP|FAIL" "$W/fp8_${v}_$round.log" | sed "s/^/$v r$round /" | tee -a "$S"
  done
done
timeout 150 /tmp/pendingbin/prefill_dev dims >"$W/dims.log" 2>&1
grep -E "TFLOP|FAIL|failures" "$W/dims.log" | tee -a "$S"
cp "$S" "$D/"
(cd "$W" && tar czf "$D/s12c3.tgz" --exclude=pending.tgz .)
