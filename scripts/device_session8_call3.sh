#!/usr/bin/env bash
# Session 8's third device call: prefill experiments (about 4 minutes), carrying build-ab5:
#   the epilogue's phases by clock stamps (-DPAGECHECK_WS_TRACE=3: row
#   sums / scales / LSEs, rows through shared memory, proxy fence and Q
#   release, global stores) of the committed kernel (t6) and of f1fast
#   (t7) at 16 x 512 and 8 x 2048; the dev checks and memcheck / racecheck /
#   synccheck of f1fast; then `prefill_dev quick` of v0 (committed), f1 (the
#   next work tile's values loaded before the last tile's P V instead of
#   before the epilogue), f2 (at the work tile's start), fast (approximate
#   division and log2 in the epilogue), f1fast, tp (a consumer warpgroup
#   passes the turn once its S is done, not once issued, so the other's
#   GEMMs queue behind it), tp2 (also for S_0), twice, interleaved; the
#   steady key tiles' phases of tp (t8, -DPAGECHECK_WS_TRACE=2).
# (A record of what ran: the experiment macros PC_WS_FETCH, PC_WS_EPI_FAST
# and PC_WS_TURN_LATE were taken out of attn_sm90_ws.cu after this call,
# which had f1, f2, tp, tp2 lose or tie and `fast` win; docs/performance.md,
# session 8. The build lines below need them back.)
# build-ab5 (git-ignored; rebuild here if it is gone):
#   scripts/build_prefill_dev.sh v0; scripts/build_prefill_dev.sh f1 -DPC_WS_FETCH=1
#   scripts/build_prefill_dev.sh f2 -DPC_WS_FETCH=2; scripts/build_prefill_dev.sh fast -DPC_WS_EPI_FAST=1
#   scripts/build_prefill_dev.sh f1fast -DPC_WS_FETCH=1 -DPC_WS_EPI_FAST=1
#   scripts/build_prefill_dev.sh t6 -DPAGECHECK_WS_TRACE=3
#   scripts/build_prefill_dev.sh t7 -DPAGECHECK_WS_TRACE=3 -DPC_WS_FETCH=1 -DPC_WS_EPI_FAST=1
#   scripts/build_prefill_dev.sh tp -DPC_WS_TURN_LATE=1; scripts/build_prefill_dev.sh tp2 -DPC_WS_TURN_LATE=2
#   scripts/build_prefill_dev.sh t8 -DPAGECHECK_WS_TRACE=2 -DPC_WS_TURN_LATE=1
#   for n in v0 f1 f2 fast f1fast tp tp2 t6 t7 t8; do gzip -9 -c build-sm90dev/prefill_dev_$n > build-ab5/prefill_dev_$n.gz; done
set -u
cd "$(dirname "$0")/.."
final=${OUT:-./devout-s8c3}
work=/tmp/s8c3
mkdir -p "$final" "$work/trace" build-sm90dev
names="v0 f1 f2 fast f1fast tp tp2 t6 t7 t8"
for n in $names; do
  gunzip -c "build-ab5/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
summary="$final/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$summary"
for s in "16 512 16" "8 2048 16"; do
  for n in t6 t7; do
    WS_TRACE="$work/trace/${n}_${s// /_}" timeout 60 "build-sm90dev/prefill_dev_$n" trace $s >/dev/null 2>&1
  done
done
for s in "8 2048 16" "1 8192 16"; do
  WS_TRACE="$work/trace/t8_${s// /_}" timeout 60 build-sm90dev/prefill_dev_t8 trace $s >/dev/null 2>&1
done
for t in "$work"/trace/*; do python3 scripts/prefill_trace.py "$t" | grep -E "^(fit|epilogue|steady)" | sed "s|^|$(basename "$t"): |"; done |
  tee -a "$summary"
QUICK=0 OUT="$work/ab" scripts/prefill_ab_run.sh f1fast >"$work/checks.log" 2>&1
tee -a "$summary" <"$work/checks.log"
SAN=0 QUICK=0 OUT="$work/ab_tp2" scripts/prefill_ab_run.sh tp2 2>&1 | grep -E "^check" | sed "s|^|tp2 |" | tee -a "$summary"
for round in 1 2; do
  for n in v0 f1 f2 fast f1fast tp tp2; do
    echo "== $n (round $round)"
    timeout 100 "build-sm90dev/prefill_dev_$n" quick 2>&1 | grep -E "TFLOP|FAIL|rror"
  done
done 2>&1 | tee "$work/quick.log" | grep -v " b[18] \| b64 " | tee -a "$summary"
(cd "$work" && tar czf "$final/s8c3.tgz" .)
