// Decode, split path (flash-decoding) and the auto path.
// - Partition kernel: grid (sequence x kv head x head tile, partition). CTA
//   (.., p) attends keys [p * P, (p + 1) * P) of its sequence, cut by the
//   context end and the sliding window, with the same per-CTA code as the
//   direct path (decode_common.cuh), and writes for each of its query heads:
//     partial_out[s][h][p][:] = the partition's output, NORMALISED (acc / l),
//                               times v_scale; 0 for an empty partition
//     partial_max[s][h][p]    = max logit in base 2 (logit * log2 e); -inf if empty
//     partial_sum[s][h][p]    = sum over the partition of 2^(logit2 - max); 0 if empty
//   Partitions past the context (p * P >= seq_len) and partitions the window
//   leaves empty write that empty state, so every slot below the capacity is
//   defined after a launch.
// - Merge kernel: one CTA per (sequence, query head); warps take partitions
//   round-robin and fold them with the online-softmax merge, then the warps
//   merge through shared memory. It reads only the partitions the current
//   seq_len makes active. Empty states carry weight 0, never NaN.
// - Auto: direct for seq_len <= threshold, split for the rest; both kernels
//   are launched over the whole batch and skip the other's sequences.
//
// Performance notes: see the measurement block at the end of this comment.
#include <algorithm>
#include <string>

#include "decode_common.cuh"
#include "launchers.cuh"

namespace pagecheck::gpu {
namespace decode {

namespace {

std::int64_t partitions_for(const DeviceCaseView& view, std::int64_t partition_tokens) {
  const std::int64_t n = (static_cast<std::int64_t>(view.max_seq_len) + partition_tokens - 1) / partition_tokens;
  return std::max<std::int64_t>(n, 1);
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    decode_partition_kernel(const __grid_constant__ DecodeParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int per_seq = p.kv.kv_heads * p.head_tiles;
  const std::int64_t seq = blockIdx.x / per_seq;
  const int kv_head = (blockIdx.x % per_seq) / p.head_tiles;
  const int tile = blockIdx.x % p.head_tiles;
  const std::int64_t partition = blockIdx.y;
  const std::int32_t seq_len = p.kv.seq_lens[seq];
  if (!seq_selected(p, seq_len)) return;

  const std::int64_t part_begin = partition * p.partition_tokens;
  const std::int64_t part_end = std::min<std::int64_t>(part_begin + p.partition_tokens, seq_len);
  const std::int32_t begin =
      static_cast<std::int32_t>(std::max<std::int64_t>(std::min<std::int64_t>(part_begin, seq_len),
                                                       window_begin(seq_len, p.window)));
  const std::int32_t end = static_cast<std::int32_t>(std::max<std::int64_t>(part_end, begin));

  const float* merged = attend_range<T>(p, seq, kv_head, tile, begin, end, smem);

  const int heads_here = min(T::kHeadTile, p.gqa - tile * T::kHeadTile);
  for (int e = threadIdx.x; e < heads_here * T::kVHeadDim; e += T::kThreads) {
    const int h = e / T::kVHeadDim;
    const int d = e % T::kVHeadDim;
    float m, l;
    const float o = combine_warps<T>(merged, h, d, m, l);
    const std::int64_t q_head = static_cast<std::int64_t>(kv_head) * p.gqa + tile * T::kHeadTile + h;
    const std::int64_t slot = (seq * p.q_heads + q_head) * p.max_partitions + partition;
    p.partial_out[slot * T::kVHeadDim + d] = o * p.v_scale;
    if (d == 0) {
      p.partial_max[slot] = m;
      p.partial_sum[slot] = l;
    }
  }
}

constexpr int kMergeWarps = 4;

// One CTA per (sequence, query head); lane holds DV / 32 contiguous dims.
template <int DV>
__global__ void __launch_bounds__(kMergeWarps * 32) decode_merge_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kDimsPerLane = DV / 32;
  static_assert(DV % 64 == 0, "merge kernel takes v head dims that are multiples of 64");
  __shared__ float rows[kMergeWarps][DV + 2];
  const std::int64_t seq = blockIdx.x / p.q_heads;
  const int q_head = blockIdx.x % p.q_heads;
  const std::int32_t seq_len = p.kv.seq_lens[seq];
  if (!seq_selected(p, seq_len)) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const std::int64_t active = (static_cast<std::int64_t>(seq_len) + p.partition_tokens - 1) / p.partition_tokens;
  const std::int64_t first_slot = (seq * p.q_heads + q_head) * p.max_partitions;

  float m = -INFINITY, l = 0.0f, acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;
#pragma unroll 2
  for (std::int64_t part = warp; part < active; part += kMergeWarps) {
    const std::int64_t slot = first_slot + part;
    const float pm = p.partial_max[slot];
    const float ps = p.partial_sum[slot];
    float o[kDimsPerLane];
    const float* src = p.partial_out + slot * DV + lane * kDimsPerLane;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; i += 2) {
      const float2 v = *reinterpret_cast<const float2*>(src + i);
      o[i] = v.x;
      o[i + 1] = v.y;
    }
    const MergeWeights w = merge_weights(m, pm);
    const float wo = ps * w.w_other;  // partial_out is normalised: weight by its sum
    l = l * w.w_self + wo;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[i] = acc[i] * w.w_self + o[i] * wo;
    m = w.m;
  }
  if (lane == 0) {
    rows[warp][0] = m;
    rows[warp][1] = l;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) rows[warp][2 + lane * kDimsPerLane + i] = acc[i];
  __syncthreads();

  const std::int64_t row = p.query_start_loc[seq];
  for (int d = threadIdx.x; d < DV; d += kMergeWarps * 32) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kMergeWarps; ++w) mx = fmaxf(mx, rows[w][0]);
    float lsum = 0.0f, a = 0.0f;
#pragma unroll
    for (int w = 0; w < kMergeWarps; ++w) {
      const float wt = mx == -INFINITY ? 0.0f : fast_exp2(rows[w][0] - mx);
      lsum += rows[w][1] * wt;
      a += rows[w][2 + d] * wt;
    }
    store_from_float(p.output_dtype, p.output, (row * p.q_heads + q_head) * DV + d, state_normalize(a, lsum));
    if (d == 0 && p.lse != nullptr) p.lse[row * p.q_heads + q_head] = state_lse(mx, lsum);
  }
}

Status launch_split_impl(const DeviceCaseView& view, const SplitWorkspace& workspace, std::int64_t partition_tokens,
                         SeqFilter filter, std::int64_t threshold_tokens, cudaStream_t stream) {
  if (partition_tokens < 1 || partition_tokens > (1 << 30))
    return invalid_input("partition_tokens " + std::to_string(partition_tokens) + " is out of range 1..2^30",
                         "split");
  const std::int64_t partitions = partitions_for(view, partition_tokens);
  if (workspace.max_partitions < partitions)
    return invalid_input("split workspace has " + std::to_string(workspace.max_partitions) +
                             " partitions but max_seq_len " + std::to_string(view.max_seq_len) + " at partition " +
                             std::to_string(partition_tokens) + " needs " + std::to_string(partitions),
                         "split");
  if (partitions > 65535)
    return invalid_input(std::to_string(partitions) + " partitions exceed the grid's 65535; use a larger partition",
                         "split");
  if (view.kv.num_seqs > 0 &&
      (workspace.partial_out == nullptr || workspace.partial_max == nullptr || workspace.partial_sum == nullptr))
    return invalid_input("split workspace pointer is null", "split");
  return dispatch_decode(view.kv_dtype, view.kv.head_dim, view.kv.v_head_dim, [&](auto traits) -> Status {
    using T = decltype(traits);
    auto params = make_decode_params(view, T::kHeadTile, filter, threshold_tokens);
    if (!params.ok()) return params.error();
    DecodeParams& p = *params;
    p.partial_out = workspace.partial_out;
    p.partial_max = workspace.partial_max;
    p.partial_sum = workspace.partial_sum;
    p.max_partitions = workspace.max_partitions;
    p.partition_tokens = static_cast<std::int32_t>(partition_tokens);
    const std::int64_t ctas = view.kv.num_seqs * view.kv.kv_heads * p.head_tiles;
    const std::int64_t merge_ctas = view.kv.num_seqs * view.q_heads;
    if (ctas == 0) return {};
    if (ctas > 0x7fffffff || merge_ctas > 0x7fffffff)
      return invalid_input("too many (sequence, head) pairs for one launch", "split");
    auto kernel = decode_partition_kernel<T>;
    PC_TRY(allow_shared_memory(kernel, T::kSmemBytes));
    kernel<<<dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(partitions)), T::kThreads, T::kSmemBytes,
             stream>>>(p);
    CUDA_TRY_LAUNCH();
    decode_merge_kernel<T::kVHeadDim><<<static_cast<unsigned>(merge_ctas), kMergeWarps * 32, 0, stream>>>(p);
    CUDA_TRY_LAUNCH();
    return {};
  });
}

}  // namespace

}  // namespace decode

std::size_t split_stat_floats(const DeviceCaseView& view, std::int64_t partition_tokens) {
  if (partition_tokens < 1) return 0;
  return static_cast<std::size_t>(view.kv.num_seqs * view.q_heads * decode::partitions_for(view, partition_tokens));
}

std::size_t split_partial_out_floats(const DeviceCaseView& view, std::int64_t partition_tokens) {
  return split_stat_floats(view, partition_tokens) * static_cast<std::size_t>(std::max(view.kv.v_head_dim, 0));
}

Status launch_split(const DeviceCaseView& view, const SplitWorkspace& workspace, std::int64_t partition_tokens,
                    cudaStream_t stream) {
  return decode::launch_split_impl(view, workspace, partition_tokens, decode::SeqFilter::All, 0, stream);
}

Status launch_auto(const DeviceCaseView& view, const SplitWorkspace& workspace, std::int64_t partition_tokens,
                   std::int64_t threshold_tokens, cudaStream_t stream) {
  PC_TRY(decode::launch_direct_impl(view, decode::SeqFilter::UpToThreshold, threshold_tokens, stream));
  return decode::launch_split_impl(view, workspace, partition_tokens, decode::SeqFilter::LongerThanThreshold,
                                   threshold_tokens, stream);
}

}  // namespace pagecheck::gpu
