// Hopper (sm_90a) building blocks shared by the wgmma attention kernels
// (attn_sm90.cu, attn_sm90_ws.cu): the 128-byte swizzled tile layout and its
// wgmma descriptors, wgmma issue/commit/wait, mbarriers (with the tensor
// copy engine's transaction counts), named barriers, setmaxnreg and TMA.
// Included only by files compiled for sm_90a alone; on other targets the
// bodies compile to nothing (PAGECHECK_SM90A_DEVICE unset).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/tma.cuh"  // mbarriers, the proxy fence, tma_load_4d

namespace pagecheck::gpu::attn {

// Named here too, for the callers that qualify them (attn::mbar_wait, ...).
using gpu::fence_proxy_async;
using gpu::mbar_arrive_expect_tx;
using gpu::mbar_init;
using gpu::mbar_wait;
using gpu::tma_load_4d;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PAGECHECK_SM90A_DEVICE 1
#endif

// ---- device helpers ---------------------------------------------------------

// Byte offset of 16-byte chunk `chunk` (0..15) of row `row` in a tile of kRows
// rows of 128 16-bit elements: two column halves of kRows x 128 bytes, each
// 128-byte swizzled.
template <int kRows>
__device__ __forceinline__ std::uint32_t sw128(int row, int chunk) {
  return static_cast<std::uint32_t>((chunk >> 3) * (kRows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle: start address,
// leading and stride byte offsets (all >> 4), layout type 1 in bits 62-63.
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr, std::uint32_t leading_bytes,
                                                   std::uint32_t stride_bytes) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>(leading_bytes >> 4) << 16) |
         (static_cast<std::uint64_t>(stride_bytes >> 4) << 32) | (1ull << 62);
}

// The descriptor of an address `bytes` (a multiple of 16) past base's: only
// the start-address field (bits 0-13, the address >> 4) moves, and for a
// shared-memory address (below 256 KB) it never carries out, so one 32-bit
// add stands for smem_desc's add, mask, shift and or (PAGECHECK_WGMMA_DESC_ADD
// in wgmma_tile.cuh).
__device__ __forceinline__ std::uint64_t desc_at(std::uint64_t base, std::uint32_t bytes) {
  const std::uint32_t lo = static_cast<std::uint32_t>(base) + (bytes >> 4);
  return (base & 0xFFFFFFFF00000000ull) | lo;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers
// across the asynchronous wgmma that owns them.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N, int M>
__device__ __forceinline__ void fence_regs_u(std::uint32_t (&r)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}
__device__ __forceinline__ std::uint32_t ld_shared32(std::uint32_t src) {
  std::uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(src) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared32(std::uint32_t dst, std::uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(dst), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_shared16(std::uint32_t src) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(src) : "memory");
  return v;
}

#ifdef PAGECHECK_SM90A_DEVICE
// The 64 float accumulators of an m64n128 wgmma, as asm operands %0..%63.
#define PC_WGMMA_D_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define PC_WGMMA_D_OPERANDS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
// D[64x128] (+)= A[64x16] (smem, K-major) * B[16x128] (smem, K-major);
// TYPE bf16 or f16.
#define PC_WGMMA_SS(TYPE, d, desc_a, desc_b, accumulate)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " PC_WGMMA_D_REGS   \
               ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                 \
               : PC_WGMMA_D_OPERANDS(d)                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
// The 32 float accumulators of an m64n64 wgmma (head dim 64's O), as %0..%31.
#define PC_WGMMA_D32_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define PC_WGMMA_D32_OPERANDS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
// D[64x64] += A[64x16] (registers) * B[16x64] (smem, MN-major).
#define PC_WGMMA_RS64(TYPE, d, a, desc_b)                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " PC_WGMMA_D32_REGS  \
               ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                  \
               : PC_WGMMA_D32_OPERANDS(d)                                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
// D[64x64] (+)= A[64x16] (smem, K-major) * B[16x64] (smem, K-major): S of
// a 64-key tile (head dim 256's).
#define PC_WGMMA_SS64(TYPE, d, desc_a, desc_b, accumulate)                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " PC_WGMMA_D32_REGS  \
               ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                 \
               : PC_WGMMA_D32_OPERANDS(d)                                                         \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
// The 16 float accumulators of an m64n32 wgmma, as %0..%15.
#define PC_WGMMA_D16_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define PC_WGMMA_D16_OPERANDS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
// D[64x32] (+)= A[64x16] (smem, K-major) * B[16x32] (smem, K-major): S of
// a warpgroup's 32 keys (the MLA decode kernel's).
#define PC_WGMMA_SS32(TYPE, d, desc_a, desc_b, accumulate)                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " " PC_WGMMA_D16_REGS  \
               ", %16, %17, p, 1, 1, 0, 0;\n}\n"                                                 \
               : PC_WGMMA_D16_OPERANDS(d)                                                         \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
// The 128 float accumulators of an m64n256 wgmma (head dim 256's O), as
// %0..%127.
#define PC_WGMMA_D128_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define PC_WGMMA_D128_OPERANDS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
// D[64x256] += A[64x16] (registers) * B[16x256] (smem, MN-major).
#define PC_WGMMA_RS256(TYPE, d, a, desc_b)                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                    \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " " PC_WGMMA_D128_REGS \
               ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"                              \
               : PC_WGMMA_D128_OPERANDS(d)                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
// D[64x128] += A[64x16] (registers) * B[16x128] (smem, MN-major).
// D[64x128] (+)= A[64x32] (smem, K-major, FP8 TYPE_A) * B[32x128] (smem,
// K-major, FP8 TYPE_B): FP8 operands are K-major only (no transpose flags).
#define PC_WGMMA_SS_FP8(TYPE_A, TYPE_B, d, desc_a, desc_b, accumulate)                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n128k32.f32." TYPE_A "." TYPE_B " " PC_WGMMA_D_REGS \
               ", %64, %65, p, 1, 1;\n}\n"                                                       \
               : PC_WGMMA_D_OPERANDS(d)                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
#define PC_WGMMA_RS(TYPE, d, a, desc_b)                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " PC_WGMMA_D_REGS   \
               ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                  \
               : PC_WGMMA_D_OPERANDS(d)                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
#define PC_WGMMA_RS_FP8(TYPE_A, TYPE_B, d, a, desc_b, accumulate)                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n128k32.f32." TYPE_A "." TYPE_B " " PC_WGMMA_D_REGS \
               ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"                                     \
               : PC_WGMMA_D_OPERANDS(d)                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate))
#endif

// D[64 x 2N] (+)= A (smem) * B (smem): m64n128 for 64 accumulators a thread
// (S of a 128-key tile), m64n64 for 32 (a 64-key tile), m64n32 for 16.
template <bool kF16, int N = 64>
__device__ __forceinline__ void wgmma_ss(float (&d)[N], std::uint64_t a, std::uint64_t b, int accumulate) {
  static_assert(N == 64 || N == 32 || N == 16, "m64n128, m64n64 or m64n32");
#ifdef PAGECHECK_SM90A_DEVICE
  if constexpr (N == 64 && kF16)
    PC_WGMMA_SS("f16", d, a, b, accumulate);
  else if constexpr (N == 64)
    PC_WGMMA_SS("bf16", d, a, b, accumulate);
  else if constexpr (N == 16 && kF16)
    PC_WGMMA_SS32("f16", d, a, b, accumulate);
  else if constexpr (N == 16)
    PC_WGMMA_SS32("bf16", d, a, b, accumulate);
  else if constexpr (kF16)
    PC_WGMMA_SS64("f16", d, a, b, accumulate);
  else
    PC_WGMMA_SS64("bf16", d, a, b, accumulate);
#endif
}
// D[64 x 128] (+)= A (smem, E4M3) * B (smem, E4M3 or, kE5M2, E5M2): one
// k-step of 32 FP8 dims (32 bytes of a 128-byte swizzled row).
template <bool kE5M2>
__device__ __forceinline__ void wgmma_ss_fp8(float (&d)[64], std::uint64_t a, std::uint64_t b, int accumulate) {
#ifdef PAGECHECK_SM90A_DEVICE
  if constexpr (kE5M2)
    PC_WGMMA_SS_FP8("e4m3", "e5m2", d, a, b, accumulate);
  else
    PC_WGMMA_SS_FP8("e4m3", "e4m3", d, a, b, accumulate);
#endif
}
// D[64 x 128] (+)= A (registers, E4M3) * B (smem, E4M3 or, kE5M2, E5M2):
// one k-step of 32 (kernels/src/dev/wgmma_fp8_probe.cu checks the register
// fragment: thread t of a warp holds rows g and g + 8 (g = lane / 4), k =
// 4t..4t+3 in a[0] / a[1] and 16+4t..16+4t+3 in a[2] / a[3]).
template <bool kE5M2>
__device__ __forceinline__ void wgmma_rs_fp8(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b,
                                             int accumulate) {
#ifdef PAGECHECK_SM90A_DEVICE
  if constexpr (kE5M2)
    PC_WGMMA_RS_FP8("e4m3", "e5m2", d, a, b, accumulate);
  else
    PC_WGMMA_RS_FP8("e4m3", "e4m3", d, a, b, accumulate);
#endif
}
// D[64 x 2N] += A (registers) * B (smem): m64n128 for 64 accumulators a
// thread (head dim 128's O), m64n64 for 32 (head dim 64's), m64n256 for
// 128 (head dim 256's).
template <bool kF16, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N], const std::uint32_t (&a)[4], std::uint64_t b) {
  static_assert(N == 128 || N == 64 || N == 32, "m64n256, m64n128 or m64n64");
#ifdef PAGECHECK_SM90A_DEVICE
  if constexpr (N == 128 && kF16)
    PC_WGMMA_RS256("f16", d, a, b);
  else if constexpr (N == 128)
    PC_WGMMA_RS256("bf16", d, a, b);
  else if constexpr (N == 64 && kF16)
    PC_WGMMA_RS("f16", d, a, b);
  else if constexpr (N == 64)
    PC_WGMMA_RS("bf16", d, a, b);
  else if constexpr (kF16)
    PC_WGMMA_RS64("f16", d, a, b);
  else
    PC_WGMMA_RS64("bf16", d, a, b);
#endif
}

// ---- mbarriers and named barriers --------------------------------------------

__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives on `bar` once every cp.async this thread issued before has
// landed (the barrier's expected count includes this arrival).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on named barrier `id` without waiting (the other side syncs).
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// 3-D tensor copy global -> shared, as tma_load_4d (common/tma.cuh).
__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const void* map, std::uint32_t bar, int c0, int c1,
                                            int c2) {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}
// 3-D tensor copy shared -> global (a bulk group of the issuing thread;
// the source must be fenced for the async proxy first).
__device__ __forceinline__ void tma_store_3d(const void* map, std::uint32_t src, int c0, int c1, int c2) {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit() {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// The issuing thread's bulk groups have read their shared memory sources.
__device__ __forceinline__ void bulk_wait_read_all() {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}
// ... and completed their writes.
__device__ __forceinline__ void bulk_wait_all() {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}
// Four 8x8 b16 matrices from registers (lane i holds row i / 4, columns
// 2 (i % 4) and + 1 of each, the mma accumulator layout) to shared memory
// rows whose addresses lanes 8k .. 8k + 7 give for matrix k.
__device__ __forceinline__ void stmatrix_x4(std::uint32_t addr, std::uint32_t r0, std::uint32_t r1, std::uint32_t r2,
                                            std::uint32_t r3) {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
#endif
}
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
#endif
}
// Register budget of this warpgroup (all four warps execute it); needs a
// register cap at entry (__launch_bounds__(threads, 1)).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#ifdef PAGECHECK_SM90A_DEVICE
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// Rows of S (this thread's two rows, g and g + 8): max over the N / 2
// values each (32 for a 128-key tile, 16 for 64 keys), then across the four
// lanes of the row.
template <int N>
__device__ __forceinline__ float row_max(const float (&s)[N], int h) {
  static_assert(N % 8 == 0, "whole pairs of n8 blocks");
  float a = fmaxf(s[2 * h], s[2 * h + 1]), b = fmaxf(s[4 + 2 * h], s[4 + 2 * h + 1]);
#pragma unroll
  for (int nb = 2; nb < N / 4; nb += 2) {
    a = fmaxf(a, fmaxf(s[nb * 4 + 2 * h], s[nb * 4 + 2 * h + 1]));
    b = fmaxf(b, fmaxf(s[nb * 4 + 4 + 2 * h], s[nb * 4 + 4 + 2 * h + 1]));
  }
  a = fmaxf(a, b);
  a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 1));
  return fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 2));
}

}  // namespace pagecheck::gpu::attn
