#!/usr/bin/env bash
# Session 19's first call (issues 24 and 18): the product with session 18's
# defaults (FP8-K's query by tensor copy and its 512-key threshold; the
# next work tile's S_0 under the epilogue at head dim 64) beside cuDNN,
# and the decode read ceilings of the bench's paged layouts.
#   here:  cmake -S . -B build-s18 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGECHECK_CUDA=ON \
#            -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
#            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
#          ninja -C build-s18 pagecheck; strip -o build-s18/carry/pagecheck build-s18/app/pagecheck
#          scripts/build_decode_probe.sh -DPC_DECODE_SWEEP_ONLY -o build-s18/carry/decode_probe
#          gzip -9 -f build-s18/carry/pagecheck build-s18/carry/decode_probe
#   there: D=$OUT; OUT=/tmp/s19 PACK=$D scripts/device_s19_call.sh   (carry build-s18/carry)
# 1. `pagecheck bench --shapes decode|prefill` and scripts/bench_torch.py
#    interleaved twice (pagecheck, peers, pagecheck, peers).
# 2. The prefill bench at head dim 64 and with an E4M3 cache, the decode
#    bench with an E4M3 cache and at block size 1 (steps 1 and 2:
#    scripts/device_peer_benches.sh).
# 3. `decode_probe roof`: the bench protocol's floor, the contiguous
#    read-only stream, and the paged read ceilings (NHD and HND pages of 16
#    slots, shuffled) of each decode bench shape, by 16-byte loads and by
#    bulk copies (and a flat stream of the same bytes by bulk copies).
# (The checks of these defaults are scripts/device_s19_checks.sh, the call
# after this one on the same carry.)
# Logs in $OUT, packed into $PACK/s19.tgz (s19_partial.tgz at WATCHDOG s).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s19out}
PACK=${PACK:-.}
mkdir -p "$OUT/bench" /tmp/s19bin
: >"$OUT/summary.txt"
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "$PACK/s19_partial.tgz" .) &
watchdog=$!
for b in pagecheck decode_probe; do
  gunzip -c "build-s18/carry/$b.gz" >"/tmp/s19bin/$b" && chmod +x "/tmp/s19bin/$b"
done
export PATH="/tmp/s19bin:$PATH:/usr/local/cuda/bin" NO_COLOR=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt"
scripts/device_peer_benches.sh "$OUT/bench" "$OUT/summary.txt"
timeout 90 decode_probe roof >"$OUT/roof.log" 2>&1
echo "roof rc=$?" >>"$OUT/summary.txt"
cat "$OUT/roof.log" >>"$OUT/summary.txt"
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "$PACK/s19.tgz" .)
cat "$OUT/summary.txt"
