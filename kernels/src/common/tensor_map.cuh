// cuTensorMapEncodeTiled, reached through the runtime's driver entry point
// (the runtime is linked statically; libcuda is never linked directly), for
// the kernels and dev drivers that build tensor maps.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The encoder, looked up once; nullptr where the driver has none.
inline EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult result{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &result) !=
            cudaSuccess ||
        result != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(ptr);
  }();
  return fn;
}

// A cache pool as a 4-D map of 16-bit elements over (dim, slot, head,
// block), or (dim, head, slot, block) when `head_inner` (strides ascending
// either way), with the given element strides, rows of `dims` elements;
// boxes of 64 dims x box_rows slots x 1 head x 1 block, 128-byte swizzle:
// box rows land 128 bytes apart in either order. The prefill kernel's and the decode loop's
// K/V tiles by tensor copy (attn_sm90_ws.cu, decode_mma.cuh).
inline Status make_kv_map(CUtensorMap& map, bool f16, const void* base, int dims_per_row, std::int64_t slots,
                          std::int64_t heads, std::int64_t blocks, std::int64_t slot_stride, std::int64_t head_stride,
                          std::int64_t block_stride, int box_rows, bool head_inner) {
  EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return invalid_input("cuTensorMapEncodeTiled is not available from the driver");
  // One head: its stride is never stepped; give it a legal value.
  if (heads == 1) head_stride = head_inner ? slot_stride : block_stride;
  const cuuint64_t n_slot = static_cast<cuuint64_t>(slots), n_head = static_cast<cuuint64_t>(heads);
  const cuuint64_t s_slot = static_cast<cuuint64_t>(slot_stride) * 2;
  const cuuint64_t s_head = static_cast<cuuint64_t>(head_stride) * 2;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(dims_per_row), head_inner ? n_head : n_slot,
                              head_inner ? n_slot : n_head, static_cast<cuuint64_t>(blocks)};
  const cuuint64_t strides[3] = {head_inner ? s_head : s_slot, head_inner ? s_slot : s_head,
                                 static_cast<cuuint64_t>(block_stride) * 2};
  const cuuint32_t box[4] = {64, head_inner ? 1u : static_cast<cuuint32_t>(box_rows),
                             head_inner ? static_cast<cuuint32_t>(box_rows) : 1u, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(&map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
                            const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return invalid_input("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  return {};
}

}  // namespace pagecheck::gpu
