#!/usr/bin/env bash
# The product beside the peers (issues 18 and 24), carrying build-s18/carry
# (written for session 21; session 22 runs it after scripts/device_s21b.sh):
#   here:  scripts/prepare_device_calls.sh product   (pagecheck and
#          FlashInfer's adapter by scripts/device_flashinfer_check.sh build 90,
#          packed into build-s18/carry: pagecheck.gz, external.tgz, COMMIT)
#   there: D=$OUT; OUT=/tmp/s21p PACK=$D scripts/device_s21_product.sh
#   (CARRY=build-s18/carry-w4: the product with the sections of
#   -DPAGECHECK_WS_SECTION_WAVES=4, built with that define set in the
#   source; its COMMIT file says so)
# 1. The covering suite through reference, prefill and fmha (the FP8
#    widening stores of sts, in the default; with carry-w4, the sections
#    too). DECODE_SUITE=1 adds reference, direct, split and auto (with
#    PAGECHECK_DECODE_TMA=1 where DECODE_TMA=1: session 21's call 2 ran that
#    one, 525 pass, 0 fail).
# 2. scripts/device_peer_benches.sh: `pagecheck bench` (decode, prefill) and
#    scripts/bench_torch.py interleaved twice, then head dim 64, E4M3 and
#    block size 1 (DECODE_TMA=1 adds the decode bench with tensor copies,
#    1% slower in session 21).
# Logs in $OUT, packed into $PACK/s21p.tgz (s21p_partial.tgz at WATCHDOG s).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s21pout}
PACK=${PACK:-.}
mkdir -p "$OUT/bench" /tmp/s21bin
: >"$OUT/summary.txt"
# The watchdog's output goes to /dev/null: a sleep that held the caller's
# stdout kept the device call open until it ended (session 22's product
# call returned at 570 s, its work done in about 260).
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "$PACK/s21p_partial.tgz" .) >/dev/null 2>&1 &
watchdog=$!
disown "$watchdog"  # no `wait` may wait for it
CARRY=${CARRY:-build-s18/carry}  # or build-s18/carry-w4 (sections capped at four waves, session 21)
gunzip -c "$CARRY/pagecheck.gz" >/tmp/s21bin/pagecheck && chmod +x /tmp/s21bin/pagecheck
# FlashInfer's entries in the same bench where the carry holds the adapter
# (external.tgz of scripts/device_flashinfer_check.sh build, copied in).
if [ -f "$CARRY/external.tgz" ]; then
  mkdir -p /tmp/s21bin/ext && tar xzf "$CARRY/external.tgz" -C /tmp/s21bin/ext
  so=$(find /tmp/s21bin/ext -name 'libpagecheck_flashinfer.so' | head -1)
  [ -n "$so" ] && export PEER_KERNEL=$so
fi
export PATH="/tmp/s21bin:$PATH:/usr/local/cuda/bin" NO_COLOR=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt"
echo "commit $(cat "$CARRY/COMMIT" 2>/dev/null) ($CARRY); FlashInfer: ${PEER_KERNEL:-none}" >>"$OUT/summary.txt"
if [ "${DECODE_SUITE:-0}" = 1 ]; then
  PAGECHECK_DECODE_TMA=${DECODE_TMA:-0} timeout 200 pagecheck run --paths reference,direct,split,auto --no-timing \
    --require-gpu -q --json "$OUT/suite_decode.json" >"$OUT/suite_decode.log" 2>&1
  echo "suite decode (tensor copies ${DECODE_TMA:-0}) rc=$?: $(tail -3 "$OUT/suite_decode.log" | tr '\n' ' ' | cut -c1-300)" >>"$OUT/summary.txt"
fi
timeout 200 pagecheck run --paths reference,prefill,fmha --no-timing --require-gpu -q \
  --json "$OUT/suite_prefill.json" >"$OUT/suite_prefill.log" 2>&1
echo "suite prefill rc=$?: $(tail -3 "$OUT/suite_prefill.log" | tr '\n' ' ' | cut -c1-300)" >>"$OUT/summary.txt"
DECODE_TMA=${DECODE_TMA:-0} scripts/device_peer_benches.sh "$OUT/bench" "$OUT/summary.txt"
pkill -P "$watchdog" 2>/dev/null  # its sleep
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s21p.tgz" .)
cat "$OUT/summary.txt"
