// Hopper's mbarriers and tensor copies (compute capability 9.0), shared by
// the sm_90a attention kernels (prefill/sm90_primitives.cuh includes this)
// and the decode loop's tensor-copy form (decode/decode_mma.cuh, built for
// sm_80 too): on targets below 9.0 the bodies compile to nothing and the
// callers never reach them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pagecheck::gpu {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PAGECHECK_TMA_DEVICE 1
#endif

__device__ __forceinline__ void mbar_init(std::uint32_t bar, int count) {
#ifdef PAGECHECK_TMA_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
// Ends a barrier whose phases have all completed, so that its memory may be
// initialised anew.
__device__ __forceinline__ void mbar_inval(std::uint32_t bar) {
#ifdef PAGECHECK_TMA_DEVICE
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}
// The initialisations before it made visible to the tensor copies (and the
// rest of the cluster).
__device__ __forceinline__ void fence_mbarrier_init() {
#ifdef PAGECHECK_TMA_DEVICE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, int parity) {
#ifdef PAGECHECK_TMA_DEVICE
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}
// Arrives once and adds `bytes` to the transaction count the current phase
// waits for (the tensor copies that complete on this barrier).
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
#ifdef PAGECHECK_TMA_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
// This thread's generic-proxy accesses to shared memory ordered with the
// async proxy's (tensor copies, wgmma operands).
__device__ __forceinline__ void fence_proxy_async() {
#ifdef PAGECHECK_TMA_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// 4-D tensor copy global -> shared through tensor map `map` (the address of
// a __grid_constant__ parameter), completing on mbarrier `bar`.
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const void* map, std::uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
#ifdef PAGECHECK_TMA_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#endif
}

}  // namespace pagecheck::gpu
