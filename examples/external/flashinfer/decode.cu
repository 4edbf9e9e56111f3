// flashinfer_decode: FlashInfer's CUDA-core batch decode over pages
// (flashinfer/attention/decode.cuh, BatchDecodeWithPagedKVCacheDispatched),
// with its own split-KV partition and merge, planned by FlashInfer's
// DecodePlan in its CUDA-graph mode (a grid fixed by the description; the
// partition in the plan-owned workspace).
//
// Built (dispatch.cuh): F16 or BF16 query and output over a KV cache of the
// same dtype or FP8 (E4M3, E5M2), head dims 64, 128, 256, softcap or not; NHD and HND (a stride, not a template),
// any page size, GQA group sizes 1, 2, 3, 4, 8 (FlashInfer's own dispatch),
// sliding window, k/v scales. Each (dtype, head dim, softcap) is 10 kernels
// (5 group sizes x 2 pipeline depths) and their merge kernels.
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <cstdio>

#include "common.cuh"
#include "dispatch.cuh"

namespace fi_adapter {

namespace {

constexpr auto kPosEncoding = flashinfer::PosEncodingMode::kNone;
bool group_dispatched(std::int64_t group) { return group == 1 || group == 2 || group == 3 || group == 4 || group == 8; }

// FlashInfer's grid of the split kernel for the description: whether it
// splits and the padded batch it plans for (CUDA-graph mode: both depend on
// num_seqs, heads and the device only).
struct Grid {
  bool split = false;
  std::uint32_t padded_batch = 0;
};

// One built (dtype, head dim, softcap) of the decode.
template <class Built>
struct Decode {
  using DTypeQ = typename Built::DTypeQ;  // and output
  using DTypeKV = typename Built::DTypeKV;
  static constexpr std::uint32_t kHeadDim = Built::kHeadDim;
  // Sliding window always compiled in: with window_left -1 FlashInfer's mask
  // keeps every key, so one variant serves windowed and plain cases.
  using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/true, Built::kSoftcap,
                                               /*alibi=*/false>;
  using Params = flashinfer::BatchDecodeParams<DTypeQ, DTypeKV, DTypeQ, std::int32_t>;

  // Calls f(work estimation function) for the case's GQA group.
  template <class F>
  static cudaError_t with_estimation(const pagecheck_case_desc& d, F&& f) {
    switch (d.q_heads / d.kv_heads) {
      case 1: return f(flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<1, kHeadDim, kPosEncoding, Variant, Params>);
      case 2: return f(flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<2, kHeadDim, kPosEncoding, Variant, Params>);
      case 3: return f(flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<3, kHeadDim, kPosEncoding, Variant, Params>);
      case 4: return f(flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<4, kHeadDim, kPosEncoding, Variant, Params>);
      case 8: return f(flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<8, kHeadDim, kPosEncoding, Variant, Params>);
      default: return cudaErrorInvalidValue;
    }
  }

  static cudaError_t grid(const pagecheck_case_desc& d, Grid& grid) {
    return with_estimation(d, [&](auto estimate) {
      bool split = false;
      std::uint32_t max_grid = 0, pages_per_chunk = 0, new_batch = 0, gdy = 0;
      std::vector<std::int32_t> no_pages(static_cast<std::size_t>(d.num_seqs) + 1, 0);
      const cudaError_t err = estimate(split, max_grid, pages_per_chunk, new_batch, gdy,
                                       static_cast<std::uint32_t>(d.num_seqs), no_pages.data(),
                                       static_cast<std::uint32_t>(d.q_heads), static_cast<std::uint32_t>(d.block_size),
                                       /*enable_cuda_graph=*/true, nullptr);
      grid.split = split;
      grid.padded_batch = split ? max_grid / gdy : static_cast<std::uint32_t>(d.num_seqs);
      return err;
    });
  }

  // The byte sizes DecodePlan allocates, each part 16-aligned, with room.
  static Layout layout(const pagecheck_case_desc& d, const Grid& grid) {
    const std::uint64_t p = grid.padded_batch;
    const std::uint64_t int_bytes = 2 * align_up(4 * p, 16) + align_up(4 * (p + 1), 16) + 16 + align_up(p, 16) + 256;
    const std::uint64_t heads = static_cast<std::uint64_t>(d.q_heads);
    const std::uint64_t float_bytes =
        grid.split ? align_up(heads * p * kHeadDim * 4, 16) + align_up(heads * p * 4, 16) + 256 : 0;
    return make_layout(d, int_bytes, float_bytes);
  }

  static cudaError_t plan(const pagecheck_case_desc& d, const Layout& l, const PagePlan& pages, void* workspace,
                          void* staging, flashinfer::DecodePlanInfo& info, cudaStream_t s) {
    auto* bytes = static_cast<unsigned char*>(workspace);
    return with_estimation(d, [&](auto estimate) {
      return flashinfer::DecodePlan<kHeadDim, kPosEncoding, Variant, Params>(
          bytes + l.float_offset, l.float_bytes, bytes, staging, l.int_bytes, info,
          const_cast<std::int32_t*>(pages.kv_indptr.data()), static_cast<std::uint32_t>(d.num_seqs),
          static_cast<std::uint32_t>(d.q_heads), static_cast<std::uint32_t>(d.block_size), /*enable_cuda_graph=*/true, s,
          estimate);
    });
  }

  static cudaError_t run(const pagecheck_case_desc& d, const pagecheck_buffers& b, const Layout& l,
                         const flashinfer::DecodePlanInfo& info, void* workspace, cudaStream_t s) {
    auto* bytes = static_cast<unsigned char*>(workspace);
    std::int64_t strides[3];
    kv_strides(d, strides);
    flashinfer::paged_kv_t<DTypeKV, std::int32_t> paged_kv(
        static_cast<std::uint32_t>(d.kv_heads), static_cast<std::uint32_t>(d.block_size), kHeadDim,
        static_cast<std::uint32_t>(d.num_seqs),
        d.kv_layout == PAGECHECK_LAYOUT_HND ? flashinfer::QKVLayout::kHND : flashinfer::QKVLayout::kNHD,
        static_cast<DTypeKV*>(const_cast<void*>(b.key_cache)),
        static_cast<DTypeKV*>(const_cast<void*>(b.value_cache)),
        strides, reinterpret_cast<std::int32_t*>(bytes + l.indices),
        reinterpret_cast<std::int32_t*>(bytes + l.kv_indptr), reinterpret_cast<std::int32_t*>(bytes + l.last_page_len));
    Params p(static_cast<DTypeQ*>(const_cast<void*>(b.query)), /*q_rope_offset=*/nullptr, paged_kv,
             static_cast<DTypeQ*>(b.output), b.lse, /*maybe_alibi_slopes=*/nullptr, static_cast<std::uint32_t>(d.q_heads),
             static_cast<std::int32_t>(d.query_stride_token), static_cast<std::int32_t>(d.query_stride_head),
             window_left(d), d.softcap, d.scale * d.k_scale, /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
    p.request_indices = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.request_indices_offset);
    p.kv_tile_indices = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.kv_tile_indices_offset);
    p.o_indptr = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.o_indptr_offset);
    p.kv_chunk_size_ptr = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.kv_chunk_size_ptr_offset);
    DTypeQ* tmp_v = nullptr;
    float* tmp_s = nullptr;
    if (info.split_kv) {
      tmp_v = flashinfer::GetPtrFromBaseOffset<DTypeQ>(bytes + l.float_offset, info.v_offset);
      tmp_s = flashinfer::GetPtrFromBaseOffset<float>(bytes + l.float_offset, info.s_offset);
      p.block_valid_mask = flashinfer::GetPtrFromBaseOffset<bool>(bytes, info.block_valid_mask_offset);
    }
    p.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
    return flashinfer::BatchDecodeWithPagedKVCacheDispatched<kHeadDim, kPosEncoding, Variant>(p, tmp_v, tmp_s,
                                                                                             /*enable_pdl=*/false, s);
  }
};

// The decode family for Entry (common.cuh).
struct DecodeFamily {
  static constexpr const char* kName = "flashinfer_decode";
  static constexpr const char* kPlanner = "FlashInfer DecodePlan";
  static constexpr const char* kKernel = "FlashInfer BatchDecodeWithPagedKVCacheDispatched";
  // FlashInfer's plan info, kept from plan to launch: in CUDA-graph mode its
  // offsets, padded batch and split flag depend only on the description.
  static inline flashinfer::DecodePlanInfo plan_info;

  static bool supports(const pagecheck_case_desc& d, char* reason, std::size_t size) {
    if (d.kv_dtype != d.query_dtype && !(PAGECHECK_DTYPE_BIT(d.kv_dtype) & kBuiltFp8)) {
      std::snprintf(reason, size, "%s: built for a KV cache of the query's dtype or FP8; the case mixes F16 and BF16",
                    kName);
      return false;
    }
    const std::int64_t group = d.q_heads / d.kv_heads;
    if (group_dispatched(group)) return true;
    std::snprintf(reason, size, "%s: GQA group %lld is not dispatched by FlashInfer's decode (1, 2, 3, 4, 8)", kName,
                  static_cast<long long>(group));
    return false;
  }

  static cudaError_t layout(const pagecheck_case_desc& d, Layout& l) {
    return dispatch_built<true>(d, [&](auto built) {
      using D = Decode<decltype(built)>;
      Grid grid;
      const cudaError_t err = D::grid(d, grid);
      l = D::layout(d, grid);
      return err;
    });
  }

  static cudaError_t plan(const pagecheck_case_desc& d, const Layout& l, PagePlan& pages, void* workspace,
                          void* staging, cudaStream_t s) {
    return dispatch_built<true>(
        d, [&](auto built) { return Decode<decltype(built)>::plan(d, l, pages, workspace, staging, plan_info, s); });
  }

  static cudaError_t run(const pagecheck_case_desc& d, const pagecheck_buffers& b, const Layout& l, void* workspace,
                         cudaStream_t s) {
    return dispatch_built<true>(
        d, [&](auto built) { return Decode<decltype(built)>::run(d, b, l, plan_info, workspace, s); });
  }
};

}  // namespace

pagecheck_kernel_entry decode_entry() {
  // One query token per sequence sees every key: causal or not is the same.
  pagecheck_kernel_entry e = Entry<DecodeFamily>::make(
      "FlashInfer 0.6 CUDA-core batch decode over pages, split-KV + merge, CUDA-graph plan",
      PAGECHECK_FEATURE_DECODE | PAGECHECK_FEATURE_WINDOW | PAGECHECK_FEATURE_SOFTCAP | PAGECHECK_FEATURE_KV_SCALES |
          PAGECHECK_FEATURE_NON_CAUSAL);
  e.kv_dtypes |= kBuiltFp8;
  return e;
}

}  // namespace fi_adapter
