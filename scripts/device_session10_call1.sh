#!/usr/bin/env bash
# Session 10's first device call: the two kernel calls prepared in session 9
# in one machine start (carry build-ab9 and build-call6): the lean decode copy
# (device_session10_decode_lean.sh, about 4 minutes) and then, in the time
# left of the 10-minute call, the split partition's stall samples and the
# block-16 tensor-copy A/B (device_session10_call2.sh).
# $OUT: lean/{summary.txt,lean.tgz}, c2/{summary.txt,call.tgz}.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s10c1}
OUT="$dest/lean" bash scripts/device_session10_decode_lean.sh
left=$((585 - SECONDS))
echo "lean done at ${SECONDS}s; ${left}s left for call2"
OUT="$dest/c2" timeout "$left" bash scripts/device_session10_call2.sh
echo "call2 rc=$? at ${SECONDS}s"
