// The FlashInfer adapter's one run-time to compile-time switch: which
// instantiations are built. Each entry's plan and launch go through
// dispatch_built; supports() and the declared capabilities refuse the rest
// before it is reached. Build cost on the development machine:
// examples/external/flashinfer/README.md.
//   both entries: query, KV and output of one dtype, F16 or BF16;
//   decode also:  an FP8 (E4M3 or E5M2) KV cache under an F16 or BF16 query;
//   head dims 64, 128, 256 (query = value); softcap on or off.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "pagecheck/external.h"

namespace fi_adapter {

template <class DTypeQ_, class DTypeKV_, std::uint32_t kHeadDim_, bool kSoftcap_>
struct Built {
  using DTypeQ = DTypeQ_;  // query and output
  using DTypeKV = DTypeKV_;
  static constexpr std::uint32_t kHeadDim = kHeadDim_;
  static constexpr bool kSoftcap = kSoftcap_;
};

constexpr std::uint32_t kBuiltDtypes =
    PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_F16) | PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_BF16);
constexpr std::uint32_t kBuiltFp8 =
    PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_F8_E4M3) | PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_F8_E5M2);
inline constexpr std::int32_t kBuiltHeadDims[] = {64, 64, 128, 128, 256, 256};
constexpr std::uint32_t kBuiltHeadDimCount = 3;

template <class Q, class KV, std::uint32_t kHeadDim, class F>
cudaError_t dispatch_softcap(const pagecheck_case_desc& d, F&& f) {
  if (d.softcap > 0.0f) return f(Built<Q, KV, kHeadDim, true>{});
  return f(Built<Q, KV, kHeadDim, false>{});
}

template <class Q, class KV, class F>
cudaError_t dispatch_head_dim(const pagecheck_case_desc& d, F&& f) {
  switch (d.head_dim) {
    case 64: return dispatch_softcap<Q, KV, 64>(d, f);
    case 128: return dispatch_softcap<Q, KV, 128>(d, f);
    case 256: return dispatch_softcap<Q, KV, 256>(d, f);
    default: return cudaErrorInvalidValue;  // refused by the declared head dims first
  }
}

template <class Q, bool kFp8Kv, class F>
cudaError_t dispatch_kv(const pagecheck_case_desc& d, F&& f) {
  if constexpr (kFp8Kv) {
    if (d.kv_dtype == PAGECHECK_DTYPE_F8_E4M3) return dispatch_head_dim<Q, __nv_fp8_e4m3>(d, f);
    if (d.kv_dtype == PAGECHECK_DTYPE_F8_E5M2) return dispatch_head_dim<Q, __nv_fp8_e5m2>(d, f);
  }
  if (d.kv_dtype == d.query_dtype) return dispatch_head_dim<Q, Q>(d, f);
  return cudaErrorInvalidValue;
}

// Calls f(Built<...>{}) for the case (kFp8Kv: FP8 caches too);
// cudaErrorInvalidValue for a combination that is not built (the declared
// capabilities and supports() refuse it first).
template <bool kFp8Kv, class F>
cudaError_t dispatch_built(const pagecheck_case_desc& d, F&& f) {
  if (d.output_dtype != d.query_dtype) return cudaErrorInvalidValue;
  if (d.query_dtype == PAGECHECK_DTYPE_BF16) return dispatch_kv<__nv_bfloat16, kFp8Kv>(d, f);
  if (d.query_dtype == PAGECHECK_DTYPE_F16) return dispatch_kv<__half, kFp8Kv>(d, f);
  return cudaErrorInvalidValue;
}

}  // namespace fi_adapter
