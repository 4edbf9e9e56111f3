// flashinfer_prefill: FlashInfer's FA2-style batch prefill over pages
// (flashinfer/attention/prefill.cuh, BatchPrefillWithPagedKVCacheDispatched:
// tensor-core mma.sync, which FlashInfer also uses for decode with tensor
// cores), planned by FlashInfer's PrefillPlan in its CUDA-graph mode (query
// tile size and padded grid from the description; partition and split-KV
// merge offsets in the plan-owned workspace).
//
// Built (dispatch.cuh): F16 or BF16 query, KV and output (one dtype), head
// dims 64, 128, 256, softcap or not; NHD and HND, any page size and GQA
// group, causal and not, sliding window, k/v scales; decode and prefill
// cases. Each (dtype, head dim, softcap) is up to 24 kernels (3 query tiles x
// 2 masks x 4 KV tiles) and their merge kernels.
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/mask.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "common.cuh"
#include "dispatch.cuh"

namespace fi_adapter {

namespace {

constexpr auto kPosEncoding = flashinfer::PosEncodingMode::kNone;
// PrefillPlan's sizes in CUDA-graph mode, from the description alone: the
// query tile from the longest query the token count allows, the padded
// batch from the tiles of all tokens or the SM count, whichever is larger.
struct Grid {
  std::uint32_t cta_tile_q = 0;
  std::uint64_t padded_batch = 0;
};

cudaError_t prefill_grid(const pagecheck_case_desc& d, Grid& grid) {
  int device = 0, sms = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  if (cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); err != cudaSuccess)
    return err;
  const auto group = static_cast<std::uint64_t>(d.q_heads / d.kv_heads);
  const auto rows = static_cast<std::uint64_t>(d.num_tokens), n = static_cast<std::uint64_t>(d.num_seqs);
  grid.cta_tile_q = flashinfer::FA2DetermineCtaTileQ(static_cast<std::int64_t>((rows - n + 1) * group),
                                                     static_cast<std::uint32_t>(d.v_head_dim));
  const std::uint64_t tiles = (rows * group + grid.cta_tile_q - 1) / grid.cta_tile_q + n - 1;
  const std::uint64_t max_batch_if_split = static_cast<std::uint64_t>(2 * sms) / static_cast<std::uint64_t>(d.kv_heads);
  grid.padded_batch = std::max(max_batch_if_split, tiles);
  return cudaSuccess;
}

// The byte sizes PrefillPlan allocates (split-KV is always on in CUDA-graph
// mode), each part 16-aligned, with room.
Layout prefill_layout(const pagecheck_case_desc& d, const Grid& grid) {
  const std::uint64_t p = grid.padded_batch, n = static_cast<std::uint64_t>(d.num_seqs);
  const auto rows = static_cast<std::uint64_t>(d.num_tokens);
  const std::uint64_t int_bytes = 3 * align_up(4 * p, 16) + align_up(4 * (n + 1), 16) + 16 + 16 +
                                  align_up(4 * (rows + 1), 16) + align_up(p, 16) + 256;
  const std::uint64_t heads_tiles = static_cast<std::uint64_t>(d.q_heads) * p * grid.cta_tile_q;
  const std::uint64_t float_bytes =
      align_up(heads_tiles * static_cast<std::uint64_t>(d.v_head_dim) * 4, 16) + align_up(heads_tiles * 4, 16) + 256;
  return make_layout(d, int_bytes, float_bytes);
}

// One built (dtype, head dim, softcap) of the prefill.
template <class Built>
struct Prefill {
  using DType = typename Built::DTypeQ;  // query, KV and output (dispatch_built<false>)
  static constexpr std::uint32_t kHeadDim = Built::kHeadDim;
  // Sliding window always compiled in (window_left -1 keeps every key).
  using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/true, Built::kSoftcap,
                                               /*alibi=*/false>;
  using Params = flashinfer::BatchPrefillPagedParams<DType, DType, DType, std::int32_t>;

  template <std::uint32_t kCtaTileQ, flashinfer::MaskMode kMask>
  static cudaError_t run_tile(const Params& p, DType* tmp_v, float* tmp_s, cudaStream_t s) {
    return flashinfer::BatchPrefillWithPagedKVCacheDispatched<kCtaTileQ, kHeadDim, kHeadDim, kPosEncoding,
                                                              /*USE_FP16_QK_REDUCTION=*/false, kMask, Variant>(
        p, tmp_v, tmp_s, /*enable_pdl=*/false, s);
  }

  template <flashinfer::MaskMode kMask>
  static cudaError_t run_mask(std::int64_t cta_tile_q, const Params& p, DType* tmp_v, float* tmp_s, cudaStream_t s) {
    switch (cta_tile_q) {
      case 16: return run_tile<16, kMask>(p, tmp_v, tmp_s, s);
      case 64: return run_tile<64, kMask>(p, tmp_v, tmp_s, s);
      case 128: return run_tile<128, kMask>(p, tmp_v, tmp_s, s);
      default: return cudaErrorInvalidValue;
    }
  }

  static cudaError_t run(const pagecheck_case_desc& d, const pagecheck_buffers& b, const Layout& l,
                         const flashinfer::PrefillPlanInfo& info, void* workspace, cudaStream_t s) {
    auto* bytes = static_cast<unsigned char*>(workspace);
    std::int64_t strides[3];
    kv_strides(d, strides);
    flashinfer::paged_kv_t<DType, std::int32_t> paged_kv(
        static_cast<std::uint32_t>(d.kv_heads), static_cast<std::uint32_t>(d.block_size), kHeadDim,
        static_cast<std::uint32_t>(d.num_seqs),
        d.kv_layout == PAGECHECK_LAYOUT_HND ? flashinfer::QKVLayout::kHND : flashinfer::QKVLayout::kNHD,
        static_cast<DType*>(const_cast<void*>(b.key_cache)), static_cast<DType*>(const_cast<void*>(b.value_cache)),
        strides, reinterpret_cast<std::int32_t*>(bytes + l.indices),
        reinterpret_cast<std::int32_t*>(bytes + l.kv_indptr), reinterpret_cast<std::int32_t*>(bytes + l.last_page_len));

    Params p;
    p.q = static_cast<DType*>(const_cast<void*>(b.query));
    p.paged_kv = paged_kv;
    // pagecheck's query offsets are FlashInfer's qo_indptr (int32, on the device).
    p.q_indptr = const_cast<std::int32_t*>(b.query_start_loc);
    p.o = static_cast<DType*>(b.output);
    p.lse = b.lse;
    p.group_size = flashinfer::uint_fastdiv(static_cast<std::uint32_t>(d.q_heads / d.kv_heads));
    p.num_qo_heads = static_cast<std::uint32_t>(d.q_heads);
    p.q_stride_n = static_cast<std::int32_t>(d.query_stride_token);
    p.q_stride_h = static_cast<std::int32_t>(d.query_stride_head);
    p.window_left = window_left(d);
    p.logits_soft_cap = d.softcap;
    p.sm_scale = d.scale * d.k_scale;
    p.rope_rcp_scale = 1.0f;
    p.rope_rcp_theta = 1.0f;
    p.request_indices = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.request_indices_offset);
    p.qo_tile_indices = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.qo_tile_indices_offset);
    p.kv_tile_indices = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.kv_tile_indices_offset);
    p.o_indptr = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.o_indptr_offset);
    p.kv_chunk_size_ptr = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.kv_chunk_size_ptr_offset);
    DType* tmp_v = nullptr;
    float* tmp_s = nullptr;
    if (info.split_kv) {
      p.merge_indptr = flashinfer::GetPtrFromBaseOffset<std::int32_t>(bytes, info.merge_indptr_offset);
      tmp_v = flashinfer::GetPtrFromBaseOffset<DType>(bytes + l.float_offset, info.v_offset);
      tmp_s = flashinfer::GetPtrFromBaseOffset<float>(bytes + l.float_offset, info.s_offset);
      p.block_valid_mask = flashinfer::GetPtrFromBaseOffset<bool>(bytes, info.block_valid_mask_offset);
    }
    p.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
    p.max_total_num_rows = static_cast<std::uint32_t>(info.total_num_rows);
    p.total_num_rows = flashinfer::GetPtrFromBaseOffset<std::uint32_t>(bytes, info.total_num_rows_offset);
    return d.causal ? run_mask<flashinfer::MaskMode::kCausal>(info.cta_tile_q, p, tmp_v, tmp_s, s)
                    : run_mask<flashinfer::MaskMode::kNone>(info.cta_tile_q, p, tmp_v, tmp_s, s);
  }
};

// The prefill family for Entry (common.cuh).
struct PrefillFamily {
  static constexpr const char* kName = "flashinfer_prefill";
  static constexpr const char* kPlanner = "FlashInfer PrefillPlan";
  static constexpr const char* kKernel = "FlashInfer BatchPrefillWithPagedKVCacheDispatched";
  // FlashInfer's plan info, kept from plan to launch (CUDA-graph mode: what
  // launch uses of it depends only on the description).
  static inline flashinfer::PrefillPlanInfo plan_info;
  static inline Grid planned_grid;

  static bool supports(const pagecheck_case_desc& d, char* reason, std::size_t size) {
    if (d.kv_dtype == d.query_dtype) return true;
    std::snprintf(reason, size, "%s: built with one dtype for query and KV; the case mixes them", kName);
    return false;
  }

  static cudaError_t layout(const pagecheck_case_desc& d, Layout& l) {
    const cudaError_t err = prefill_grid(d, planned_grid);
    l = prefill_layout(d, planned_grid);
    return err;
  }

  static cudaError_t plan(const pagecheck_case_desc& d, const Layout& l, PagePlan& pages, void* workspace,
                          void* staging, cudaStream_t s) {
    auto* bytes = static_cast<unsigned char*>(workspace);
    const cudaError_t err = flashinfer::PrefillPlan<std::int32_t>(
        bytes + l.float_offset, l.float_bytes, bytes, staging, l.int_bytes, plan_info, pages.qo_indptr.data(),
        pages.kv_indptr.data(), static_cast<std::uint32_t>(d.num_tokens), static_cast<std::uint32_t>(d.num_seqs),
        static_cast<std::uint32_t>(d.q_heads), static_cast<std::uint32_t>(d.kv_heads),
        static_cast<std::uint32_t>(d.head_dim), static_cast<std::uint32_t>(d.v_head_dim),
        static_cast<std::uint32_t>(d.block_size), /*enable_cuda_graph=*/true, /*sizeof_dtype_o=*/2, window_left(d),
        /*fixed_split_size=*/-1, /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, s);
    if (err != cudaSuccess) return err;
    // The workspace was sized by prefill_grid's copy of PrefillPlan's rules.
    if (static_cast<std::uint32_t>(plan_info.cta_tile_q) != planned_grid.cta_tile_q ||
        static_cast<std::uint64_t>(plan_info.padded_batch_size) != planned_grid.padded_batch)
      throw std::runtime_error("PrefillPlan chose query tile " + std::to_string(plan_info.cta_tile_q) +
                               " and padded batch " + std::to_string(plan_info.padded_batch_size) +
                               ", the adapter sized the workspace for " + std::to_string(planned_grid.cta_tile_q) +
                               " and " + std::to_string(planned_grid.padded_batch));
    return cudaSuccess;
  }

  static cudaError_t run(const pagecheck_case_desc& d, const pagecheck_buffers& b, const Layout& l, void* workspace,
                         cudaStream_t s) {
    return dispatch_built<false>(
        d, [&](auto built) { return Prefill<decltype(built)>::run(d, b, l, plan_info, workspace, s); });
  }
};

}  // namespace

pagecheck_kernel_entry prefill_entry() {
  return Entry<PrefillFamily>::make(
      "FlashInfer 0.6 FA2 batch prefill over pages (tensor cores), split-KV + merge, CUDA-graph plan",
      PAGECHECK_FEATURE_DECODE | PAGECHECK_FEATURE_PREFILL | PAGECHECK_FEATURE_WINDOW | PAGECHECK_FEATURE_SOFTCAP |
          PAGECHECK_FEATURE_KV_SCALES | PAGECHECK_FEATURE_NON_CAUSAL);
}

}  // namespace fi_adapter
