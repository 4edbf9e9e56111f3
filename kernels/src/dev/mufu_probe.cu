// Throughput of MUFU.EX2 (ex2.approx.ftz.f32) against FFMA on one SM, by
// clock64 inside one CTA (a developer probe for issue 24: is the ws kernel's
// softmax, ~1000 cycles a key tile for 66 exponentials a warp, bound by the
// special-function unit?). Each warp runs kIters rounds of kChains
// independent chains; the CTA's warps count is the argument's list. Prints,
// per warp count, cycles per warp instruction and results per SM per cycle.
//   nvcc -O3 -arch=sm_90 kernels/src/dev/mufu_probe.cu -o mufu_probe; ./mufu_probe
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

namespace {

constexpr int kChains = 8;
constexpr int kIters = 4096;

template <bool kEx2>
__global__ void probe(float* out, long long* cycles, float seed) {
  float v[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) v[c] = seed * (threadIdx.x + c) * 1e-3f;
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kEx2) {
        asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(v[c]));
      } else {
        asm volatile("fma.rn.f32 %0, %0, %0, 0f3F000000;" : "+f"(v[c]));
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

template <bool kEx2>
void run(int warps) {
  float* out;
  long long* cycles;
  cudaMalloc(&out, warps * 32 * sizeof(float));
  cudaMalloc(&cycles, sizeof(long long));
  probe<kEx2><<<1, warps * 32>>>(out, cycles, 0.5f);  // warm-up
  probe<kEx2><<<1, warps * 32>>>(out, cycles, 0.5f);
  long long c = 0;
  cudaMemcpy(&c, cycles, sizeof(c), cudaMemcpyDeviceToHost);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
  const double instr = static_cast<double>(kIters) * kChains;  // per warp
  std::printf("%-4s warps %2d: %8lld cycles, %6.2f cycles per warp instruction, %6.2f results per SM per cycle\n",
              kEx2 ? "ex2" : "ffma", warps, c, c / instr, instr * warps * 32 / c);
  cudaFree(out);
  cudaFree(cycles);
}

}  // namespace

int main() {
  for (int w : {1, 2, 4, 8, 16}) run<true>(w);
  for (int w : {1, 4, 8}) run<false>(w);
  return 0;
}
