#!/bin/sh
# Builds the standalone decode-kernel probe (kernels/src/dev/decode_probe.cu)
# for sm_90 into devbin/decode_probe; needs nvcc only, no GPU.
set -e
cd "$(dirname "$0")/.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p devbin
$NVCC -std=c++20 -O3 -gencode arch=compute_90,code=sm_90 --expt-relaxed-constexpr -lineinfo \
  -Ilib/include -Ikernels/include -Ikernels/src -I/usr/include/eigen3 \
  kernels/src/dev/decode_probe.cu kernels/src/decode/decode_direct.cu kernels/src/decode/decode_split.cu \
  kernels/src/harness/probe_read.cu lib/src/dtype.cpp \
  -o devbin/decode_probe "$@"
