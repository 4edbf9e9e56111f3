#!/usr/bin/env bash
# Session 18's defaults checked on the device (issue 24), carrying
# build-s18/carry (scripts/device_s19_call.sh says how it is built; add
# `gzip -9 -c build-sm90dev/prefill_dev_base > build-s18/carry/prefill_dev_base.gz`
# after scripts/build_prefill_dev.sh base at the same commit):
#   there: D=$OUT; OUT=/tmp/s19c PACK=$D scripts/device_s19_checks.sh
# 1. The dev driver of those defaults (FP8-K's query by tensor copy, the
#    early S_0 at head dim 64): its checks with the default loaders and with
#    rows forced, and its small suite (now with head dims 128 and 64 over
#    several work tiles a CTA) under memcheck, racecheck and synccheck,
#    FP8-K on every FP8 case.
# 2. The default suite through reference, prefill and fmha, as it is and
#    with FP8-K on every FP8 case (PAGECHECK_WS_FP8_K_MIN_KEYS=0).
# Logs in $OUT, packed into $PACK/s19c.tgz; summary.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s19cout}
PACK=${PACK:-.}
mkdir -p "$OUT" build-sm90dev /tmp/s19bin
: >"$OUT/summary.txt"
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "$PACK/s19c_partial.tgz" .) &
watchdog=$!
gunzip -c build-s18/carry/pagecheck.gz >/tmp/s19bin/pagecheck && chmod +x /tmp/s19bin/pagecheck
gunzip -c build-s18/carry/prefill_dev_base.gz >build-sm90dev/prefill_dev_base && chmod +x build-sm90dev/prefill_dev_base
export PATH="/tmp/s19bin:$PATH:/usr/local/cuda/bin" NO_COLOR=1
PAGECHECK_WS_FP8_K_MIN_KEYS=0 SAN=1 QUICK=0 OUT=$OUT/dev timeout 300 scripts/prefill_ab_run.sh base >"$OUT/dev_check.log" 2>&1
echo "dev checks rc=$?: $(tr '\n' ' ' <"$OUT/dev_check.log" | cut -c1-600)" | tee -a "$OUT/summary.txt"
for k in default 0; do
  if [ $k = default ]; then env=(); else env=(PAGECHECK_WS_FP8_K_MIN_KEYS=0); fi
  env "${env[@]}" timeout 200 pagecheck run --paths reference,prefill,fmha --no-timing --require-gpu -q \
    --json "$OUT/suite_$k.json" >"$OUT/suite_$k.log" 2>&1
  echo "suite (FP8-K min keys $k) rc=$?: $(tail -3 "$OUT/suite_$k.log" | tr '\n' ' ' | cut -c1-300)" |
    tee -a "$OUT/summary.txt"
done
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s19c.tgz" .)
