// Device helpers shared by the decode paths (decode_direct.cu, decode_split.cu):
// dtype loads and conversions (fp8 E4M3/E5M2 with k/v scales), the online-
// softmax state and its merge, the per-CTA attention over a token range, the
// parameter struct and the one switch that turns (kv dtype, head dims) into
// compile-time constants.
//
// Work split inside one CTA (kWarps warps, one (sequence, kv head, head tile)):
// - A "token group" of kThreadsPerToken lanes reads one token's K and V head
//   slices: lane r loads 16-byte vectors r, r + kThreadsPerToken, ... (8 bytes
//   for fp8), so a group's loads are contiguous and coalesced. A warp holds
//   32 / kThreadsPerToken groups; the CTA has kGroups of them.
// - Every group takes kTokensPerGroup tokens per iteration (a tile of
//   kTileTokens tokens per CTA iteration) and keeps its own online-softmax
//   state for kHeadTile query heads in registers; the heads of a GQA group
//   share every K/V load.
// - K/V go global -> shared memory through cp.async, kStages deep. Every
//   thread reads back only the slots it copied itself, so the pipeline needs
//   no barrier: cp.async.wait_group alone orders it.
// - Partial dot products are reduced across the group with a reduce-scatter
//   (each step halves the values a lane carries), the scores pass through a
//   small per-group shared buffer so every lane of the group sees all of them.
// - At the end the groups' states merge through shuffles (within a warp) and
//   shared memory (across warps).
// Logits are kept in base 2: q is pre-multiplied by scale * k_scale (and
// log2(e) when there is no softcap); v_scale multiplies the output.
// Issue 23's logit features:
// - ALiBi (DecodeAlibiTraits, a compile-time flag: the instantiations without
//   it have no per-key instruction more): after the scale and the softcap,
//   each score gains slope * log2(e) * (key - (seq_len - 1)), in the same
//   base-2 units. Only this CUDA-core loop takes it; decode_mma.cuh routes an
//   ALiBi case here.
// - Attention sinks (DecodeParams::sinks, a run-time pointer read in the
//   epilogues only, never in the loop): the final state of a query head
//   gains the sink as one more term of the denominator (add_sink()); split
//   partitions leave it out and the merge adds it once.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "common/cuda_check.cuh"
#include "common/device_case.cuh"
#include "pagecheck/dtype.hpp"
#include "pagecheck/fast_div.hpp"
#include "pagecheck/paged_kv.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu::decode {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr unsigned kFullMask = 0xffffffffu;

// Which sequences a launch takes. All: every one. Auto (the auto partition
// kernel): every one, and one of seq_len <= threshold is attended whole by
// its partition-0 CTA, which writes the final output, while the others are
// split. LongerThanThreshold: the merge after an Auto partition launch, which
// takes the split sequences only.
enum class SeqFilter : int { All = 0, LongerThanThreshold = 1, Auto = 2 };

// One flat parameter struct for every decode kernel.
struct DecodeParams {
  PagedKvView kv;                         // cache + table, device pointers
  const void* query = nullptr;            // [num_tokens, q_heads, head_dim], query_dtype
  const std::int32_t* query_start_loc = nullptr;  // [num_seqs + 1]; row of sequence s
  void* output = nullptr;                 // [num_tokens, q_heads, v_head_dim], output_dtype
  float* lse = nullptr;                   // [num_tokens, q_heads] natural log, may be null
  // Issue 23 (both from the case view; null: the case has none):
  const float* sinks = nullptr;           // [q_heads] sink logits, natural units; read by the epilogues
  const float* alibi_slopes = nullptr;    // [q_heads] ALiBi slopes; read only by kAlibi instantiations
  // split workspace (partition kernel writes, merge kernel reads):
  float* partial_out = nullptr;           // [num_seqs, q_heads, max_partitions, v_head_dim], normalised
  float* partial_max = nullptr;           // [num_seqs, q_heads, max_partitions], base-2 logit max
  float* partial_sum = nullptr;           // [num_seqs, q_heads, max_partitions], sum of 2^(logit - max)
  std::int64_t max_partitions = 0;
  std::int64_t window = 0;                // sliding window in keys, 0: none
  std::int64_t threshold_tokens = 0;      // SeqFilter boundary
  std::int32_t partition_tokens = 0;
  std::int32_t q_heads = 0;
  std::int32_t gqa = 0;                   // q_heads / kv_heads
  std::int32_t head_tiles = 0;            // ceil(gqa / kHeadTile)
  // Cache strides of PagedKvView in load vectors (kVec elements), 32-bit:
  // the launcher checks they fit; offsets themselves are 64-bit.
  std::int32_t k_block_vecs = 0, k_slot_vecs = 0, k_head_vecs = 0;
  std::int32_t v_block_vecs = 0, v_slot_vecs = 0, v_head_vecs = 0;
  std::uint32_t block_magic = 0;          // token / block_size by multiply-shift
  std::uint32_t block_shift = 0;
  float q_multiplier = 1.0f;              // scale * k_scale (* log2 e when no softcap)
  float softcap = 0.0f;                   // 0: none
  float inv_softcap = 0.0f;
  float v_scale = 1.0f;
  DType query_dtype = DType::BF16;
  DType output_dtype = DType::BF16;
  SeqFilter filter = SeqFilter::All;
  // K/V by tensor copies (decode_mma.cuh's loop, direct launches on compute
  // capability 9.0 with 16-bit caches and pages of 16n slots): kTmaOn, and
  // per pool whether a page holds its heads inside its slots (NHD: the
  // maps' order (dim, head, slot, block)) or its slots inside its heads
  // (HND: (dim, slot, head, block)). 0: cp.async, the maps unset.
  std::int32_t tma = 0;
  CUtensorMap k_map{};  // boxes of 64 dims x 16 slots x 1 head x 1 block
  CUtensorMap v_map{};
};
// DecodeParams::tma bits.
constexpr std::int32_t kTmaOn = 1, kTmaKeyHeadInner = 2, kTmaValueHeadInner = 4;

// ---- small device utilities ------------------------------------------------

// n / d for n < 2^31, d in [1, 2^31) by multiply-high and shift
// (pagecheck/fast_div.hpp).
// Query-head tiles of a KV head's group (DecodeParams::head_tiles) and the
// CTAs of a direct launch, one per (sequence, KV head, head tile): the
// planner's model of the grid (decode_direct_grid) and the launches count
// them the same way.
inline std::int32_t decode_head_tiles(std::int64_t gqa, int head_tile) {
  return static_cast<std::int32_t>((gqa + head_tile - 1) / head_tile);
}
inline std::int64_t decode_direct_ctas(std::int64_t num_seqs, std::int64_t kv_heads, std::int32_t head_tiles) {
  return num_seqs * kv_heads * head_tiles;
}

inline void make_fast_divisor(std::uint32_t d, std::uint32_t& magic, std::uint32_t& shift) {
  const FastDiv f = fast_divisor(d);
  magic = f.mul;
  shift = f.shift;
}
__device__ __forceinline__ std::uint32_t fast_divide(std::uint32_t n, std::uint32_t magic, std::uint32_t shift) {
  return fast_div(n, magic, shift);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ bool seq_selected(const DecodeParams& p, std::int32_t seq_len) {
  if (p.filter == SeqFilter::LongerThanThreshold) return seq_len > p.threshold_tokens;
  return true;
}

// First key a decode query (position seq_len - 1) sees under the window.
__device__ __forceinline__ std::int32_t window_begin(std::int32_t seq_len, std::int64_t window) {
  if (window <= 0) return 0;
  const std::int64_t b = static_cast<std::int64_t>(seq_len) - window;
  return b > 0 ? static_cast<std::int32_t>(b) : 0;
}

// The keys [begin, end) a decode CTA attends: the whole sequence under the
// window (`whole`: direct, and auto's short sequences), or partition
// `partition` of it cut by the context end and the window (split: an
// empty range past either, so that the CTA writes the empty state).
struct KeyRange {
  std::int32_t begin, end;
};
__device__ __forceinline__ KeyRange key_range(const DecodeParams& p, std::int32_t seq_len, std::int64_t partition,
                                              bool whole) {
  if (whole) return {window_begin(seq_len, p.window), seq_len};
  const std::int64_t part_begin = partition * p.partition_tokens;
  const std::int64_t part_end = part_begin + p.partition_tokens < seq_len ? part_begin + p.partition_tokens : seq_len;
  const std::int64_t clipped = part_begin < seq_len ? part_begin : seq_len;
  const std::int64_t wb = window_begin(seq_len, p.window);
  const std::int32_t begin = static_cast<std::int32_t>(clipped > wb ? clipped : wb);
  return {begin, static_cast<std::int32_t>(part_end > begin ? part_end : begin)};
}

__device__ __forceinline__ float load_as_float(DType dtype, const void* base, std::int64_t index) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(base)[index];
    case DType::F16: return __half2float(static_cast<const __half*>(base)[index]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    default: return __int_as_float(0x7fc00000);  // the launcher rejects other dtypes
  }
}

__device__ __forceinline__ void store_from_float(DType dtype, void* base, std::int64_t index, float value) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(base)[index] = value; break;
    case DType::F16: static_cast<__half*>(base)[index] = __float2half_rn(value); break;
    case DType::BF16: static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(value); break;
    default: break;
  }
}

// ---- K/V element types -----------------------------------------------------
// One load is kVec elements: 16 bytes for F32/F16/BF16, 8 bytes for fp8 (so
// every type gives 4 or 8 floats per load and the register tile stays small).
template <DType KV>
struct KvElem;
template <>
struct KvElem<DType::F32> {
  static constexpr int kVec = 4;
  using Raw = uint4;
};
template <>
struct KvElem<DType::F16> {
  static constexpr int kVec = 8;
  using Raw = uint4;
};
template <>
struct KvElem<DType::BF16> {
  static constexpr int kVec = 8;
  using Raw = uint4;
};
template <>
struct KvElem<DType::F8_E4M3> {
  static constexpr int kVec = 8;
  using Raw = uint2;
};
template <>
struct KvElem<DType::F8_E5M2> {
  static constexpr int kVec = 8;
  using Raw = uint2;
};

__device__ __forceinline__ void bf16x2_to_float(std::uint32_t bits, float& lo, float& hi) {
  lo = __uint_as_float(bits << 16);
  hi = __uint_as_float(bits & 0xffff0000u);
}
__device__ __forceinline__ void f16x2_to_float(std::uint32_t bits, float& lo, float& hi) {
  __half2 h = *reinterpret_cast<__half2*>(&bits);
  float2 f = __half22float2(h);
  lo = f.x;
  hi = f.y;
}
template <__nv_fp8_interpretation_t Kind>
__device__ __forceinline__ void fp8x4_to_float(std::uint32_t bits, float* out) {
  __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), Kind);
  __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits >> 16), Kind);
  float2 a = __half22float2(*reinterpret_cast<__half2*>(&lo));
  float2 b = __half22float2(*reinterpret_cast<__half2*>(&hi));
  out[0] = a.x;
  out[1] = a.y;
  out[2] = b.x;
  out[3] = b.y;
}

// Widens one loaded vector to floats (stored values; k/v scales are applied
// elsewhere).
template <DType KV>
__device__ __forceinline__ void widen(const typename KvElem<KV>::Raw& raw, float (&out)[KvElem<KV>::kVec]) {
  if constexpr (KV == DType::F32) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  } else if constexpr (KV == DType::BF16) {
    bf16x2_to_float(raw.x, out[0], out[1]);
    bf16x2_to_float(raw.y, out[2], out[3]);
    bf16x2_to_float(raw.z, out[4], out[5]);
    bf16x2_to_float(raw.w, out[6], out[7]);
  } else if constexpr (KV == DType::F16) {
    f16x2_to_float(raw.x, out[0], out[1]);
    f16x2_to_float(raw.y, out[2], out[3]);
    f16x2_to_float(raw.z, out[4], out[5]);
    f16x2_to_float(raw.w, out[6], out[7]);
  } else if constexpr (KV == DType::F8_E4M3) {
    fp8x4_to_float<__NV_E4M3>(raw.x, out);
    fp8x4_to_float<__NV_E4M3>(raw.y, out + 4);
  } else {
    fp8x4_to_float<__NV_E5M2>(raw.x, out);
    fp8x4_to_float<__NV_E5M2>(raw.y, out + 4);
  }
}

// cp.async of one vector into shared memory; an invalid slot is zero-filled
// (src-size 0, nothing read), so masked tokens contribute 0 * 0.
template <int Bytes>
__device__ __forceinline__ void cp_async_vec(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_size = valid ? Bytes : 0;
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_size));
  } else {
    static_assert(Bytes == 8, "cp.async vectors are 8 or 16 bytes");
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_size));
  }
}
// cp_async_vec<16> with the destination already a shared-memory address.
__device__ __forceinline__ void cp_async_shared16(unsigned smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// ---- online softmax ----------------------------------------------------------
// A state is (m, l, acc): m the running max of base-2 logits, l the sum of
// 2^(logit - m), acc the sum of 2^(logit - m) * v. The empty state is
// (-inf, 0, 0). Merging computes weights for both sides; two empty states
// merge to an empty state (weights 0, never exp(-inf + inf) = NaN).
struct MergeWeights {
  float m, w_self, w_other;
};
__device__ __forceinline__ MergeWeights merge_weights(float m_self, float m_other) {
  const float m = fmaxf(m_self, m_other);
  if (m == -INFINITY) return {m, 0.0f, 0.0f};
  return {m, fast_exp2(m_self - m), fast_exp2(m_other - m)};
}
// Natural-log LSE of a state; -inf for an empty one.
__device__ __forceinline__ float state_lse(float m, float l) {
  return l > 0.0f ? m * kLn2 + logf(l) : -INFINITY;
}
// acc / l, 0 for an empty state.
__device__ __forceinline__ float state_normalize(float acc, float l) { return l > 0.0f ? acc / l : 0.0f; }

// The sink logit of a query head in base 2; -inf (no term) without sinks.
__device__ __forceinline__ float sink_logit2(const DecodeParams& p, std::int64_t q_head) {
  return p.sinks != nullptr ? p.sinks[q_head] * kLog2e : -INFINITY;
}
// Adds an attention sink (base-2 logit sink2) to a final state (m, l) whose
// normalised output element is o: the sink joins the max and the
// denominator, never P V. Returns the new normalised element; m and l become
// the state's with the sink (what the LSE is taken of). An empty state with
// a sink gives o = 0 and LSE = the sink; with neither, o = 0 and LSE -inf.
__device__ __forceinline__ float add_sink(float o, float& m, float& l, float sink2) {
  const MergeWeights w = merge_weights(m, sink2);
  const float kept = l * w.w_self;
  l = kept + w.w_other;
  m = w.m;
  return l > 0.0f ? o * (kept / l) : 0.0f;
}

// Reduce-scatter of N partial sums across the TPT lanes of a token group
// (lane r = lane % TPT). Each step halves the values a lane carries; when one
// is left the remaining steps are a plain butterfly. Afterwards the lane
// holds the full sums of values [base, base + held) in v[0 .. held).
template <int N, int TPT>
struct ReduceScatter {
  static constexpr int steps() {
    int s = 0;
    while ((1 << s) < TPT) ++s;
    return s;
  }
  static constexpr int kSteps = steps();
  static constexpr int kHeld = (N >> kSteps) > 0 ? (N >> kSteps) : 1;
  static_assert((N & (N - 1)) == 0 && (TPT & (TPT - 1)) == 0, "reduce-scatter needs powers of two");

  // One step at compile time: Step-th halving (offset TPT >> (Step + 1)).
  template <int Step>
  __device__ __forceinline__ static void step(float (&v)[N], int r, int& base) {
    if constexpr (Step < kSteps) {
      constexpr int kOffset = TPT >> (Step + 1);
      constexpr int kCount = N >> Step;
      if constexpr (kCount > 1) {
        constexpr int kHalf = kCount / 2;
        const bool upper = (r & kOffset) != 0;
#pragma unroll
        for (int i = 0; i < kHalf; ++i) {
          const float send = upper ? v[i] : v[i + kHalf];
          const float keep = upper ? v[i + kHalf] : v[i];
          v[i] = keep + __shfl_xor_sync(kFullMask, send, kOffset);
        }
        if (upper) base += kHalf;
      } else {
        v[0] += __shfl_xor_sync(kFullMask, v[0], kOffset);
      }
      step<Step + 1>(v, r, base);
    }
  }
  __device__ __forceinline__ static int run(float (&v)[N], int r) {
    int base = 0;
    step<0>(v, r, base);
    return base;
  }
};

// ---- traits --------------------------------------------------------------------
// The tile knobs, overridable only for kernel experiments (the decode probe,
// scripts/build_decode_probe.sh -DPC_DECODE_STAGES=4 ...); the shipped values
// are the defaults here and the notes in decode_direct.cu say why.
#ifndef PC_DECODE_WARPS
#define PC_DECODE_WARPS 4  // warps per CTA
#endif
#ifndef PC_DECODE_LOADS
#define PC_DECODE_LOADS 8  // 16-byte vector loads per thread per stage (about)
#endif
#ifndef PC_DECODE_STAGES
#define PC_DECODE_STAGES 3  // cp.async pipeline depth
#endif
#ifndef PC_DECODE_MIN_BLOCKS
#define PC_DECODE_MIN_BLOCKS 4  // launch bounds: CTAs per SM
#endif
constexpr int largest_pow2_dividing(int a, int b, int cap) {
  int t = 1;
  while (t * 2 <= cap && a % (t * 2) == 0 && b % (t * 2) == 0) t *= 2;
  return t;
}
constexpr int floor_pow2(int x) {
  int t = 1;
  while (t * 2 <= x) t *= 2;
  return t;
}
// Lanes a token for K and V rows of k_vecs and v_vecs load vectors of vec
// elements: the largest power of two (at most 32) dividing both, unless that
// leaves a lane more than 4 vectors or 24 dims of a row (head dims 80, 112,
// 120 in 16 bits: 5, 7, 15 vectors a lane; 80 in F32: 5, whose pipeline
// would not fit four CTAs an SM); then the smallest power of two that keeps
// a lane within both, the last vectors of a row on fewer lanes than the
// others (padded: the vectors past the row load nothing). Every head dim
// built before issue 23's (64, 128, 256, 192/128) keeps its exact split.
constexpr bool lane_share_fits(int vecs, int lanes, int vec) {
  const int per_lane = (vecs + lanes - 1) / lanes;
  return per_lane <= 4 && per_lane * vec <= 24;
}
constexpr int threads_per_token(int k_vecs, int v_vecs, int vec) {
  const int exact = largest_pow2_dividing(k_vecs, v_vecs, 32);
  if (lane_share_fits(k_vecs, exact, vec) && lane_share_fits(v_vecs, exact, vec)) return exact;
  int t = 1;
  while (t < 32 && !(lane_share_fits(k_vecs, t, vec) && lane_share_fits(v_vecs, t, vec))) t *= 2;
  return t;
}

template <DType KV, int DK, int DV>
struct DecodeTraits {
  static constexpr bool kTensorCore = false;  // the CUDA-core loop (decode_mma.cuh has the other)
  static constexpr bool kAlibi = false;       // DecodeAlibiTraits: the ALiBi instantiation
  static constexpr bool kBuilt = true;        // every kv dtype and head-dim pair
  static constexpr DType kKvDtype = KV;
  static constexpr int kHeadDim = DK;
  static constexpr int kVHeadDim = DV;
  using Raw = typename KvElem<KV>::Raw;
  static constexpr int kVec = KvElem<KV>::kVec;
  static constexpr int kLoadBytes = static_cast<int>(sizeof(Raw));
  static constexpr int kKVecs = DK / kVec;
  static constexpr int kVVecs = DV / kVec;
  static_assert(DK % kVec == 0 && DV % kVec == 0, "head dims must be whole load vectors");
  static constexpr int kThreadsPerToken = threads_per_token(kKVecs, kVVecs, kVec);
  static constexpr int kKVecsPerThread = (kKVecs + kThreadsPerToken - 1) / kThreadsPerToken;
  static constexpr int kVVecsPerThread = (kVVecs + kThreadsPerToken - 1) / kThreadsPerToken;
  // Padded rows: vector r + kThreadsPerToken i of a lane exists only when
  // it is below kKVecs (kVVecs); the others load zeros and store nothing.
  static constexpr bool kKPadded = kThreadsPerToken * kKVecsPerThread != kKVecs;
  static constexpr bool kVPadded = kThreadsPerToken * kVVecsPerThread != kVVecs;
  static constexpr int kKDimsPerThread = kKVecsPerThread * kVec;
  static constexpr int kVDimsPerThread = kVVecsPerThread * kVec;
  static constexpr int kGroupsPerWarp = 32 / kThreadsPerToken;
  static constexpr int kWarps = PC_DECODE_WARPS;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kGroups = kWarps * kGroupsPerWarp;
  // Query heads per CTA: 4 keeps q and acc at 32 floats each for every built
  // dim except 192 (24 K dims per lane), which takes 2.
  static constexpr int kHeadTile = kKDimsPerThread > 8 ? 2 : 4;
  // About 8 vector loads per thread per stage.
  static constexpr int kTokensPerGroup = floor_pow2(PC_DECODE_LOADS / (kKVecsPerThread + kVVecsPerThread) > 0
                                                        ? PC_DECODE_LOADS / (kKVecsPerThread + kVVecsPerThread)
                                                        : 1);
  static constexpr int kTileTokens = kGroups * kTokensPerGroup;
  static constexpr int kScores = kHeadTile * kTokensPerGroup;
  static constexpr int kStages = PC_DECODE_STAGES;
  static constexpr int kSlotsPerToken = kKVecsPerThread + kVVecsPerThread;
  // Shared memory: the pipeline [stage][token][slot][thread] of Raw, then the
  // score buffers [warp][group][kScores]. The cross-warp merge area
  // [warp][head][m, l, acc[DV]] reuses the pipeline once it has drained.
  static constexpr int kPipelineBytes = kStages * kTokensPerGroup * kSlotsPerToken * kThreads * kLoadBytes;
  static constexpr int kScoreBytes = kGroups * kScores * 4;
  static constexpr int kMergeBytes = kWarps * kHeadTile * (DV + 2) * 4;
  static constexpr int kSmemBytes =
      (kPipelineBytes > kMergeBytes ? kPipelineBytes : kMergeBytes) + kScoreBytes;
  static constexpr int kMinBlocksPerSm = PC_DECODE_MIN_BLOCKS;
  static_assert(kThreadsPerToken * kKVecsPerThread >= kKVecs, "K vectors covered by a token group");
  static_assert(kThreadsPerToken * kVVecsPerThread >= kVVecs, "V vectors covered by a token group");
  static_assert(kSmemBytes <= 227 * 1024 / kMinBlocksPerSm, "shared memory too large for the occupancy target");
};

// The CUDA-core loop with ALiBi (issue 23): the same tiles, one FMA per
// (head, key) more. A separate traits type, so each ALiBi kernel is its own
// instantiation and the others keep their instruction stream (their PTX is
// unchanged but for the parameter struct). Build cost, 2-core VM, ccache
// off, user CPU: decode_direct.cu 17.2 -> 24.2 s, decode_split.cu 41.2 ->
// 55.7 s for its 20 kernels in each of direct, split and auto.
template <DType KV, int DK, int DV>
struct DecodeAlibiTraits : DecodeTraits<KV, DK, DV> {
  static constexpr bool kAlibi = true;
};

// ---- the per-CTA attention over one token range -------------------------------
// Attends the query heads [tile * kHeadTile, ...) of kv head `kv_head` of
// sequence `seq` over keys [begin, end) and leaves the merged state of each
// head of each warp in shared memory: merged[warp][h] = {m, l, acc[DV]}
// (unnormalised); combine_warps() gives the CTA's result. Returns a pointer
// to that area; all threads synchronised on return.
template <class T>
__device__ __forceinline__ const float* attend_range(const DecodeParams& p, std::int64_t seq, int kv_head,
                                                     int head_tile, std::int32_t begin, std::int32_t end,
                                                     unsigned char* smem) {
  constexpr int TPT = T::kThreadsPerToken;
  constexpr int U = T::kTokensPerGroup;
  constexpr int HT = T::kHeadTile;
  constexpr int N = T::kScores;
  constexpr int KVPT = T::kKVecsPerThread;
  constexpr int VVPT = T::kVVecsPerThread;
  constexpr int VEC = T::kVec;
  using Raw = typename T::Raw;
  using RS = ReduceScatter<N, TPT>;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int r = lane % TPT;                               // lane within the token group
  const int group = warp * T::kGroupsPerWarp + lane / TPT;  // token group within the CTA

  Raw* pipe = reinterpret_cast<Raw*>(smem);
  float* scores = reinterpret_cast<float*>(
      smem + (T::kPipelineBytes > T::kMergeBytes ? T::kPipelineBytes : T::kMergeBytes));
  float* my_scores = scores + group * N;

  float m[HT], l[HT], acc[HT][VVPT * VEC];
#pragma unroll
  for (int h = 0; h < HT; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int d = 0; d < VVPT * VEC; ++d) acc[h][d] = 0.0f;
  }

  const PagedKvView& kv = p.kv;
  const Raw* key_base = static_cast<const Raw*>(kv.key_data);
  const Raw* value_base = static_cast<const Raw*>(kv.value_data);
  const std::int32_t* pages = kv.page_indices + kv.page_indptr[seq];
  const std::int32_t k_head_vec = kv_head * p.k_head_vecs;
  const std::int32_t v_head_vec = kv_head * p.v_head_vecs;
  const std::int32_t span = end > begin ? end - begin : 0;
  const int iterations = (span + T::kTileTokens - 1) / T::kTileTokens;

  // Token u of this group in iteration `it`: begin + it * tile + u * kGroups + group.
  auto issue = [&](int it) {
    const int stage = it % T::kStages;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int32_t token = begin + it * T::kTileTokens + u * T::kGroups + group;
      const bool valid = token < end;
      std::int64_t k_off = 0, v_off = 0;  // in vectors
      if (valid) {
        // Same formula as PagedKvView::key_offset / value_offset, counted in
        // vectors: the token / block_size division by multiply-shift, the page
        // term a 32 x 32 -> 64-bit multiply (strides checked at launch).
        const std::uint32_t page_no = fast_divide(static_cast<std::uint32_t>(token), p.block_magic, p.block_shift);
        const std::int32_t slot = token - static_cast<std::int32_t>(page_no) * kv.block_size;
        const std::int32_t page = pages[page_no];
        k_off = static_cast<std::int64_t>(page) * p.k_block_vecs + (slot * p.k_slot_vecs + k_head_vec);
        v_off = static_cast<std::int64_t>(page) * p.v_block_vecs + (slot * p.v_slot_vecs + v_head_vec);
      }
      Raw* dst = pipe + ((stage * U + u) * T::kSlotsPerToken) * T::kThreads + tid;
#pragma unroll
      for (int i = 0; i < KVPT; ++i)
        cp_async_vec<T::kLoadBytes>(dst + i * T::kThreads, key_base + k_off + (r + TPT * i),
                                    valid && (!T::kKPadded || r + TPT * i < T::kKVecs));
#pragma unroll
      for (int i = 0; i < VVPT; ++i)
        cp_async_vec<T::kLoadBytes>(dst + (KVPT + i) * T::kThreads, value_base + v_off + (r + TPT * i),
                                    valid && (!T::kVPadded || r + TPT * i < T::kVVecs));
    }
  };

#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < iterations) issue(s);
    cp_async_commit();
  }

  // q of the head tile, pre-scaled, loaded while the first stages are in
  // flight; heads past the GQA group are zero.
  float q[HT][KVPT * VEC];
  const std::int64_t q_row = p.query_start_loc[seq];
  const int first_head = kv_head * p.gqa + head_tile * HT;
  const int heads_here = min(HT, p.gqa - head_tile * HT);
#pragma unroll
  for (int h = 0; h < HT; ++h) {
#pragma unroll
    for (int i = 0; i < KVPT; ++i) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int dim = (r + TPT * i) * VEC + e;
        q[h][i * VEC + e] =
            h < heads_here && (!T::kKPadded || dim < T::kHeadDim)
                ? load_as_float(p.query_dtype, p.query, (q_row * p.q_heads + first_head + h) * T::kHeadDim + dim) *
                      p.q_multiplier
                : 0.0f;
      }
    }
  }

  // ALiBi: the bias of key j is alibi[h] * (j - query_pos), base 2 (the
  // scores are base-2 logits, capped already). Heads past the group: 0.
  float alibi[HT];
  std::int32_t query_pos = 0;
  if constexpr (T::kAlibi) {
    query_pos = p.kv.seq_lens[seq] - 1;
#pragma unroll
    for (int h = 0; h < HT; ++h) alibi[h] = h < heads_here ? p.alibi_slopes[first_head + h] * kLog2e : 0.0f;
  }

  for (int it = 0; it < iterations; ++it) {
    if (it + T::kStages - 1 < iterations) issue(it + T::kStages - 1);
    cp_async_commit();
    cp_async_wait<T::kStages - 1>();
    const int stage = it % T::kStages;
    const Raw* src = pipe + (stage * U * T::kSlotsPerToken) * T::kThreads + tid;

    // S = q . k for every (head, token) of this group: lane-partial, then reduced.
    float part[N];
#pragma unroll
    for (int i = 0; i < N; ++i) part[i] = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < KVPT; ++i) {
        float k[VEC];
        widen<T::kKvDtype>(src[(u * T::kSlotsPerToken + i) * T::kThreads], k);
#pragma unroll
        for (int h = 0; h < HT; ++h)
#pragma unroll
          for (int e = 0; e < VEC; ++e) part[h * U + u] = fmaf(q[h][i * VEC + e], k[e], part[h * U + u]);
      }
    }
    const int base = RS::run(part, r);
#pragma unroll
    for (int c = 0; c < RS::kHeld; ++c) {
      float s = part[c];
      if (p.softcap > 0.0f) s = p.softcap * tanhf(s * p.inv_softcap) * kLog2e;
      my_scores[base + c] = s;
    }
    __syncwarp();
    float sc[N];
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      if constexpr (N % 4 == 0) {
        const float4 v4 = *reinterpret_cast<const float4*>(my_scores + i);
        sc[i] = v4.x;
        sc[i + 1] = v4.y;
        sc[i + 2] = v4.z;
        sc[i + 3] = v4.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4 && i + j < N; ++j) sc[i + j] = my_scores[i + j];
      }
    }
    __syncwarp();  // the next iteration overwrites my_scores

    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) valid[u] = begin + it * T::kTileTokens + u * T::kGroups + group < end;
    if constexpr (T::kAlibi) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const std::int32_t key = begin + it * T::kTileTokens + u * T::kGroups + group;
        const float distance = static_cast<float>(key - query_pos);  // key position - query position
#pragma unroll
        for (int h = 0; h < HT; ++h) sc[h * U + u] = fmaf(alibi[h], distance, sc[h * U + u]);
      }
    }

    float pr[N];
#pragma unroll
    for (int h = 0; h < HT; ++h) {
      float mx = m[h];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (valid[u]) mx = fmaxf(mx, sc[h * U + u]);
      const float m_use = mx == -INFINITY ? 0.0f : mx;
      const float factor = fast_exp2(m[h] - m_use);
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        pr[h * U + u] = valid[u] ? fast_exp2(sc[h * U + u] - m_use) : 0.0f;
        sum += pr[h * U + u];
      }
      l[h] = l[h] * factor + sum;
      m[h] = mx;
#pragma unroll
      for (int d = 0; d < VVPT * VEC; ++d) acc[h][d] *= factor;
    }

    // acc += p v
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < VVPT; ++i) {
        float v[VEC];
        widen<T::kKvDtype>(src[(u * T::kSlotsPerToken + KVPT + i) * T::kThreads], v);
#pragma unroll
        for (int h = 0; h < HT; ++h)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[h][i * VEC + e] = fmaf(pr[h * U + u], v[e], acc[h][i * VEC + e]);
      }
    }
  }
  cp_async_wait<0>();

  // Merge the token groups of this warp (lanes r, r + TPT, ... hold the same dims).
#pragma unroll
  for (int offset = TPT; offset < 32; offset *= 2) {
#pragma unroll
    for (int h = 0; h < HT; ++h) {
      const float m_other = __shfl_xor_sync(kFullMask, m[h], offset);
      const float l_other = __shfl_xor_sync(kFullMask, l[h], offset);
      const MergeWeights w = merge_weights(m[h], m_other);
      l[h] = l[h] * w.w_self + l_other * w.w_other;
#pragma unroll
      for (int d = 0; d < VVPT * VEC; ++d) {
        const float a_other = __shfl_xor_sync(kFullMask, acc[h][d], offset);
        acc[h][d] = acc[h][d] * w.w_self + a_other * w.w_other;
      }
      m[h] = w.m;
    }
  }

  // Across warps through shared memory (reusing the drained pipeline).
  __syncthreads();
  float* merged = reinterpret_cast<float*>(smem);  // [warp][head][2 + DV]
  if (lane < TPT) {
#pragma unroll
    for (int h = 0; h < HT; ++h) {
      float* row = merged + (warp * HT + h) * (T::kVHeadDim + 2);
      if (r == 0) {
        row[0] = m[h];
        row[1] = l[h];
      }
#pragma unroll
      for (int i = 0; i < VVPT; ++i)
        if (!T::kVPadded || r + TPT * i < T::kVVecs)
#pragma unroll
          for (int e = 0; e < VEC; ++e) row[2 + (r + TPT * i) * VEC + e] = acc[h][i * VEC + e];
    }
  }
  __syncthreads();
  return merged;
}

// The CTA's final state for head h of the tile: max m (base 2), sum l, and
// when d >= 0 the normalised output element d. Reads the per-warp rows that
// attend_range left in shared memory.
template <class T>
__device__ __forceinline__ float combine_warps(const float* merged, int h, int d, float& m_out, float& l_out) {
  constexpr int kRow = T::kVHeadDim + 2;
  float mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < T::kWarps; ++w) mx = fmaxf(mx, merged[(w * T::kHeadTile + h) * kRow]);
  float lsum = 0.0f, a = 0.0f;
#pragma unroll
  for (int w = 0; w < T::kWarps; ++w) {
    const float* row = merged + (w * T::kHeadTile + h) * kRow;
    const float wt = mx == -INFINITY ? 0.0f : fast_exp2(row[0] - mx);
    lsum += row[1] * wt;
    a += row[2 + d] * wt;
  }
  m_out = mx;
  l_out = lsum;
  return state_normalize(a, lsum);
}

// Writes the CTA's final output (times v_scale) and LSE for the heads of its
// tile from the per-warp states attend_range left in shared memory, the
// sink (if any) added: the end of a sequence the auto plan attends whole.
// The direct kernel writes the same loop out itself (decode_direct.cu says
// why).
template <class T>
__device__ __forceinline__ void store_final(const DecodeParams& p, const float* merged, std::int64_t seq,
                                            int kv_head, int tile) {
  const std::int64_t row = p.query_start_loc[seq];
  const int heads_here = min(T::kHeadTile, p.gqa - tile * T::kHeadTile);
  for (int e = threadIdx.x; e < heads_here * T::kVHeadDim; e += T::kThreads) {
    const int h = e / T::kVHeadDim;
    const int d = e % T::kVHeadDim;
    float m, l;
    float o = combine_warps<T>(merged, h, d, m, l);
    const std::int64_t q_head = static_cast<std::int64_t>(kv_head) * p.gqa + tile * T::kHeadTile + h;
    if (p.sinks != nullptr) o = add_sink(o, m, l, sink_logit2(p, q_head));
    store_from_float(p.output_dtype, p.output, (row * p.q_heads + q_head) * T::kVHeadDim + d, o * p.v_scale);
    if (d == 0 && p.lse != nullptr) p.lse[row * p.q_heads + q_head] = state_lse(m, l);
  }
}

// ---- the one switch: (kv dtype, head dims) -> traits -------------------------------
inline const char* built_head_dims() { return "32, 64, 80, 96, 112, 120, 128, 192/128, 256, 576/512"; }

// Head dims the tensor-core loop (decode_mma.cuh) takes for 16-bit caches;
// issue 23's 32, 80, 96, 112 and 120 run the CUDA-core loop (one kernel
// each per cache dtype, ALiBi and not: their build time is in
// docs/performance.md, session 13).
inline bool head_dims_tensor_core(std::int64_t dk, std::int64_t dv) {
  return (dk == dv && (dk == 64 || dk == 128 || dk == 256)) || (dk == 192 && dv == 128);
}
// 576/512: a latent (MLA) cache's rows (V the first 512 of K's 576
// columns; the upload gives the value view rows of 576), on the CUDA-core
// loop until the MLA decode kernel of issue 23 (item 2); no ALiBi.
inline bool head_dims_built(std::int64_t dk, std::int64_t dv) {
  return head_dims_tensor_core(dk, dv) ||
         (dk == dv && (dk == 32 || dk == 80 || dk == 96 || dk == 112 || dk == 120)) || (dk == 576 && dv == 512);
}
inline bool kv_dtype_built(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F8_E4M3 || d == DType::F8_E5M2;
}
inline bool query_dtype_built(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }

// Traits: DecodeTraits (CUDA cores) or DecodeTcTraits (decode_mma.cuh), whose
// kBuilt leaves out the dims a traits family does not take for KV.
template <DType KV, template <DType, int, int> class Traits = DecodeTraits, class F>
Status dispatch_dims(std::int64_t dk, std::int64_t dv, F&& f) {
  if constexpr (Traits<KV, 64, 64>::kBuilt)
    if (dk == 64 && dv == 64) return f(Traits<KV, 64, 64>{});
  if (dk == 128 && dv == 128) return f(Traits<KV, 128, 128>{});
  if (dk == 256 && dv == 256) return f(Traits<KV, 256, 256>{});
  if constexpr (Traits<KV, 192, 128>::kBuilt)
    if (dk == 192 && dv == 128) return f(Traits<KV, 192, 128>{});
  if constexpr (!Traits<KV, 128, 128>::kTensorCore) {  // issue 23's head sizes: the CUDA-core loop
    if constexpr (!Traits<KV, 128, 128>::kAlibi)
      if (dk == 576 && dv == 512) return f(Traits<KV, 576, 512>{});
    if (dk == dv) {
      switch (dk) {
        case 32: return f(Traits<KV, 32, 32>{});
        case 80: return f(Traits<KV, 80, 80>{});
        case 96: return f(Traits<KV, 96, 96>{});
        case 112: return f(Traits<KV, 112, 112>{});
        case 120: return f(Traits<KV, 120, 120>{});
        default: break;
      }
    }
  }
  return invalid_input("head_dim " + std::to_string(dk) + "/" + std::to_string(dv) +
                           " is not built; built: " + built_head_dims(),
                       "decode");
}

// Calls f(Traits{}) for the view's kv dtype and head dims (Traits: the
// CUDA-core loop's DecodeTraits, or DecodeAlibiTraits for an ALiBi case); an
// error names an unsupported value and lists what is built.
template <template <DType, int, int> class Traits = DecodeTraits, class F>
Status dispatch_decode(DType kv_dtype, std::int64_t dk, std::int64_t dv, F&& f) {
#ifdef PC_DECODE_SWEEP_ONLY  // kernel experiments: build the benchmark's BF16 d128 alone
  if constexpr (Traits<DType::BF16, 128, 128>::kAlibi)
    return invalid_input("PC_DECODE_SWEEP_ONLY build: no ALiBi", "decode");
  if (kv_dtype == DType::BF16 && dk == 128 && dv == 128) return f(DecodeTraits<DType::BF16, 128, 128>{});
  return invalid_input("PC_DECODE_SWEEP_ONLY build: BF16 head dim 128 only", "decode");
#else
  switch (kv_dtype) {
    case DType::F32: return dispatch_dims<DType::F32, Traits>(dk, dv, f);
    case DType::F16: return dispatch_dims<DType::F16, Traits>(dk, dv, f);
    case DType::BF16: return dispatch_dims<DType::BF16, Traits>(dk, dv, f);
    case DType::F8_E4M3: return dispatch_dims<DType::F8_E4M3, Traits>(dk, dv, f);
    case DType::F8_E5M2: return dispatch_dims<DType::F8_E5M2, Traits>(dk, dv, f);
    default:
      return invalid_input("kv dtype " + std::string(dtype_name(kv_dtype)) +
                               " is not built; built: F32, F16, BF16, F8_E4M3, F8_E5M2",
                           "decode");
  }
#endif
}

// Raises the kernel's dynamic shared-memory limit when it needs more than
// the default 48 KB (legal during stream capture: no work is enqueued).
template <class Kernel>
Status allow_shared_memory(Kernel kernel, int bytes) {
  if (bytes > 48 * 1024) CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return {};
}

// The direct kernel over the whole batch (decode_direct.cu).
Status launch_direct_impl(const DeviceCaseView& view, cudaStream_t stream);

// Checks the view and fills the parameters every decode kernel shares.
Expected<DecodeParams> make_decode_params(const DeviceCaseView& view, int head_tile, SeqFilter filter,
                                          std::int64_t threshold_tokens);

}  // namespace pagecheck::gpu::decode
