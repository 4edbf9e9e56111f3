// misbehaving: kernels that fail the way broken kernels do, for the
// isolation checks and the checks of the harness (docs/cli.md "Isolation",
// scripts/device_isolation_check.sh, tests/gpu/test_gpu_external.cpp).
// Built only as a test library (examples/external/CMakeLists.txt:
// libpagecheck_misbehaving.so); nothing to copy. Entries:
//   oob_write      writes far past the end of its output: the stream reports
//                  cudaErrorIllegalAddress and the context is dead
//   trap           executes a trap instruction: the launch fails and the
//                  context is dead
//   spin           never returns: only --path-timeout ends it
//   stale_lengths  simple_decode reading the lengths of its first call: it
//                  copies seq_lens into a buffer of its own at its first
//                  launch for a case (workspace_bytes, which pagecheck calls
//                  once per case, forgets the copy) and reads that copy from
//                  then on; right on every eager run of the case as
//                  uploaded, stale once the graph check changes the lengths
//   wrong_stream   simple_decode launched on the legacy default stream
//                  instead of the stream it is given
// Each declares the features of simple_decode, so that it is selected on the
// decode cases of the default suite.
//
// Run (one line), e.g.:
//   pagecheck run --kernel build/examples/external/libpagecheck_misbehaving.so
//       --paths reference,direct,ext:oob_write --path-timeout 30
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "pagecheck/external.h"
#include "simple_decode_kernel.cuh"

namespace {

enum Misbehaviour : int { kOutOfBounds = 0, kTrap = 1, kSpin = 2 };

// Never written: the spinning kernel waits for it forever. volatile, so that
// every iteration reads memory and the loop cannot be folded away.
__device__ volatile int g_never_set = 0;

template <int kHow>
__global__ void misbehave(char* output, std::int64_t output_bytes) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  if constexpr (kHow == kOutOfBounds) {
    // 1 TiB past the output: far outside any allocation.
    output[output_bytes + (std::int64_t{1} << 40)] = 1;
  } else if constexpr (kHow == kTrap) {
    __trap();
  } else {
    while (g_never_set == 0) {
    }
  }
}

int runs_anywhere(const pagecheck_case_desc* /*desc*/, char* /*reason*/, size_t /*size*/) { return 1; }

template <int kHow>
int launch_misbehaving(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* /*workspace*/, void* stream) {
  const std::int64_t output_bytes = d->num_tokens * d->output_stride_token * 2;  // F16/BF16 output
  misbehave<kHow><<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<char*>(b->output), output_bytes);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return fail("misbehave launch", err);
  return 0;
}

pagecheck_kernel_entry misbehaving_entry(const char* name, const char* description,
                                         int (*launch_fn)(const pagecheck_case_desc*, const pagecheck_buffers*, void*,
                                                          void*)) {
  pagecheck_kernel_entry e = make_entry(name, description, launch_fn);
  e.supports = runs_anywhere;
  return e;
}

// ---- stale_lengths -----------------------------------------------------------
// The library's own copy of seq_lens, and whether the next launch makes it.
std::int32_t* g_kept_lens = nullptr;
std::int64_t g_kept_capacity = 0;
bool g_copy_at_next_launch = true;

std::uint64_t stale_workspace_bytes(const pagecheck_case_desc* d) {
  // A new case: the next launch copies its lengths (outside any capture).
  if (d->num_seqs > g_kept_capacity) {
    if (g_kept_lens != nullptr) cudaFree(g_kept_lens);
    g_kept_lens = nullptr;
    g_kept_capacity = 0;
    if (cudaMalloc(&g_kept_lens, static_cast<std::size_t>(d->num_seqs) * sizeof(std::int32_t)) == cudaSuccess)
      g_kept_capacity = d->num_seqs;
  }
  g_copy_at_next_launch = true;
  return 0;
}

int stale_launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* /*workspace*/, void* stream) {
  if (g_kept_lens == nullptr) return fail("stale_lengths: no buffer for the lengths", cudaErrorMemoryAllocation);
  const auto s = static_cast<cudaStream_t>(stream);
  if (g_copy_at_next_launch) {
    const cudaError_t err = cudaMemcpyAsync(g_kept_lens, b->seq_lens, static_cast<std::size_t>(d->num_seqs) * 4,
                                            cudaMemcpyDeviceToDevice, s);
    if (err != cudaSuccess) return fail("stale_lengths: copying the lengths", err);
    g_copy_at_next_launch = false;
  }
  Params p = params_of(d, b);
  p.seq_lens = g_kept_lens;  // the bug: never copied again for this case
  return enqueue<kNoFault>(d, p, stream);
}

// ---- wrong_stream ------------------------------------------------------------
int wrong_stream_launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* /*workspace*/,
                        void* /*stream*/) {
  return enqueue<kNoFault>(d, params_of(d, b), static_cast<void*>(cudaStreamLegacy));  // the bug
}

pagecheck_kernel_entry stale_entry() {
  pagecheck_kernel_entry e =
      make_entry("stale_lengths", "simple_decode reading a copy of the lengths made at its first launch for a case",
                 stale_launch);
  e.workspace_bytes = stale_workspace_bytes;
  return e;
}

const pagecheck_kernel_entry kEntries[] = {
    misbehaving_entry("oob_write", "writes 1 TiB past the end of its output (an illegal address)",
                      launch_misbehaving<kOutOfBounds>),
    misbehaving_entry("trap", "executes a trap instruction", launch_misbehaving<kTrap>),
    misbehaving_entry("spin", "never returns", launch_misbehaving<kSpin>),
    stale_entry(),
    make_entry("wrong_stream", "simple_decode launched on the legacy default stream, not the stream given",
               wrong_stream_launch),
};

const pagecheck_kernel_table kTable = {PAGECHECK_ABI_MAJOR, PAGECHECK_ABI_MINOR, sizeof(pagecheck_kernel_entry),
                                       sizeof(kEntries) / sizeof(kEntries[0]), kEntries};

}  // namespace

extern "C" PAGECHECK_EXPORT const pagecheck_kernel_table* pagecheck_kernels_v1(void) { return &kTable; }
