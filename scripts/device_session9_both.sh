#!/usr/bin/env bash
# Session 9's first two device calls in one (at most 9.5 minutes, about 6; saves a
# machine start), carrying build-ab7 and build-pending/carry (57 MB):
#   scripts/device_session9_call1.sh (fast division, stmatrix staging and
#   the turn after the softmax, A/B with checks and sanitizers; the key-tile
#   timeline), then
#   scripts/device_pending_check.sh run (every GPU test, the suite and the
#   benches over 691a553's pagecheck binary: the tensor-copy output and
#   fast_div in it).
# $OUT gets summary.txt and s9c1.tgz from the first, pending.tgz from the
# second; both summaries are printed.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s9}
mkdir -p "$dest"
OUT=$dest timeout 300 scripts/device_session9_call1.sh >/dev/null 2>&1
cat "$dest/summary.txt"
OUT=/tmp/pending PACK=$dest timeout 280 scripts/device_pending_check.sh run >/dev/null 2>&1
cat /tmp/pending/summary.txt
