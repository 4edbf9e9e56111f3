#!/usr/bin/env bash
# Session 21's second call (issues 18 and 24), carrying build-s18/carry, after
# scripts/device_s21_call.sh has passed the decode tensor copies' checks:
#   here:  ninja -C build-s18 pagecheck   (build-s18 as scripts/device_s19_call.sh configures it)
#          strip -o build-s18/carry/pagecheck build-s18/app/pagecheck && gzip -9 -f build-s18/carry/pagecheck
#          git rev-parse HEAD >build-s18/carry/COMMIT
#   there: D=$OUT; OUT=/tmp/s21p PACK=$D scripts/device_s21_product.sh
# 1. The covering suite through reference, direct, split and auto with
#    PAGECHECK_DECODE_TMA=1 (the direct and auto kernels' tensor copies on
#    every case they take) and through reference, prefill and fmha (the FP8
#    widening stores of sts, in the default).
# 2. scripts/device_peer_benches.sh with DECODE_TMA=1: `pagecheck bench`
#    (decode, decode with tensor copies, prefill) and scripts/bench_torch.py
#    interleaved twice, then head dim 64, E4M3 and block size 1.
# Logs in $OUT, packed into $PACK/s21p.tgz (s21p_partial.tgz at WATCHDOG s).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s21pout}
PACK=${PACK:-.}
mkdir -p "$OUT/bench" /tmp/s21bin
: >"$OUT/summary.txt"
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "$PACK/s21p_partial.tgz" .) &
watchdog=$!
gunzip -c build-s18/carry/pagecheck.gz >/tmp/s21bin/pagecheck && chmod +x /tmp/s21bin/pagecheck
export PATH="/tmp/s21bin:$PATH:/usr/local/cuda/bin" NO_COLOR=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt"
echo "commit $(cat build-s18/carry/COMMIT 2>/dev/null)" >>"$OUT/summary.txt"
PAGECHECK_DECODE_TMA=1 timeout 200 pagecheck run --paths reference,direct,split,auto --no-timing --require-gpu -q \
  --json "$OUT/suite_decode_tma.json" >"$OUT/suite_decode_tma.log" 2>&1
echo "suite decode (tensor copies) rc=$?: $(tail -3 "$OUT/suite_decode_tma.log" | tr '\n' ' ' | cut -c1-300)" >>"$OUT/summary.txt"
timeout 200 pagecheck run --paths reference,prefill,fmha --no-timing --require-gpu -q \
  --json "$OUT/suite_prefill.json" >"$OUT/suite_prefill.log" 2>&1
echo "suite prefill rc=$?: $(tail -3 "$OUT/suite_prefill.log" | tr '\n' ' ' | cut -c1-300)" >>"$OUT/summary.txt"
DECODE_TMA=1 scripts/device_peer_benches.sh "$OUT/bench" "$OUT/summary.txt"
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s21p.tgz" .)
cat "$OUT/summary.txt"
