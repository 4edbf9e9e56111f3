// Throughput of MUFU.EX2 (ex2.approx.ftz.f32) against FFMA on one SM, by
// clock64 inside one CTA (a developer probe for issue 24: is the ws kernel's
// softmax, ~1000 cycles a key tile for 66 exponentials a warp, bound by the
// special-function unit?). Each warp runs kIters rounds of kChains
// independent chains; the CTA's warps count is the argument's list. Prints,
// per warp count, cycles per warp instruction and results per SM per cycle.
// Session 10 (H100): ex2 16 results per SM per cycle, ffma 125. Added then:
// `poly`, 2^x of x <= 0 on the FMA pipe (exp2_poly3, common/exp2_fma.cuh: the floor by a
// rounding add, a degree-3 polynomial, the exponent added as an integer;
// max relative error 7.5e-5, 50x below BF16's half ulp), and `mix`, half of
// the chains on each unit: whether the FMA pipe can take a share of a
// softmax's exponentials (FlashAttention-4's split), the lever for d64,
// where a key tile's exponentials need as many cycles as its GEMMs.
//   nvcc -O3 -arch=sm_90 -Ikernels/src kernels/src/dev/mufu_probe.cu -o mufu_probe; ./mufu_probe
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "common/exp2_fma.cuh"

namespace {

constexpr int kChains = 8;
constexpr int kIters = 4096;

enum Mode { kEx2, kFfma, kPoly, kMix };
const char* mode_name(Mode m) { return m == kEx2 ? "ex2" : m == kFfma ? "ffma" : m == kPoly ? "poly" : "mix"; }

// exp2_poly3 (common/exp2_fma.cuh): 2^x on the FMA pipe.
using pagecheck::gpu::exp2_poly3;
using pagecheck::gpu::exp2_poly3_fraction;

template <Mode kMode>
__global__ void probe(float* out, long long* cycles, float seed) {
  float v[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) v[c] = seed * (threadIdx.x + c) * 1e-3f;
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kMode == kEx2) {
        asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(v[c]));
      } else if constexpr (kMode == kFfma) {
        asm volatile("fma.rn.f32 %0, %0, %0, 0f3F000000;" : "+f"(v[c]));
      } else if constexpr (kMode == kPoly) {
        v[c] = exp2_poly3(-v[c]);  // stays in (0.5, 1]
      } else {
        if (c % 2 == 0)
          asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(v[c]));
        else
          v[c] = exp2_poly3(-v[c]);
      }
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += v[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <Mode kMode>
void run(int warps) {
  float* out;
  long long* cycles;
  cudaMalloc(&out, warps * 32 * sizeof(float));
  cudaMalloc(&cycles, sizeof(long long));
  probe<kMode><<<1, warps * 32>>>(out, cycles, 0.5f);  // warm-up
  probe<kMode><<<1, warps * 32>>>(out, cycles, 0.5f);
  long long c = 0;
  cudaMemcpy(&c, cycles, sizeof(c), cudaMemcpyDeviceToHost);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
  const double instr = static_cast<double>(kIters) * kChains;  // per warp
  std::printf("%-4s warps %2d: %8lld cycles, %6.2f cycles per warp instruction, %6.2f results per SM per cycle\n",
              mode_name(kMode), warps, c, c / instr, instr * warps * 32 / c);
  cudaFree(out);
  cudaFree(cycles);
}

}  // namespace

// exp2_poly3 against exp2 in double over x in [-130, 0] (on the host: the
// same arithmetic, the round-down add by std::nearbyint under FE_DOWNWARD
// replaced by floor, which is what it computes).
double poly_max_rel_error() {
  double worst = 0;
  for (int i = 0; i <= 1300000; ++i) {
    const float x = -130.0f + i * 1e-4f;
    const float j = std::floor(x);
    const double r = x < -126.f ? 0.0 : std::ldexp(static_cast<double>(exp2_poly3_fraction(x - j)), static_cast<int>(j));
    const double ref = std::exp2(static_cast<double>(x));
    if (x >= -126.f) worst = std::fmax(worst, std::fabs(r - ref) / ref);
  }
  return worst;
}

int main() {
  std::printf("exp2_poly3: max relative error %.3g over [-126, 0]\n", poly_max_rel_error());
  for (int w : {1, 2, 4, 8, 16}) run<kEx2>(w);
  for (int w : {1, 4, 8}) run<kFfma>(w);
  for (int w : {1, 4, 8, 16}) run<kPoly>(w);
  for (int w : {4, 8, 16}) run<kMix>(w);
  return 0;
}
