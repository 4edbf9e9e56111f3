// The legacy default stream held shut while an eager run is read back
// (stream_gate.cuh).
#include "harness/stream_gate.cuh"

#include <cstdint>

namespace pagecheck::gpu {

namespace {

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_until_open(const volatile std::uint32_t* flag, std::uint64_t max_ns) {
  const std::uint64_t start = global_ns();
  while (*flag == 0 && global_ns() - start < max_ns) __nanosleep(1000);
}

}  // namespace

Expected<LegacyStreamGate> LegacyStreamGate::make() {
  auto flag = device_alloc(sizeof(std::uint32_t));
  if (!flag) return flag.error();
  CUDA_TRY(cudaMemset(flag->get(), 0, sizeof(std::uint32_t)));
  return LegacyStreamGate(std::move(*flag));
}

Status LegacyStreamGate::close(cudaStream_t stream) {
  // Shut before the kernel can read it: the reset is done before the launch.
  CUDA_TRY(cudaMemsetAsync(flag_.get(), 0, sizeof(std::uint32_t), stream));
  CUDA_TRY(cudaStreamSynchronize(stream));
  hold_until_open<<<1, 1, 0, cudaStreamLegacy>>>(flag_.as<std::uint32_t>(),
                                                  static_cast<std::uint64_t>(kMaxHoldSeconds * 1e9));
  CUDA_TRY_LAUNCH();
  return {};
}

Status LegacyStreamGate::open(cudaStream_t stream) {
  CUDA_TRY(cudaMemsetAsync(flag_.get(), 0xFF, sizeof(std::uint32_t), stream));
  return {};
}

}  // namespace pagecheck::gpu
