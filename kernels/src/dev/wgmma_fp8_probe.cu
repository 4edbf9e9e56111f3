// One-tile check of an FP8 P V's operand layouts before a kernel uses them
// (issue 24; docs/performance.md, "Session 17", Next (2)). One warpgroup
// computes O[64 x 128] = P[64 x 128 keys] V[128 keys x 128 dims] with four
// `wgmma m64n128k32 e4m3.e4m3` of A from registers:
//   - P as S's accumulator leaves it in a thread (rows g, g + 8 of its warp's
//     16; keys 8j + 2t, 8j + 2t + 1 of each 8-key block j), packed four
//     keys a register with no shuffle: for k-step c, a[0] / a[1] (rows g /
//     g + 8) hold keys 32c + {2t, 2t+1, 8+2t, 9+2t}, a[2] / a[3] keys
//     32c + 16 + the same;
//   - V^T in shared memory as FP8-K's K tile is laid out (128 rows of 128
//     bytes, here rows = dims, 128-byte swizzle), its column k holding key
//     perm(k) = 2 (k / 4 % 4) + k % 2 + 8 (k % 4 / 2) + 16 (k / 16) of the
//     32-key step, the order in which the registers above present the keys
//     if wgmma reads thread t's a[0] as k = 4t..4t+3 and a[2] as 16+4t..
//     16+4t+3 (the PTX ISA's fragment figure for 8-bit A).
// Values are small integers and halves (exact in E4M3), so O must equal the
// host's product exactly. Prints PASS, or the mismatches and the first ones.
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels/src \
//     kernels/src/dev/wgmma_fp8_probe.cu -o wgmma_fp8_probe; ./wgmma_fp8_probe
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "prefill/sm90_primitives.cuh"

namespace {

using namespace pagecheck::gpu::attn;

constexpr int kRows = 64, kKeys = 128, kDims = 128;

// Key of column k of a 32-key step of V^T (see above).
__host__ __device__ constexpr int perm(int k) {
  return 2 * (k / 4 % 4) + k % 2 + 8 * (k % 4 / 2) + 16 * (k / 16);
}

// Byte offset of (row, column) in a tile of 128-byte rows, 128-byte swizzle.
__host__ __device__ constexpr std::uint32_t swz(int row, int col) {
  return static_cast<std::uint32_t>(row * 128 + ((((col >> 4) ^ (row & 7)) & 7) << 4) + (col & 15));
}

__global__ void probe_kernel(const std::uint8_t* p, const std::uint8_t* v, float* out) {
  __shared__ __align__(1024) std::uint8_t vt[kDims * kKeys];
  // V^T, key-permuted within each 32-key step: column k of dim row n holds
  // V[32 (k / 32) + perm(k % 32)][n].
  for (int i = threadIdx.x; i < kDims * kKeys; i += blockDim.x) {
    const int n = i / kKeys, k = i % kKeys;
    vt[swz(n, k)] = v[(32 * (k / 32) + perm(k % 32)) * kDims + n];
  }
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const auto pk = [&](int row, int k0) {  // keys k0 + {2t, 2t+1, 8+2t, 9+2t} of a row, one byte each
    const std::uint8_t* q = p + row * kKeys + k0;
    return static_cast<std::uint32_t>(q[2 * t]) | static_cast<std::uint32_t>(q[2 * t + 1]) << 8 |
           static_cast<std::uint32_t>(q[8 + 2 * t]) << 16 | static_cast<std::uint32_t>(q[9 + 2 * t]) << 24;
  };
  float d[64];
  for (float& x : d) x = 0.f;
  const std::uint32_t vt_addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(vt));
  wgmma_fence();
#pragma unroll
  for (int c = 0; c < kKeys / 32; ++c) {
    const std::uint32_t a[4] = {pk(r0, 32 * c), pk(r1, 32 * c), pk(r0, 32 * c + 16), pk(r1, 32 * c + 16)};
    wgmma_rs_fp8<false>(d, a, smem_desc(vt_addr + c * 32, 16, 1024), c > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(d);
  // The accumulator: n8 block j, d[4j + {0, 1}] row g, d[4j + {2, 3}] row
  // g + 8, columns 8j + 2t and 8j + 2t + 1.
  for (int j = 0; j < kDims / 8; ++j) {
    out[r0 * kDims + 8 * j + 2 * t] = d[4 * j];
    out[r0 * kDims + 8 * j + 2 * t + 1] = d[4 * j + 1];
    out[r1 * kDims + 8 * j + 2 * t] = d[4 * j + 2];
    out[r1 * kDims + 8 * j + 2 * t + 1] = d[4 * j + 3];
  }
}

#define CK(x)                                                                            \
  do {                                                                                   \
    const cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

}  // namespace

int main() {
  // Small exact E4M3 values: P in {0, 0.5, 1, 1.5, 2}, V in {-2, -1.5, .., 2}.
  std::vector<std::uint8_t> p(kRows * kKeys), v(kKeys * kDims);
  std::vector<double> pf(p.size()), vf(v.size());
  for (int i = 0; i < kRows * kKeys; ++i) {
    const float x = 0.5f * static_cast<float>((i * 7 + i / kKeys * 3) % 5);
    p[i] = __nv_fp8_e4m3(x).__x;
    pf[i] = x;
  }
  for (int i = 0; i < kKeys * kDims; ++i) {
    const float x = 0.5f * static_cast<float>((i * 11 + i / kDims * 5) % 9) - 2.f;
    v[i] = __nv_fp8_e4m3(x).__x;
    vf[i] = x;
  }
  std::uint8_t *dp = nullptr, *dv = nullptr;
  float* dout = nullptr;
  CK(cudaMalloc(&dp, p.size()));
  CK(cudaMalloc(&dv, v.size()));
  CK(cudaMalloc(&dout, kRows * kDims * sizeof(float)));
  CK(cudaMemcpy(dp, p.data(), p.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, v.data(), v.size(), cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xff, kRows * kDims * sizeof(float)));
  probe_kernel<<<1, 128>>>(dp, dv, dout);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> out(kRows * kDims);
  CK(cudaMemcpy(out.data(), dout, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int r = 0; r < kRows; ++r)
    for (int n = 0; n < kDims; ++n) {
      double want = 0;
      for (int k = 0; k < kKeys; ++k) want += pf[r * kKeys + k] * vf[k * kDims + n];
      const float got = out[r * kDims + n];
      if (!(got == static_cast<float>(want))) {
        if (bad < 8) std::printf("  O[%d][%d] = %g, want %g\n", r, n, got, want);
        ++bad;
      }
    }
  std::printf("wgmma_fp8_probe: %s (%d of %d elements differ)\n", bad == 0 ? "PASS" : "FAIL", bad, kRows * kDims);
  return bad == 0 ? 0 : 1;
}
