// fmha: the runtime module's FMHA path in two steps.
//   gather_kernel    copies each sequence's referenced pages into contiguous K
//                    and V (FmhaWorkspace layout, launchers.cuh): 16-byte
//                    copies, several loads in flight per thread.
//   attn_kernel<AttnTraits<128, 128, BF16, true>>  (prefill_common.cuh; on
//                    compute capability 9.0 attn_sm90.cu's wgmma kernel) the
//                    flash-attention kernel over the contiguous, variable-length
//                    sequences: the same tiles, online softmax and mma.sync as
//                    prefill, with the page lookups replaced by token offsets.
// Applies to BF16 K/V with head dim 128 for K and V; the query may be F32,
// F16 or BF16 (rounded to BF16 on load, like prefill).
//
// Notes (H200, see the report and docs/performance.md):
//   Same shapes and method as prefill.cu's notes (H200, 2026-12-02):
//                   gather                fmha kernel            gather + fmha
//     8 x 2048      0.040 ms  3.35 TB/s   1.125 ms  244.5 TF/s   1.164 ms  236.3 TF/s
//     1 x 8192      0.023 ms  2.94 TB/s   1.977 ms  278.1 TF/s   2.014 ms  273.0 TF/s
//     16 x 512      0.023 ms  2.92 TB/s   0.208 ms  165.5 TF/s   0.229 ms  150.3 TF/s
//     chunked 4x512/4608  0.044 ms 3.41 TB/s  0.548 ms 266.5 TF/s  0.591 ms 247.1 TF/s
//   Gather bytes = K and V read + written over the real lengths (device copy
//   ceiling ~4.3 TB/s); at 67 MB (1 x 8192, 16 x 512) launch and tail cost
//   ~3 us of the 23. The mma.sync kernel against the FMHA target of 300
//   TFLOP/s at 8 x 2048 (FA2 300, cuDNN 534): at 82% of FA2, 46% of cuDNN;
//   1 x 8192 88% / 46%; 16 x 512 96% / 56%.
//   On compute capability 9.0 launch_fmha runs attn_sm90.cu's wgmma kernel
//   instead (contiguous BF16): 8 x 2048 313 TFLOP/s, 1 x 8192 406, 16 x 512
//   175, chunked 379 (docs/performance.md); the mma.sync numbers above are
//   what every other device gets.
#include <cuda_runtime.h>

#include <string>

#include "common/cuda_check.cuh"
#include "common/launchers.cuh"
#include "prefill/prefill_common.cuh"
#ifdef PAGECHECK_HAVE_SM90A
#include "prefill/attn_sm90.cuh"
#endif

namespace pagecheck::gpu {
namespace {

constexpr int kDim = 128;
constexpr int kRowChunks = kDim * 2 / 16;  // 16-byte chunks of one BF16 row
constexpr int kGatherThreads = 256;
constexpr int kGatherUnroll = 4;  // chunks in flight per thread
using FmhaTraits = attn::AttnTraits<kDim, kDim, attn::KvKind::BF16, true>;

// grid.x covers ceil(max_seq_len * kv_heads * 16 / (256 * 4)) chunk groups,
// grid.y = num_seqs, grid.z = 2 (0: key, 1: value).
__global__ void __launch_bounds__(kGatherThreads) gather_kernel(const __grid_constant__ DeviceCaseView view,
                                                                 void* key_out, void* value_out,
                                                                 std::int64_t capacity_tokens) {
  const std::int64_t seq = blockIdx.y;
  const bool is_value = blockIdx.z == 1;
  const int kv_heads = view.kv.kv_heads;
  const std::int64_t chunks = static_cast<std::int64_t>(view.kv.seq_lens[seq]) * kv_heads * kRowChunks;
  const uint4* src_base = static_cast<const uint4*>(is_value ? view.kv.value_data : view.kv.key_data);
  uint4* dst_base = static_cast<uint4*>(is_value ? value_out : key_out) +
                    seq * capacity_tokens * kv_heads * kRowChunks;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kGatherThreads * kGatherUnroll + threadIdx.x;
  uint4 buf[kGatherUnroll];
#pragma unroll
  for (int u = 0; u < kGatherUnroll; ++u) {
    const std::int64_t c = first + u * kGatherThreads;
    if (c < chunks) {
      const std::int64_t row = c / kRowChunks;  // token * kv_heads + head
      const std::int64_t token = row / kv_heads;
      const int head = static_cast<int>(row % kv_heads);
      const std::int64_t offset = is_value ? view.kv.value_offset(seq, token, head) : view.kv.key_offset(seq, token, head);
      buf[u] = __ldcs(src_base + offset / 8 + c % kRowChunks);
    }
  }
#pragma unroll
  for (int u = 0; u < kGatherUnroll; ++u) {
    const std::int64_t c = first + u * kGatherThreads;
    if (c < chunks) dst_base[c] = buf[u];
  }
}

}  // namespace

Applicability fmha_applies(const Case& c) {
  if (c.key_cache.dtype != DType::BF16 || c.value_cache.dtype != DType::BF16)
    return {false, "fmha takes BF16 K/V only (like the runtime module); this case has " +
                       std::string(dtype_name(c.key_cache.dtype))};
  if (c.key_head_dim() != kDim || c.v_head_dim() != kDim)
    return {false, "fmha takes head dim 128 for K and V only (like the runtime module); this case has " +
                       std::to_string(c.key_head_dim()) + "/" + std::to_string(c.v_head_dim())};
  const DType q = c.query.dtype;
  if (q != DType::F32 && q != DType::F16 && q != DType::BF16)
    return {false, "query dtype " + std::string(dtype_name(q)) + " is not built; built: F32, F16, BF16 (rounded to BF16)"};
  if (c.kv_heads() <= 0 || c.q_heads() % c.kv_heads() != 0)
    return {false, "q_heads " + std::to_string(c.q_heads()) + " is not a multiple of kv_heads " +
                       std::to_string(c.kv_heads())};
  if (c.block_size() < 1 || c.block_size() > 256)
    return {false, "block_size " + std::to_string(c.block_size()) + " is outside 1..256"};
  // The gather's grid has one y-row per sequence (launch_gather refuses more).
  if (c.num_seqs() > 65535)
    return {false, "the gather takes at most 65535 sequences; this case has " + std::to_string(c.num_seqs())};
  return {};
}

std::size_t fmha_workspace_bytes_each(const DeviceCaseView& view) {
  return static_cast<std::size_t>(view.kv.num_seqs) * static_cast<std::size_t>(view.max_seq_len) *
         static_cast<std::size_t>(view.kv.kv_heads) * kDim * 2;
}

static Status check_fmha(const DeviceCaseView& view, const FmhaWorkspace& workspace) {
  if (view.kv_dtype != DType::BF16 || view.kv.head_dim != kDim || view.kv.v_head_dim != kDim)
    return invalid_input("fmha is built for BF16 K/V with head dim 128/128; got " +
                         std::string(dtype_name(view.kv_dtype)) + " " + std::to_string(view.kv.head_dim) + "/" +
                         std::to_string(view.kv.v_head_dim));
  if (workspace.key == nullptr || workspace.value == nullptr || workspace.capacity_tokens < view.max_seq_len)
    return invalid_input("fmha workspace is missing or holds fewer than max_seq_len = " +
                         std::to_string(view.max_seq_len) + " tokens per sequence");
  if ((reinterpret_cast<std::uintptr_t>(workspace.key) & 15u) != 0 ||
      (reinterpret_cast<std::uintptr_t>(workspace.value) & 15u) != 0)
    return invalid_input("fmha workspace buffers must be 16-byte aligned");
  return attn::check_common(view);
}

Status launch_gather(const DeviceCaseView& view, const FmhaWorkspace& workspace, cudaStream_t stream) {
  PC_TRY(check_fmha(view, workspace));
  const std::int64_t chunks = static_cast<std::int64_t>(view.max_seq_len) * view.kv.kv_heads * kRowChunks;
  const std::int64_t blocks_x = (chunks + kGatherThreads * kGatherUnroll - 1) / (kGatherThreads * kGatherUnroll);
  if (blocks_x == 0 || view.kv.num_seqs == 0) return {};
  if (blocks_x > INT_MAX || view.kv.num_seqs > 65535)
    return invalid_input("gather grid too large: " + std::to_string(blocks_x) + " x " +
                         std::to_string(view.kv.num_seqs) + " (num_seqs at most 65535)");
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(view.kv.num_seqs), 2);
  gather_kernel<<<grid, kGatherThreads, 0, stream>>>(view, workspace.key, workspace.value, workspace.capacity_tokens);
  CUDA_TRY_LAUNCH();
  return {};
}

const char* fmha_kernel_name(const DeviceCaseView& view) {
#ifdef PAGECHECK_HAVE_SM90A
  return attn::attn_kernel_name(view, true);
#else
  (void)view;
  return "mma.sync";
#endif
}

Status launch_fmha(const DeviceCaseView& view, const FmhaWorkspace& workspace, cudaStream_t stream) {
  PC_TRY(check_fmha(view, workspace));
  attn::AttnParams p = attn::make_params(view);
  p.contig_key = workspace.key;
  p.contig_value = workspace.value;
  p.contig_capacity = workspace.capacity_tokens;
#ifdef PAGECHECK_HAVE_SM90A
  // Hopper: the wgmma kernel (attn_sm90.cu).
  if (attn::sm90_supports(view, true) && attn::sm90_available()) return attn::launch_attn_sm90(p, true, stream);
#endif
  return attn::launch_attn<FmhaTraits>(p, stream);
}

}  // namespace pagecheck::gpu
