#!/usr/bin/env bash
# pagecheck beside its peers on the bench shapes, in one device call
# (issues 18, 20, 24): pagecheck bench with FlashInfer's entries through
# --kernel, then PyTorch's SDPA backends (scripts/bench_torch.py: cuDNN,
# FlashAttention-2), the two interleaved twice, so each peer's better round
# can be taken (peers move by up to 30% between rounds; pagecheck does not).
#
#   scripts/device_flashinfer_check.sh build 90      (here: builds and packs build-fi/carry)
#   scripts/device_bench_peers.sh                    (there, carrying build-fi/carry)
#
# Logs and JSON reports under $OUT (default ./peersout), packed as
# $OUT/peers.tgz; a summary (GB/s or TFLOP/s per path and round, cuDNN's
# rounds) on stdout. About 2 minutes on an H100.
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-peersout}
mkdir -p "$OUT"
. scripts/device_steps.sh
unpack_carry "${CARRY:-build-fi/carry}"
lib=$(ls /tmp/pcext/examples/external/flashinfer/libpagecheck_flashinfer.so 2>/dev/null)
[ -n "$lib" ] || { echo "no libpagecheck_flashinfer.so in the carry" >&2; exit 4; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
for r in 1 2; do
  step bench_dec$r 120 pagecheck bench --shapes decode --kernel "$lib" \
    --paths "direct,split,auto,ext:flashinfer_decode,ext:flashinfer_prefill" --no-checks --json "$OUT/bench_dec$r.json"
  step bench_pre$r 120 pagecheck bench --shapes prefill --kernel "$lib" \
    --paths "prefill,fmha,ext:flashinfer_prefill" --no-checks --json "$OUT/bench_pre$r.json"
  step torch$r 90 python3 scripts/bench_torch.py --shapes all
done
for r in 1 2; do
  echo "== round $r"
  awk '/^(decode|prefill|chunked)-/ {print $1; next} /^  [a-z:_]+ +(pass|fail|error)/ {p = $1; next}
       /GB\/s/ && !/stage/ && p != "" {for (i = 1; i <= NF; i++) if ($i ~ /TFLOP/) t = $(i - 1); print "   ", p, $1, "GB/s", t, "TFLOP/s"; p = ""}' \
    "$OUT/bench_dec$r.log" "$OUT/bench_pre$r.log"
  grep -E "cudnn|flash2 " "$OUT/torch$r.log"
done
(cd "$OUT" && tar czf peers.tgz ./*.log ./*.json)
