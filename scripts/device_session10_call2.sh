#!/usr/bin/env bash
# A device call prepared in session 9 for session 10 (about 5 minutes on an
# H100), carrying build-call6: pagecheck.gz of b0b6657's tree (as in
# build-isolation/carry) and prefill_dev_cur.gz (`scripts/build_prefill_dev.sh
# cur` of the same tree: the lazy rescale, SASS equal to session 9's
# measured cr build). Steps:
#   1. scripts/decode_stalls.sh 3 2: the split partition kernel at 1 x 32768
#      and 8 x 8192 under Nsight Compute, stall samples by SASS line (issue 18);
#   2. block 16 by tensor copies (PAGECHECK_WS_TMA_MIN=16) against the row
#      producer: the dev checks with the knob, then `prefill_dev quick` with
#      and without it, twice interleaved (issue 24).
# $OUT: summary.txt, call.tgz.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s10c2}
mkdir -p "$dest"
work=/tmp/s10c2
mkdir -p "$work"
. scripts/device_steps.sh
BIN=/tmp/c6bin unpack_carry build-call6  # on PATH
summary="$dest/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$summary"
OUT="$work/stalls" timeout 300 scripts/decode_stalls.sh 3 2 2>&1 | tee -a "$summary"
for s in 3 2; do
  echo "== stalls, launch $s" | tee -a "$summary"
  head -12 "$work/stalls/stalls_decode_$s.txt" | cut -c1-220 | tee -a "$summary"
done
PAGECHECK_WS_TMA_MIN=16 timeout 200 prefill_dev_cur check >"$work/check_tma16.log" 2>&1
echo "check with PAGECHECK_WS_TMA_MIN=16: rc=$? $(grep -c FAIL "$work/check_tma16.log") FAIL lines; $(tail -1 "$work/check_tma16.log")" |
  tee -a "$summary"
for round in 1 2; do
  for knob in 0 16; do
    echo "== round $round, PAGECHECK_WS_TMA_MIN=${knob/#0/default}" | tee -a "$summary"
    if [ "$knob" = 0 ]; then timeout 100 prefill_dev_cur quick; else PAGECHECK_WS_TMA_MIN=16 timeout 100 prefill_dev_cur quick; fi 2>&1 |
      grep -E "TFLOP|FAIL|rror" | tee -a "$summary"
  done
done
(cd "$work" && tar czf "$dest/call.tgz" .)
