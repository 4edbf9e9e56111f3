// 2^x on the FMA pipe instead of the special-function unit (MUFU.EX2), for
// softmaxes whose exponentials bind (head dim 64: a 128 x 128 key tile's
// 16384 exponentials take as many cycles at 16 per SM per cycle as its two
// GEMMs on the tensor cores). Shared by kernels/src/dev/mufu_probe.cu,
// which measured it (session 11, H100: 11.9 results per SM per cycle alone,
// 21.8 with half of the chains on MUFU, 1.36x MUFU's 16), and the wgmma
// softmax (wgmma_tile.cuh, exp_row's kPolyEvery).
#pragma once

#include <cuda_runtime.h>

namespace pagecheck::gpu {

// 2^f on [0, 1): a degree-3 polynomial fitted to the relative error (max
// 7.5e-5, 50x below BF16's half ulp and 6x below F16's).
__host__ __device__ __forceinline__ float exp2_poly3_fraction(float f) {
  return fmaf(fmaf(fmaf(f, 0.078022814f, 0.226068619f), f, 0.695833501f), f, 0.999925166f);
}

// 2^x for x in (-inf, 2^22): x = j + f, j = floor(x) (a round-down add of
// 1.5 * 2^23 leaves j in the low mantissa bits), 2^f by the polynomial, and
// j added to the exponent bits. 0 below -126 (and for -inf, a masked key),
// as MUFU.EX2 with ftz gives. Per result: 3 FADD and 3 FFMA on the FMA
// pipe, a shift-add, a compare and a select.
__device__ __forceinline__ float exp2_poly3(float x) {
  const float t = __fadd_rd(x, 12582912.f);  // below -126 the bits wrap; the select returns 0 there
  const float f = x - (t - 12582912.f);
  const float r = __int_as_float(__float_as_int(exp2_poly3_fraction(f)) + (__float_as_int(t) << 23));
  return x < -126.f ? 0.f : r;
}

}  // namespace pagecheck::gpu
