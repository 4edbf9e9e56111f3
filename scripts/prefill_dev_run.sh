#!/usr/bin/env bash
# Device-side run of the prefill/FMHA dev driver (kernels/src/dev/prefill_dev.cu)
# for kernel work: SASS facts of the sm_90a kernel, the driver's checks with
# the kernel the launchers pick (wgmma on an H200), the small suite under
# compute-sanitizer memcheck and racecheck, and the benchmark with the wgmma
# kernel and with the portable one (PAGECHECK_ATTN_KERNEL=mma), side by side.
#
# Build here (repo root), then carry build-sm90dev:
#   nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 --expt-relaxed-constexpr -lineinfo \
#     -Ilib/include -Ikernels/src -Ikernels/include -c kernels/src/prefill/attn_sm90.cu -o build-sm90dev/attn_sm90.o
#   (the same for kernels/src/prefill/attn_sm90_ws.cu -> build-sm90dev/attn_sm90_ws.o)
#   nvcc -std=c++20 -gencode arch=compute_90,code=sm_90 -O3 --expt-relaxed-constexpr -lineinfo \
#     -DPAGECHECK_HAVE_SM90A=1 -diag-suppress 2810 -Ilib/include -Ikernels/src -Ikernels/include \
#     -I/usr/include/eigen3 kernels/src/dev/prefill_dev.cu kernels/src/prefill/prefill.cu kernels/src/prefill/fmha.cu \
#     lib/src/dtype.cpp build-sm90dev/attn_sm90.o build-sm90dev/attn_sm90_ws.o -o build-sm90dev/prefill_dev
# Run there: scripts/prefill_dev_run.sh [check|bench|all]   (logs under $OUT)
set -u
cd "$(dirname "$0")/.."
mode=${1:-all}
out=${OUT:-devout}
mkdir -p "$out"
bin=build-sm90dev/prefill_dev
chmod +x "$bin"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "== SASS of the sm_90a kernel (instruction counts)"
cuobjdump --dump-sass build-sm90dev/attn_sm90.o build-sm90dev/attn_sm90_ws.o >"$out/sass.txt" 2>&1
grep -oE "HGMMA[.A-Z0-9x]*|HMMA[.A-Z0-9]*|LDL|STL|BAR.SYNC" "$out/sass.txt" | sort | uniq -c | sort -rn | head -12
if [ "$mode" = check ] || [ "$mode" = all ]; then
  echo "== checks (kernel the launchers pick)"
  timeout 240 "$bin" check >"$out/check.log" 2>&1
  echo "check rc=$?"; grep -E "FAIL|error|failures" "$out/check.log" | head -20
  echo "== sanitizers (small suite)"
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" small >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$out/memcheck.log")"
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$bin" small >"$out/racecheck.log" 2>&1
  echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$out/racecheck.log")"
  timeout 120 compute-sanitizer --tool synccheck --error-exitcode 9 "$bin" small >"$out/synccheck.log" 2>&1
  echo "synccheck rc=$? $(grep -E 'ERROR SUMMARY' "$out/synccheck.log")"
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  echo "== bench: wgmma-ws (default on Hopper where it takes the case)"
  timeout 120 "$bin" bench 2>&1 | tee "$out/bench_ws.log" | grep -vE "^  (prefill|fmha) "
  echo "== bench: wgmma (PAGECHECK_ATTN_KERNEL=wgmma)"
  PAGECHECK_ATTN_KERNEL=wgmma timeout 120 "$bin" bench 2>&1 | tee "$out/bench_wgmma.log" | grep -vE "^  (prefill|fmha) "
  if [ -n "${WITH_MMA:-}" ]; then
    echo "== bench: mma.sync (PAGECHECK_ATTN_KERNEL=mma)"
    PAGECHECK_ATTN_KERNEL=mma timeout 120 "$bin" bench 2>&1 | tee "$out/bench_mma.log" | grep -vE "^  (prefill|fmha) "
  fi
  grep -E "FAIL" "$out"/bench_*.log | head
fi
