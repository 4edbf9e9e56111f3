// misbehaving: kernels that fail the way broken kernels do, not with a wrong
// number, for the isolation checks (docs/cli.md "Isolation",
// scripts/device_isolation_check.sh). Built only as a test library
// (examples/external/CMakeLists.txt: libpagecheck_misbehaving.so); nothing
// to copy. Entries:
//   oob_write   writes far past the end of its output: the stream reports
//               cudaErrorIllegalAddress and the context is dead
//   trap        executes a trap instruction: the launch fails and the
//               context is dead
//   spin        never returns: only --path-timeout ends it
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

thread_local char last_message[256];

int fail(const char* what, cudaError_t err) {
  std::snprintf(last_message, sizeof(last_message), "%s: %s", what, cudaGetErrorString(err));
  return 1;
}

const char* last_error() { return last_message; }

int supports(const pagecheck_case_desc* /*desc*/, char* /*reason*/, size_t /*size*/) { return 1; }

template <int kHow>
int launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* /*workspace*/, void* stream) {
  const std::int64_t output_bytes = d->num_tokens * d->output_stride_token * 2;  // F16/BF16 output
  misbehave<kHow><<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<char*>(b->output), output_bytes);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return fail("misbehave launch", err);
  return 0;
}

pagecheck_kernel_entry make_entry(const char* name, const char* description,
                                  int (*launch_fn)(const pagecheck_case_desc*, const pagecheck_buffers*, void*, void*)) {
  pagecheck_kernel_entry e{};
  e.name = name;
  e.description = description;
  e.query_dtypes = PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_F16) | PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_BF16);
  e.kv_dtypes = e.query_dtypes;
  e.layouts = PAGECHECK_LAYOUT_BIT(PAGECHECK_LAYOUT_NHD);
  e.table_forms = PAGECHECK_TABLE_BIT(PAGECHECK_TABLE_DENSE) | PAGECHECK_TABLE_BIT(PAGECHECK_TABLE_CSR);
  e.features = PAGECHECK_FEATURE_DECODE | PAGECHECK_FEATURE_WINDOW | PAGECHECK_FEATURE_SOFTCAP |
               PAGECHECK_FEATURE_KV_SCALES | PAGECHECK_FEATURE_NON_CAUSAL;
  e.supports = supports;
  e.launch = launch_fn;
  e.last_error = last_error;
  return e;
}

const pagecheck_kernel_entry kEntries[] = {
    make_entry("oob_write", "writes 1 TiB past the end of its output (an illegal address)", launch<kOutOfBounds>),
    make_entry("trap", "executes a trap instruction", launch<kTrap>),
    make_entry("spin", "never returns", launch<kSpin>),
};

const pagecheck_kernel_table kTable = {PAGECHECK_ABI_MAJOR, PAGECHECK_ABI_MINOR, sizeof(pagecheck_kernel_entry),
                                       sizeof(kEntries) / sizeof(kEntries[0]), kEntries};

}  // namespace

extern "C" PAGECHECK_EXPORT const pagecheck_kernel_table* pagecheck_kernels_v1(void) { return &kTable; }
