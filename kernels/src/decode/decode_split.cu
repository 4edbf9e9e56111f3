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
// - Merge kernel: one CTA per (sequence, query head): the global max over the
//   partitions, then each partition weighted by sum * 2^(max_p - max) (the
//   online-softmax merge in closed form). It reads only the partitions the
//   current seq_len makes active. Empty states carry weight 0, never NaN.
// - Attention sinks (issue 23): the partitions leave the sink out; the merge
//   adds it once, 2^(sink * log2 e - max) in the denominator, with the max
//   taken over the partitions and the sink (nothing overflows), and the LSE
//   it writes includes it, as the reference's does. ALiBi needs nothing of
//   the merge: each partition biases its keys by their absolute position.
// - Auto: the partition kernel's kAuto instantiation over the whole batch: a
//   sequence of seq_len <= threshold is attended whole by its partition-0 CTA
//   (the direct path's code, output written in place), the rest are split;
//   the merge kernel then takes seq_len > threshold. So auto costs what
//   split costs with the same plan: the earlier design launched the direct
//   kernel over the whole batch first, whose CTAs all returned at once for a
//   batch of long sequences, about 3 us (+5.1% at 1 x 32768 on 2026-12-02).
//
// Performance notes. H200, same bench as decode_direct.cu (32 q / 8 kv heads,
// d128, BF16, block 16, shuffled pages, L2 flushed, median of 30; copy
// 4249 GB/s):
//   shape       split:256   split:512   split:1024   direct    (us; K/V GB/s)
//   1 x 32768     60.2        54.4        53.7        880.3    split:1024 = 2501 GB/s
//   8 x 8192      99.4        92.5        87.7        232.9    split:1024 = 3060 GB/s
//   64 x 4096    350.2       316.9       307.0        279.0    direct wins
//   256 x 1024   409.0       374.9       364.9        287.5    direct wins
// (split numbers at 64 x 4096 and 256 x 1024 are from the merge with 4
// groups for every capacity; merge_groups() now picks 1-2 groups for fewer
// than 16 partitions: 0.307 ms at 64 x 4096 and 0.318 ms at 256 x 1024,
// see kCapacityMergeGroups below.)
// Graph replay times equal the eager ones within 0.5 us.
// Tried on 2026-12-03 (decode probe, H200, one call each; docs/performance.md):
// - a fused merge (the last partition CTA of each (sequence, kv head, head
//   tile) merges, counted in by an atomic arrival counter): 1 x 32768
//   split:1024 64.4 us against 59.0 us with this merge kernel in the same
//   binary; one CTA folding 32 partitions serially is a longer tail than the
//   merge kernel's 32 CTAs behind PDL. Backed out.
// - deeper pipelines / fewer CTAs per SM (stages 4 at 3 CTAs/SM, stages 6 or
//   16 loads per stage at 2/SM, 8 warps at 2/SM): split:1024 at 1 x 32768
//   65-69 us against 65 us, 64 x 4096 direct 3.34-3.81 against 3.85 TB/s.
// - block-table reads one iteration ahead of the cp.async issue: direct
//   -9% at 1 x 32768 and 8 x 8192 (the shapes it loses anyway), +3% at
//   64 x 4096; split within 1%. Not kept.
// Tuning decisions:
// - Partition 1024 is the best of 256/512/1024 at every shape measured;
//   partition kernel alone (ncu, 1 x 32768, partition 512): 43.8 us = 3.1 TB/s,
//   the rest is launch latency and the merge.
// - Merge: the first version (one warp loop per partition, online merge with
//   a dependent chain) cost about 9 us at 1 x 32768 (58.2 us total at
//   partition 512); the closed-form merge with prefetched partials and PDL
//   brings the total to 54.4 us.
#include <algorithm>
#include <string>

#include "decode/decode_mma.cuh"
#include "common/launchers.cuh"

namespace pagecheck::gpu {
namespace decode {

// Per-CTA start and end times (%globaltimer, ns) of the partition and merge
// kernels, for kernel work only: scripts/build_decode_probe.sh
// -DPC_DECODE_TRACE=1 -DPC_DECODE_SWEEP_ONLY, then `decode_probe trace SEQS
// CTX PARTITION FILE` (docs/performance.md, session 7).
#if PC_DECODE_TRACE
__device__ unsigned long long g_partition_trace[65536 * 4];
__device__ unsigned long long g_merge_trace[8192 * 4];
__device__ __forceinline__ unsigned long long trace_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned long long trace_sm() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
#endif

namespace {

std::int64_t partitions_for(const DeviceCaseView& view, std::int64_t partition_tokens) {
  const std::int64_t n = (static_cast<std::int64_t>(view.max_seq_len) + partition_tokens - 1) / partition_tokens;
  return std::max<std::int64_t>(n, 1);
}

// kAuto: the auto plan's kernel (filter Auto): a sequence of seq_len <=
// threshold is attended whole by its partition-0 CTA, which writes the final
// output as the direct kernel does; the other CTAs of that sequence return.
// A separate instantiation, so the split path's kernel holds one copy of the
// attention loop.
// kTma (where DecodeParams::tma is set: auto, and split under
// PC_DECODE_TC_TMA_SPLIT): whole sequences (and under that knob partitions)
// may take tensor copies (attend's kAllowTma); a separate instantiation,
// for the same reason.
template <class T, bool kAuto, bool kTma = false>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    decode_partition_kernel(const __grid_constant__ DecodeParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int per_seq = p.kv.kv_heads * p.head_tiles;
  const std::int64_t seq = blockIdx.x / per_seq;
  const int kv_head = (blockIdx.x % per_seq) / p.head_tiles;
  const int tile = blockIdx.x % p.head_tiles;
  const std::int64_t partition = blockIdx.y;
#if PC_DECODE_TRACE
  const unsigned long long trace_start = trace_now();
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The merge kernel may start once every partition CTA has started; its
  // griddepcontrol.wait still waits for this grid to finish and flush.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const std::int32_t seq_len = p.kv.seq_lens[seq];
  // kAuto: a sequence of seq_len <= threshold is attended whole by its
  // partition-0 CTA. One call of attend() for both kinds of CTA: with a call
  // on each branch the kernel held two copies of the attention loop (auto
  // ran 1-3% behind split at 1 x 32768 with the same plan, session 10).
  bool whole = false;
  if constexpr (kAuto) whole = seq_len <= p.threshold_tokens;
  if (whole && partition != 0) return;
  const KeyRange keys = key_range(p, seq_len, partition, whole);

  // kAuto: a whole sequence's range may take tensor copies, as the direct
  // kernel's (DecodeParams::tma, set for auto launches); partitions keep
  // cp.async (decode_probe roof_paged: tensor copies read 1 x 32768 5%
  // slower, session 20).
  const float* merged =
      attend<T, kTma>(p, seq, kv_head, tile, keys.begin, keys.end, smem, whole || PC_DECODE_TC_TMA_SPLIT);
  if (whole) {
    store_final<T>(p, merged, seq, kv_head, tile);
    return;
  }

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
#if PC_DECODE_TRACE
  const unsigned idx = blockIdx.y * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0 && idx < 65536) {
    g_partition_trace[idx * 4 + 0] = (static_cast<unsigned long long>(blockIdx.y) << 32) | blockIdx.x;
    g_partition_trace[idx * 4 + 1] = trace_sm();
    g_partition_trace[idx * 4 + 2] = trace_start;
    g_partition_trace[idx * 4 + 3] = trace_now();
  }
#endif
}

// Merge: `groups` groups of DV threads (thread = one output dim); group g
// folds partitions g, g + groups, ... One block-wide merge of the
// (max, sum) statistics gives the global max and the total weight, so the
// output pass has no loop-carried dependency; its first 8 partitions are
// loaded before that reduction. Tuning: the first version (4 warps, online merge,
// a dependent chain per partition) took about 10 us of the 58 us at
// 1 x 32768 (partition 512).
constexpr int kMaxMergeGroups = 4;
// Groups per merge CTA: 1 below 8 partitions, 2 below 16, else 4, so a merge
// of few partitions leaves fewer threads idle (false: 4 groups always). H200
// device check of 2026-12-02 (docs/performance.md): the suite, presets and
// recorded cases pass through direct/split/auto, and split at the default
// partition 512 went from 0.395 to 0.318 ms at 256 x 1024 (2 partitions) and
// from 0.323 to 0.307 ms at 64 x 4096 (8); 8 x 8192 and 1 x 32768 unchanged.
// The launch sizes the CTA for the workspace's capacity (the batch's longest
// sequence); each CTA merges with the groups of its own sequence's partition
// count, so that the order of a sequence's sums, and so its output bits, do
// not follow the batch (soak seed 1, cases 216 and 465: a sequence of 3
// partitions beside one of 8 merged in 2 groups differed in the last bit
// from the same sequence alone under an explicit plan).
constexpr bool kCapacityMergeGroups = true;
__host__ __device__ inline int merge_groups(std::int64_t partitions) {
  if (!kCapacityMergeGroups) return kMaxMergeGroups;
  return partitions >= 16 ? 4 : partitions >= 8 ? 2 : 1;
}

// A group of merge_threads(DV) threads takes one output row: thread d of a
// group dim d; head dims that are not a multiple of 32 (issue 23's 80, 112,
// 120) round the group up to whole warps, whose last threads reduce the
// statistics but load and store no dim.
constexpr int merge_threads(int dv) { return (dv + 31) / 32 * 32; }
// Groups a merge CTA may hold: 4, fewer where 4 rows pass 1024 threads
// (a latent cache's 512-column V: 2).
constexpr int merge_max_groups(int dv) {
  return kMaxMergeGroups * merge_threads(dv) <= 1024 ? kMaxMergeGroups : 1024 / merge_threads(dv);
}

template <int DV>
__global__ void __launch_bounds__(merge_max_groups(DV) * merge_threads(DV))
    decode_merge_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kGroupThreads = merge_threads(DV);
  constexpr int kMaxWarps = merge_max_groups(DV) * kGroupThreads / 32;
  __shared__ float reduce_m[kMaxWarps], reduce_l[kMaxWarps];
  __shared__ float group_acc[merge_max_groups(DV)][DV];
  const std::int64_t seq = blockIdx.x / p.q_heads;
  const int q_head = blockIdx.x % p.q_heads;
  const std::int32_t seq_len = p.kv.seq_lens[seq];
  if (!seq_selected(p, seq_len)) return;
  const std::int64_t row = p.query_start_loc[seq];
#if PC_DECODE_TRACE
  const unsigned long long trace_start = trace_now();
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");  // launched early (PDL): wait for the partitions
#endif
#if PC_DECODE_TRACE
  const unsigned long long trace_waited = trace_now();
#endif
  const int tid = threadIdx.x;
  const int active = static_cast<int>((static_cast<std::int64_t>(seq_len) + p.partition_tokens - 1) /
                                      p.partition_tokens);
  // This sequence's groups (merge_groups of its own partitions, never more
  // than the CTA holds): the threads past them stay for the barriers only.
  const int groups = min(merge_groups(active), static_cast<int>(blockDim.x / kGroupThreads));
  const int threads = groups * kGroupThreads;
  const int warps = threads / 32;
  const bool in_group = tid < threads;  // takes part in the statistics
  const std::int64_t first_slot = (seq * p.q_heads + q_head) * p.max_partitions;
  const float* pmax = p.partial_max + first_slot;
  const float* psum = p.partial_sum + first_slot;
  const int group = tid / kGroupThreads;
  const int d = tid % kGroupThreads;
  const bool working = in_group && d < DV;  // also owns an output dim
  const float* out = p.partial_out + first_slot * DV + (d < DV ? d : 0);

  // The first kChunk partitions of this thread's group are loaded before the
  // statistics are reduced, so their latency overlaps the reduction.
  constexpr int kChunk = DV >= 256 ? 4 : 8;  // 8 spills at 1024 threads (64 registers)
  float o[kChunk], pm[kChunk], ps[kChunk];
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    const int part = group + j * groups;
    const bool in = working && part < active;
    o[j] = in ? out[static_cast<std::int64_t>(part) * DV] : 0.0f;
    pm[j] = in ? pmax[part] : -INFINITY;
    ps[j] = in ? psum[part] : 0.0f;
  }

  // (max, sum) over all active partitions: per thread, then one block-wide
  // merge of (m, l) pairs.
  float m = -INFINITY, l = 0.0f;
  for (int part = in_group ? tid : active; part < active; part += threads) {
    const MergeWeights w = merge_weights(m, pmax[part]);
    l = l * w.w_self + psum[part] * w.w_other;
    m = w.m;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m_other = __shfl_xor_sync(kFullMask, m, offset);
    const float l_other = __shfl_xor_sync(kFullMask, l, offset);
    const MergeWeights w = merge_weights(m, m_other);
    l = l * w.w_self + l_other * w.w_other;
    m = w.m;
  }
  if (in_group && tid % 32 == 0) {
    reduce_m[tid / 32] = m;
    reduce_l[tid / 32] = l;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int w = 0; w < warps; ++w) mx = fmaxf(mx, reduce_m[w]);
  const bool has_sink = p.sinks != nullptr;
  const float sink2 = sink_logit2(p, q_head);
  if (has_sink) mx = fmaxf(mx, sink2);
  const float m_use = mx == -INFINITY ? 0.0f : mx;  // every weight is 0 then
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += reduce_l[w] * fast_exp2(reduce_m[w] - m_use);
  if (has_sink) total += fast_exp2(sink2 - m_use);  // once, not per partition

  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kChunk; ++j) acc += ps[j] * fast_exp2(pm[j] - m_use) * o[j];
#pragma unroll 8
  for (int part = working ? group + kChunk * groups : active; part < active; part += groups)
    acc += psum[part] * fast_exp2(pmax[part] - m_use) * out[static_cast<std::int64_t>(part) * DV];
  if (working) group_acc[group][d] = acc;
  __syncthreads();
  if (group == 0 && d < DV) {
    for (int g = 1; g < groups; ++g) acc += group_acc[g][d];
    store_from_float(p.output_dtype, p.output, (row * p.q_heads + q_head) * DV + d, state_normalize(acc, total));
    if (d == 0 && p.lse != nullptr) p.lse[row * p.q_heads + q_head] = state_lse(mx, total);
  }
#if PC_DECODE_TRACE
  if (threadIdx.x == 0 && blockIdx.x < 8192) {
    g_merge_trace[blockIdx.x * 4 + 0] = trace_sm();
    g_merge_trace[blockIdx.x * 4 + 1] = trace_start;
    g_merge_trace[blockIdx.x * 4 + 2] = trace_waited;
    g_merge_trace[blockIdx.x * 4 + 3] = trace_now();
  }
#endif
}

// PC_DECODE_WARP_MERGE (an experiment, session 10; off by default): one warp
// per (sequence, query head), lane l holding output dims [l * DV / 32,
// (l + 1) * DV / 32), four warps a CTA. After griddepcontrol.wait no
// barrier and no shared memory: the partitions' maxima and sums (one a
// lane) and the output rows are loaded at once, the global max and the
// total weight are two 5-step shuffle reductions, and each partition's
// weight reaches the lanes by one shuffle. The block merge above waits on
// two __syncthreads and a serial loop over 16 warps' statistics; the
// session-7 stamps put its work after the wait at 2.4 us of the 65 at
// 1 x 32768. Prediction: ~1 us of that.
#ifndef PC_DECODE_WARP_MERGE
#define PC_DECODE_WARP_MERGE 0
#endif
constexpr int kWarpMergeWarps = 4;

template <int DV>
__global__ void __launch_bounds__(kWarpMergeWarps * 32) decode_merge_warp_kernel(const __grid_constant__ DecodeParams p) {
  static_assert(DV % 32 == 0, "a lane takes DV / 32 output dims");
  constexpr int kDims = DV / 32;
  const int lane = threadIdx.x % 32;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarpMergeWarps + threadIdx.x / 32;
  if (item >= static_cast<std::int64_t>(p.kv.num_seqs) * p.q_heads) return;
  const std::int64_t seq = item / p.q_heads;
  const int q_head = static_cast<int>(item % p.q_heads);
  const std::int32_t seq_len = p.kv.seq_lens[seq];
  if (!seq_selected(p, seq_len)) return;
  const std::int64_t row = p.query_start_loc[seq];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");  // launched early (PDL): wait for the partitions
#endif
  const int active = static_cast<int>((static_cast<std::int64_t>(seq_len) + p.partition_tokens - 1) /
                                      p.partition_tokens);
  const std::int64_t first_slot = (seq * p.q_heads + q_head) * p.max_partitions;
  const float* pmax = p.partial_max + first_slot;
  const float* psum = p.partial_sum + first_slot;
  const float* out = p.partial_out + first_slot * DV + lane * kDims;

  // Loaded at once, before any reduction: the first 32 partitions' maximum
  // and sum (one a lane) and the first kAhead partitions' output rows.
  constexpr int kAhead = 128 / kDims < 32 ? 128 / kDims : 32;  // 128 registers of rows at most
  auto row_add = [&](float (&acc)[kDims], float w, const float* src) {
    if constexpr (kDims % 4 == 0) {  // 16-byte loads: a partition's row starts 128-byte aligned
#pragma unroll
      for (int i = 0; i < kDims; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(src + i);
        acc[i] += w * v.x;
        acc[i + 1] += w * v.y;
        acc[i + 2] += w * v.z;
        acc[i + 3] += w * v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[i] += w * src[i];
    }
  };
  const float pm0 = lane < active ? pmax[lane] : -INFINITY;
  const float ps0 = lane < active ? psum[lane] : 0.0f;
  float ahead[kAhead][kDims];
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
#pragma unroll
    for (int i = 0; i < kDims; ++i) ahead[j][i] = 0.0f;
    if (j < active) row_add(ahead[j], 1.0f, out + static_cast<std::int64_t>(j) * DV);
  }

  // The global max (over the partitions and the sink).
  float mx = pm0;
  for (int part = 32 + lane; part < active; part += 32) mx = fmaxf(mx, pmax[part]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, offset));
  const float sink2 = sink_logit2(p, q_head);
  if (p.sinks != nullptr) mx = fmaxf(mx, sink2);
  const float m_use = mx == -INFINITY ? 0.0f : mx;  // every weight is 0 then

  float acc[kDims];
#pragma unroll
  for (int i = 0; i < kDims; ++i) acc[i] = 0.0f;
  float w = lane < active ? ps0 * fast_exp2(pm0 - m_use) : 0.0f;
  float total = w;
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    const float wj = __shfl_sync(kFullMask, w, j);  // 0 past the active partitions
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[i] += wj * ahead[j][i];
  }
  for (int base = 0; base < active; base += 32) {
    if (base > 0) {
      const int part = base + lane;
      w = part < active ? psum[part] * fast_exp2(pmax[part] - m_use) : 0.0f;
      total += w;
    }
    const int count = min(32, active - base);
#pragma unroll 4
    for (int j = base == 0 ? kAhead : 0; j < count; ++j)
      row_add(acc, __shfl_sync(kFullMask, w, j), out + static_cast<std::int64_t>(base + j) * DV);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(kFullMask, total, offset);
  if (p.sinks != nullptr) total += fast_exp2(sink2 - m_use);  // once, not per partition
#pragma unroll
  for (int i = 0; i < kDims; ++i)
    store_from_float(p.output_dtype, p.output, (row * p.q_heads + q_head) * DV + lane * kDims + i,
                     state_normalize(acc[i], total));
  if (lane == 0 && p.lse != nullptr) p.lse[row * p.q_heads + q_head] = state_lse(mx, total);
}

// The merge of a split launch (after the partition kernel on `stream`):
// the split sequences only (under auto, those longer than the threshold;
// the others already hold their output), launched early by programmatic
// dependent launch (sm_90+) so that its launch overlaps the partitions' tail;
// it waits in griddepcontrol.wait.
template <int DV>
Status launch_merge(DecodeParams p, std::int64_t max_partitions, std::int64_t merge_ctas, cudaStream_t stream) {
  if (p.filter == SeqFilter::Auto) p.filter = SeqFilter::LongerThanThreshold;
  int device = 0, major = 0;
  CUDA_TRY(cudaGetDevice(&device));
  CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(merge_ctas));
  config.blockDim = dim3(std::min(merge_groups(max_partitions), merge_max_groups(DV)) * merge_threads(DV));
  auto merge_kernel = decode_merge_kernel<DV>;
  if constexpr (PC_DECODE_WARP_MERGE && DV % 32 == 0) {
    config.gridDim = dim3(static_cast<unsigned>((merge_ctas + kWarpMergeWarps - 1) / kWarpMergeWarps));
    config.blockDim = dim3(kWarpMergeWarps * 32);
    merge_kernel = decode_merge_warp_kernel<DV>;
  }
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  // Only where the merge kernel holds its griddepcontrol.wait: code built
  // from PTX below compute_90 (an sm_80-only build JIT-compiled on a
  // Hopper) lacks it and could read the partials before they are written.
  cudaFuncAttributes merge_attributes{};
  CUDA_TRY(cudaFuncGetAttributes(&merge_attributes, merge_kernel));
  config.numAttrs = major >= 9 && merge_attributes.ptxVersion >= 90 ? 1 : 0;
  CUDA_TRY(cudaLaunchKernelEx(&config, merge_kernel, p));
  return {};
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
  const bool auto_plan = filter == SeqFilter::Auto;
  // An auto launch whose capacity never exceeds the threshold has no split
  // sequence: one partition row (the whole-sequence CTAs) and no merge.
  const bool none_split = auto_plan && view.max_seq_len <= threshold_tokens;
  const std::int64_t rows = none_split ? 1 : partitions;
  const std::int64_t merge_ctas = view.kv.num_seqs * view.q_heads;
  const auto with_workspace = [&](DecodeParams& p) {
    p.partial_out = workspace.partial_out;
    p.partial_max = workspace.partial_max;
    p.partial_sum = workspace.partial_sum;
    p.max_partitions = workspace.max_partitions;
    p.partition_tokens = static_cast<std::int32_t>(partition_tokens);
  };
#ifdef PAGECHECK_HAVE_SM90A
  if (decode_uses_mla_sm90(view)) {  // latent caches on Hopper: decode_mla_sm90.cu
    auto params = make_decode_params(view, kMlaHeadTile, filter, threshold_tokens);
    if (!params.ok()) return params.error();
    DecodeParams& p = *params;
    with_workspace(p);
    const std::int64_t ctas = decode_direct_ctas(view.kv.num_seqs, view.kv.kv_heads, p.head_tiles);
    if (ctas == 0) return {};
    if (merge_ctas > 0x7fffffff) return invalid_input("too many (sequence, head) pairs for one launch", "split");
    PC_TRY(launch_mla_sm90(p, auto_plan ? MlaLaunch::Auto : MlaLaunch::Split, ctas, rows, stream));
    if (none_split) return {};
    return launch_merge<512>(p, workspace.max_partitions, merge_ctas, stream);
  }
#endif
  return dispatch_decode_loop(view, [&](auto traits) -> Status {
    using T = decltype(traits);
    auto params = make_decode_params(view, T::kHeadTile, filter, threshold_tokens);
    if (!params.ok()) return params.error();
    DecodeParams& p = *params;
    with_workspace(p);
    const std::int64_t ctas = decode_direct_ctas(view.kv.num_seqs, view.kv.kv_heads, p.head_tiles);
    if (ctas == 0) return {};
    if (ctas > 0x7fffffff || merge_ctas > 0x7fffffff)
      return invalid_input("too many (sequence, head) pairs for one launch", "split");
    if (auto_plan || PC_DECODE_TC_TMA_SPLIT) set_decode_tma<T>(view, p);
    auto kernel = auto_plan ? decode_partition_kernel<T, true> : decode_partition_kernel<T, false>;
    if constexpr (tma_capable<T>()) {
      if (p.tma != 0) {
        if (auto_plan)
          kernel = decode_partition_kernel<T, true, true>;
        else if constexpr (PC_DECODE_TC_TMA_SPLIT)
          kernel = decode_partition_kernel<T, false, true>;
      }
    }
    PC_TRY(allow_shared_memory(kernel, T::kSmemBytes));
    kernel<<<dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(rows)), T::kThreads, T::kSmemBytes, stream>>>(
        p);
    CUDA_TRY_LAUNCH();
    if (none_split) return {};
    return launch_merge<T::kVHeadDim>(p, workspace.max_partitions, merge_ctas, stream);
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
  return decode::launch_split_impl(view, workspace, partition_tokens, decode::SeqFilter::Auto, threshold_tokens,
                                   stream);
}

}  // namespace pagecheck::gpu

#if PC_DECODE_TRACE
#include <cstdio>
#include <vector>
// Clears the stamps (clear != 0) or writes them to `path`: "P partition cta
// sm start end" per partition CTA, "M cta sm start waited end" per merge CTA.
extern "C" void pc_decode_trace_dump(const char* path, int clear) {
  using namespace pagecheck::gpu::decode;
  void *partitions = nullptr, *merges = nullptr;
  if (cudaGetSymbolAddress(&partitions, g_partition_trace) != cudaSuccess ||
      cudaGetSymbolAddress(&merges, g_merge_trace) != cudaSuccess)
    return;
  if (clear) {
    (void)cudaMemset(partitions, 0, sizeof(g_partition_trace));
    (void)cudaMemset(merges, 0, sizeof(g_merge_trace));
    (void)cudaDeviceSynchronize();
    return;
  }
  std::vector<unsigned long long> h(65536 * 4), m(8192 * 4);
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(h.data(), partitions, h.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(m.data(), merges, m.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess)
    return;
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return;
  for (int i = 0; i < 65536; ++i)
    if (h[i * 4 + 2] != 0)
      std::fprintf(f, "P %llu %llu %llu %llu %llu\n", h[i * 4] >> 32, h[i * 4] & 0xffffffffull, h[i * 4 + 1],
                   h[i * 4 + 2], h[i * 4 + 3]);
  for (int i = 0; i < 8192; ++i)
    if (m[i * 4 + 1] != 0) std::fprintf(f, "M %d %llu %llu %llu %llu\n", i, m[i * 4], m[i * 4 + 1], m[i * 4 + 2], m[i * 4 + 3]);
  std::fclose(f);
}
#endif
