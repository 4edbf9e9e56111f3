// The FlashInfer adapter's one run-time to compile-time switch: which
// (dtype, head dim, softcap) instantiations are built. Each entry's plan and
// launch go through dispatch_built; supports() and the declared capabilities
// refuse the rest before it is reached. Build cost on the development
// machine: examples/external/flashinfer/README.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "pagecheck/external.h"

namespace fi_adapter {

template <class DType_, std::uint32_t kHeadDim_, bool kSoftcap_>
struct Built {
  using DType = DType_;  // query, KV and output
  static constexpr std::uint32_t kHeadDim = kHeadDim_;
  static constexpr bool kSoftcap = kSoftcap_;
};

constexpr std::uint32_t kBuiltDtypes =
    PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_F16) | PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_BF16);
inline constexpr std::int32_t kBuiltHeadDims[] = {64, 64, 128, 128, 256, 256};
constexpr std::uint32_t kBuiltHeadDimCount = 3;

template <class DType, std::uint32_t kHeadDim, class F>
cudaError_t dispatch_softcap(const pagecheck_case_desc& d, F&& f) {
  if (d.softcap > 0.0f) return f(Built<DType, kHeadDim, true>{});
  return f(Built<DType, kHeadDim, false>{});
}

template <class DType, class F>
cudaError_t dispatch_head_dim(const pagecheck_case_desc& d, F&& f) {
  switch (d.head_dim) {
    case 64: return dispatch_softcap<DType, 64>(d, f);
    case 128: return dispatch_softcap<DType, 128>(d, f);
    case 256: return dispatch_softcap<DType, 256>(d, f);
    default: return cudaErrorInvalidValue;  // refused by the declared head dims first
  }
}

// Calls f(Built<...>{}) for the case; cudaErrorInvalidValue for a
// combination that is not built (the declared capabilities refuse it first).
template <class F>
cudaError_t dispatch_built(const pagecheck_case_desc& d, F&& f) {
  if (d.query_dtype != d.kv_dtype || d.output_dtype != d.query_dtype) return cudaErrorInvalidValue;
  if (d.query_dtype == PAGECHECK_DTYPE_BF16) return dispatch_head_dim<__nv_bfloat16>(d, f);
  if (d.query_dtype == PAGECHECK_DTYPE_F16) return dispatch_head_dim<__half>(d, f);
  return cudaErrorInvalidValue;
}

}  // namespace fi_adapter
