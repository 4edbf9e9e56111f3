// Tensor-core inner loop of the decode paths (issue 18, item 1), for BF16 and
// F16 K/V and, at head dims 128 and 256, fp8 K/V (widened exactly to F16 in
// registers; k_scale is in the f32 scale of S, v_scale on the output as in
// the CUDA-core loop): the same per-CTA job as attend_range() in decode_common.cuh (one
// (sequence, kv head, head tile) over keys [begin, end), per-warp states left
// in shared memory for combine_warps()), with Q K^T and P V on mma.sync.
//
// Shapes (m16n8k16, f32 accumulators; g = lane / 4, t = lane % 4):
//   S   = Q K^T   M = query heads (8 of the tile in rows 0-7, in rows 8-15
//                 what rounding them to the K/V type lost), N = 8 keys,
//                 K = 16 dims. Q is the A operand, built once in registers
//                 (unscaled; S is scaled in f32); K is the
//                 B operand, straight from shared memory by ldmatrix.
//   O^T = V^T P^T M = 16 value dims, N = the 8 heads, K = 16 keys. V^T is the
//                 A operand by ldmatrix.trans from the [key][dim] tile; P^T
//                 is the B operand and is already in the registers S left:
//                 the C fragments of S's two 8-key tiles (head g, keys 2t,
//                 2t+1 and 8+2t, 8+2t+1) are exactly the B fragment of a
//                 16-key step. So P never touches shared memory, and the
//                 output accumulator is DV/16 x 4 floats (32 at d128), not
//                 the 64 of a 16-row O.
// Work split: kWarps warps, each an independent pipeline over the chunks
//   (kChunkKeys = 16 or 32 keys) warp, warp + kWarps, ... of the range,
//   kStages deep, with its own online-softmax state (m and l per head,
//   uniform over the 4 lanes of a quad; each lane sums its own l, the quad
//   sums at the end; one max and one rescale of o per chunk). The copy
//   (cp.async, zero-filled past the range): kLanesPerKey lanes take a key's K
//   and V rows, so one instruction covers whole rows of 32 / kLanesPerKey
//   keys (round 1: a lane pair per key, 16 keys of 32 bytes each); the page
//   numbers are read one iteration ahead and shuffled to the copying lanes.
//   A warp needs __syncwarp only, never a CTA barrier, inside the loop.
// Shared memory per stage: K [keys][DK/8 vectors], then V [keys][DV/8], the
//   vector index XOR-swizzled by (key % 8) so that ldmatrix's eight 16-byte
//   rows hit eight different bank groups (every head dim is a multiple of 64).
// The online softmax is the one of attend_range(): base-2 logits, S
//   multiplied by scale * k_scale (* log2 e) in f32, softcap on the f32 scores.
// Issue 23: attention sinks are added in the epilogues this loop shares with
//   the CUDA-core one (add_sink()); ALiBi is not in this loop: an ALiBi case
//   runs the CUDA-core loop (decode_uses_tensor_cores()), so that only 20
//   instantiations per kernel are added, not 32.
#pragma once

#include <cstdlib>
#include <cstring>

#include "decode/decode_common.cuh"
#include "common/mma_sync.cuh"
#include "common/tensor_map.cuh"
#include "common/tma.cuh"
#ifdef PAGECHECK_HAVE_SM90A
#include "decode/decode_mla_sm90.cuh"
#endif

namespace pagecheck::gpu::decode {

// ---- tile knobs (kernel experiments: scripts/build_decode_probe.sh -D...) ------
#ifndef PC_DECODE_TC_WARPS
#define PC_DECODE_TC_WARPS 2  // warps per CTA, each its own pipeline
#endif
#ifndef PC_DECODE_TC_SMEM_KB
#define PC_DECODE_TC_SMEM_KB 48  // pipeline budget per CTA: sets the stage count
#endif
// Round 2 (docs/performance.md, "Tensor-core decode, round 2"):
#ifndef PC_DECODE_TC_ROWS
#define PC_DECODE_TC_ROWS 1  // 1: one copy instruction takes whole key rows; 0: a lane pair per key (round 1)
#endif
#ifndef PC_DECODE_TC_AHEAD
#define PC_DECODE_TC_AHEAD 1  // 1: a chunk's page numbers are read one iteration before its copy
#endif
#ifndef PC_DECODE_TC_KEYS
#define PC_DECODE_TC_KEYS 16  // keys per stage of a warp (16 or 32): one softmax step and o rescale per stage
#endif
#ifndef PC_DECODE_TC_FP8_KEYS
// Keys per stage of a warp over fp8 caches (16 or 32). A 16-key fp8 stage
// holds half the bytes of a BF16 one, so each byte carries twice the
// per-stage work (softmax step, rescale, barriers): E4M3 at 64 x 4096 direct
// reads 85% of the read ceiling where BF16 reads 94% (H100, session 15).
// 32-key fp8 stages, H100, session 17 (devbin/decode_probe{,_k32}, two
// interleaved rounds): E4M3 at 64 x 4096 direct 199.1-199.6 us against
// 201.5-202.2 us, 1.812-1.817x BF16's tokens per second against 1.787-1.793x.
#define PC_DECODE_TC_FP8_KEYS 32
#endif
#ifndef PC_DECODE_TC_WHOLE_PAGES
#define PC_DECODE_TC_WHOLE_PAGES 1  // 1: offsets per 16-key sub-chunk where blocks hold whole sub-chunks
#endif
#ifndef PC_DECODE_TC_LEAN_COPY
// 1 (the default since session 10): whole-page chunks copied from per-lane
// offsets computed once before the loop and one base pointer per 16-key
// sub-chunk, instead of each key's 64-bit offsets per chunk (the copy: 95
// instructions a chunk instead of ~240). H100, decode probe, two rounds:
// direct 64 x 4096 / 256 x 1024 +0.5-0.7%, split:1024 +0.2-0.7%, the
// latency-bound direct 1 x 32768 +24% (docs/performance.md, session 10).
#define PC_DECODE_TC_LEAN_COPY 1
#endif
#ifndef PC_DECODE_TC_TMA
// 1: K/V by tensor copies where the launch set DecodeParams::tma (the direct
// path on compute capability 9.0 under PAGECHECK_DECODE_TMA=1, 16-bit
// caches, pages of 16n slots, ranges starting on a 16-key boundary); 0:
// cp.async everywhere (and no second copy of the loop in the direct kernel). A tensor map over
// the pool read the bench's NHD pages at 3073 GB/s against 2885 by 16-byte
// loads (decode_probe roof_paged, H100, session 20; docs/performance.md).
#define PC_DECODE_TC_TMA 1
#endif
#ifndef PC_DECODE_TC_TMA_SPLIT
// A developer knob (decode_probe builds): 1: split's partitions and auto's
// take the tensor copies too, where PAGECHECK_DECODE_TMA=1 (the roof read
// 8 x 8192 1.6% faster that way and 1 x 32768 5% slower: session 20, not
// yet measured in the kernel); 0: whole sequences only (direct, auto's).
#define PC_DECODE_TC_TMA_SPLIT 0
#endif
#ifndef PC_DECODE_TC_SPLIT_S
#define PC_DECODE_TC_SPLIT_S 1  // 1: S = Q K^T in two accumulator chains (even / odd k-steps)
#endif

template <DType KV, int DK, int DV>
struct DecodeTcTraits {
  static constexpr bool kTensorCore = true;
  static constexpr bool kAlibi = false;  // ALiBi cases take the CUDA-core loop
  static constexpr DType kKvDtype = KV;
  static constexpr bool kFp8 = KV == DType::F8_E4M3 || KV == DType::F8_E5M2;
  static_assert(KV == DType::BF16 || KV == DType::F16 || kFp8, "the tensor-core loop takes 16-bit or fp8 K/V");
  // The mma operand type: fp8 widens exactly to F16.
  static constexpr DType kMmaType = KV == DType::BF16 ? DType::BF16 : DType::F16;
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  static constexpr int kHeadDim = DK;
  static constexpr int kVHeadDim = DV;
  static constexpr int kKeyVecs = DK * kElemBytes / 16;  // 16-byte vectors per key row
  static constexpr int kValueVecs = DV * kElemBytes / 16;
  // The swizzle needs rows of a multiple of 8 vectors: every 16-bit dim, fp8 at 128 and 256.
  static constexpr bool kBuilt = kKeyVecs % 8 == 0 && kValueVecs % 8 == 0;
  static constexpr int kChunkKeys = kFp8 ? PC_DECODE_TC_FP8_KEYS : PC_DECODE_TC_KEYS;  // keys per stage of a warp
  static_assert(kChunkKeys == 16 || kChunkKeys == 32, "a stage is one or two 16-key sub-chunks");
  static constexpr int kHeadTile = 8;      // query heads per CTA: the N of P V
  static constexpr int kWarps = PC_DECODE_TC_WARPS;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStageVecs = kChunkKeys * (kKeyVecs + kValueVecs);
  static constexpr int kStageBytes = kStageVecs * 16;
  static constexpr int clamp_stages(int s) { return s < 2 ? 2 : s > 8 ? 8 : s; }
  static constexpr int kStages = clamp_stages(PC_DECODE_TC_SMEM_KB * 1024 / (kWarps * kStageBytes));
  static constexpr int kPipelineBytes = kWarps * kStages * kStageBytes;
  static constexpr int kMergeBytes = kWarps * kHeadTile * (DV + 2) * 4;
  // Tensor copies (PC_DECODE_TC_TMA): 16-bit rows in 64-dim boxes; the
  // stages 1024-byte aligned for the 128-byte swizzle (up to 1 KB of
  // padding), then a barrier a stage a warp.
  static constexpr bool kTmaCapable = PC_DECODE_TC_TMA && !kFp8 && DK % 64 == 0 && DV % 64 == 0;
  static constexpr int kTmaExtraBytes = kTmaCapable ? 1024 + 8 * kWarps * kStages : 0;
  static constexpr int kSmemBytes =
      kPipelineBytes + kTmaExtraBytes > kMergeBytes ? kPipelineBytes + kTmaExtraBytes : kMergeBytes;
  static constexpr int blocks_by_smem() {
    const int b = 227 * 1024 / kSmemBytes;
    return b < 1 ? 1 : b > 8 ? 8 : b;
  }
  static constexpr int kMinBlocksPerSm = blocks_by_smem();
  static_assert(kSmemBytes <= 227 * 1024, "shared memory exceeds one SM");
  // The copy: kLanesPerKey lanes take one key row (K, then V), vector c =
  // r + kLanesPerKey * i for lane r of the key; a warp instruction covers
  // kKeysPerCopy keys, kCopyGroups of them cover the 16 keys of a chunk.
  // Whole rows: the largest power of two dividing both row lengths (8 for
  // 192/128 and fp8 d128, 16 at d128, 32 at d256); round 1: a lane pair.
  static constexpr int pow2_part(int v) { return v & -v; }
  static constexpr int kRowLanes = pow2_part(kKeyVecs | kValueVecs) < 32 ? pow2_part(kKeyVecs | kValueVecs) : 32;
  static constexpr int kLanesPerKey = PC_DECODE_TC_ROWS ? kRowLanes : 2;
  static constexpr int kKeysPerCopy = 32 / kLanesPerKey;
  static constexpr int kCopyGroups = kChunkKeys / kKeysPerCopy;
  static_assert(kLanesPerKey >= 2 && kKeyVecs % kLanesPerKey == 0 && kValueVecs % kLanesPerKey == 0,
                "the lanes of a key split its K and V rows evenly");
};

// ---- the per-CTA attention over one token range, tensor cores ------------------
// Same contract as attend_range(): returns merged[warp][head][m, l, acc[DV]]
// in shared memory, all threads synchronised.
// kTma (T::kTmaCapable; the caller checked DecodeParams::tma and that
// begin is a multiple of 16): each 16-key sub-chunk of a stage arrives as
// boxes of 16 rows x 64 dims (2 KB, 128-byte swizzle: the 16-byte chunk c of
// key k's row at k * 128 + ((c ^ k % 8) * 16)), K's dim halves then V's,
// issued by lane 0 onto the stage's barrier; a tensor copy cannot zero-fill
// by key, so the V rows past the range are zeroed once the stage lands.
// The cp.async form keeps rows whole (256 bytes at head dim 128), the same
// XOR within each 128-byte half.
template <class T, bool kTma = false>
__device__ __forceinline__ const float* attend_range_tc(const DecodeParams& p, std::int64_t seq, int kv_head,
                                                        int head_tile, std::int32_t begin, std::int32_t end,
                                                        unsigned char* smem) {
  constexpr int KV_VECS = T::kKeyVecs;
  constexpr int V_VECS = T::kValueVecs;
  constexpr int CHUNK = T::kChunkKeys;
  constexpr int SUBS = CHUNK / 16;  // 16-key sub-chunks of a chunk (the K of P V)
  constexpr int STAGES = T::kStages;
  constexpr int WARPS = T::kWarps;
  constexpr int KSTEPS = T::kHeadDim / 16;   // k-steps of S = Q K^T
  constexpr int MTILES = T::kVHeadDim / 16;  // m-tiles of O^T
  constexpr bool F16 = T::kMmaType == DType::F16;  // else BF16
  static_assert(T::kBuilt, "the swizzle needs rows of a multiple of 8 vectors");
  constexpr bool FP8 = T::kFp8;
  constexpr __nv_fp8_interpretation_t kFp8Kind = T::kKvDtype == DType::F8_E5M2 ? __NV_E5M2 : __NV_E4M3;
  // fp8 pair (low byte first) -> f16x2, exact.
  auto widen2 = [](std::uint32_t pair) -> std::uint32_t {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), kFp8Kind);
    return static_cast<std::uint32_t>(h.x) | (static_cast<std::uint32_t>(h.y) << 16);
  };

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;  // head row of S; value dim row of O^T
  const int t = lane % 4;

  static_assert(!kTma || T::kTmaCapable, "tensor copies take 16-bit rows of 64-dim halves");
  constexpr int K_HALVES = T::kHeadDim / 64, V_HALVES = T::kVHeadDim / 64;  // boxes a key row (kTma)
  constexpr int SUB_BYTES = 16 * (KV_VECS + V_VECS) * 16;                    // a 16-key sub-chunk's K and V
  const unsigned smem_addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const unsigned pipe_pad = kTma ? ((smem_addr + 1023u) & ~1023u) - smem_addr : 0u;
  uint4* warp_pipe = reinterpret_cast<uint4*>(smem + pipe_pad) + warp * STAGES * T::kStageVecs;
  const unsigned warp_pipe_addr = static_cast<unsigned>(__cvta_generic_to_shared(warp_pipe));
  // kTma: this warp's barrier of stage s.
  const unsigned warp_bars = smem_addr + pipe_pad + T::kPipelineBytes + warp * STAGES * 8;
  auto bar_of = [&](int stage) { return warp_bars + static_cast<unsigned>(stage) * 8u; };
  if constexpr (kTma) {
    if (lane == 0) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) mbar_init(bar_of(s), 1);
      fence_mbarrier_init();
      fence_proxy_async();
    }
    __syncwarp();
  }

  const PagedKvView& kv = p.kv;
  // DecodeParams counts cache strides in load vectors of the CUDA-core loop
  // (16 bytes, 8 for fp8); a 16-byte vector c of a row is Raw vector c * kRawPer16.
  using Raw = typename KvElem<T::kKvDtype>::Raw;
  constexpr int kRawPer16 = 16 / static_cast<int>(sizeof(Raw));
  const Raw* key_base = static_cast<const Raw*>(kv.key_data);
  const Raw* value_base = static_cast<const Raw*>(kv.value_data);
  const std::int32_t* pages = kv.page_indices + kv.page_indptr[seq];
  const std::int32_t k_head_vec = kv_head * p.k_head_vecs;
  const std::int32_t v_head_vec = kv_head * p.v_head_vecs;
  const std::int32_t span = end > begin ? end - begin : 0;
  const int chunks = (span + CHUNK - 1) / CHUNK;
  const int my_chunks = chunks > warp ? (chunks - warp + WARPS - 1) / WARPS : 0;

  // The copy of chunk j of this warp (global chunk warp + j * WARPS). Lane l
  // reads the page of key own_key of the chunk (page_of); the copy group q
  // takes keys q * KPC + lane / LPK. Whole pages (PC_DECODE_TC_WHOLE_PAGES;
  // block size and range start multiples of 16, the usual case): each
  // 16-key sub-chunk lies in one page, so a lane reads the page of its
  // sub-chunk (one address for all lanes) and a key's offset is the
  // sub-chunk's plus key * slot stride. Otherwise the pages of the keys come
  // from their owners (lane k % CHUNK) by shuffle, the slot by division (with
  // one group, each lane owns the key it copies).
  constexpr int LPK = T::kLanesPerKey;
  constexpr int KPC = T::kKeysPerCopy;
  constexpr int GROUPS = T::kCopyGroups;
  static_assert(16 % KPC == 0, "a copy group lies in one 16-key sub-chunk");
  const int copy_key = lane / LPK;  // within a copy group
  const int copy_r = lane % LPK;
  const bool whole_pages = PC_DECODE_TC_WHOLE_PAGES && kv.block_size % 16 == 0 && begin % 16 == 0;
  const int own_key = whole_pages ? (lane % CHUNK) / 16 * 16 : GROUPS == 1 ? copy_key : lane % CHUNK;  // CHUNK <= 32
  auto chunk_first = [&](int j) { return begin + (warp + j * WARPS) * CHUNK; };
  auto page_of = [&](int j) -> std::int32_t {
    const std::int32_t token = chunk_first(j) + own_key;
    if (j >= my_chunks || token >= end) return 0;
    return pages[fast_divide(static_cast<std::uint32_t>(token), p.block_magic, p.block_shift)];
  };
  // Vector offsets of token's K and V rows in page `page`.
  auto row_offsets = [&](std::int32_t token, std::int32_t page, std::int64_t& k_off, std::int64_t& v_off) {
    const std::uint32_t page_no = fast_divide(static_cast<std::uint32_t>(token), p.block_magic, p.block_shift);
    const std::int32_t slot = token - static_cast<std::int32_t>(page_no) * kv.block_size;
    k_off = static_cast<std::int64_t>(page) * p.k_block_vecs + (slot * p.k_slot_vecs + k_head_vec);
    v_off = static_cast<std::int64_t>(page) * p.v_block_vecs + (slot * p.v_slot_vecs + v_head_vec);
  };
  auto copy_rows = [&](int stage, int key, bool valid, std::int64_t k_off, std::int64_t v_off) {
    uint4* k_dst = warp_pipe + stage * T::kStageVecs + key * KV_VECS;
    uint4* v_dst = warp_pipe + stage * T::kStageVecs + CHUNK * KV_VECS + key * V_VECS;
    const int swizzle = key % 8;
#pragma unroll
    for (int i = 0; i < KV_VECS / LPK; ++i) {
      const int c = copy_r + LPK * i;
      cp_async_vec<16>(k_dst + (c ^ swizzle), key_base + k_off + c * kRawPer16, valid);
    }
#pragma unroll
    for (int i = 0; i < V_VECS / LPK; ++i) {
      const int c = copy_r + LPK * i;
      cp_async_vec<16>(v_dst + (c ^ swizzle), value_base + v_off + c * kRawPer16, valid);
    }
  };
  // PC_DECODE_TC_LEAN_COPY: what the whole-page copy of key q * KPC +
  // copy_key needs that no chunk changes: its row's offset within a
  // sub-chunk's base (its slot in the sub-chunk, the kv head, this lane's
  // first vector; Raw units, 32-bit as row_offsets' in-page part) and its
  // swizzled destination within a stage (bytes; V's follows from K's).
  std::int32_t lean_k[GROUPS], lean_v[GROUPS];
  std::uint32_t lean_dst[GROUPS];
  if constexpr (PC_DECODE_TC_LEAN_COPY) {
#pragma unroll
    for (int q = 0; q < GROUPS; ++q) {
      const int key = q * KPC + copy_key;
      lean_k[q] = (key % 16) * p.k_slot_vecs + k_head_vec + copy_r * kRawPer16;
      lean_v[q] = (key % 16) * p.v_slot_vecs + v_head_vec + copy_r * kRawPer16;
      lean_dst[q] = static_cast<std::uint32_t>(key * KV_VECS + (copy_r ^ (key % 8))) * 16;
    }
  }
  auto issue = [&](int j, std::int32_t own_page) {
    const int stage = j % STAGES;
    const std::int32_t first = chunk_first(j);
    if constexpr (kTma) {
      // The sub-chunks' pages and first slots (whole pages: one page a
      // sub-chunk), then lane 0 arms the stage's barrier for its bytes and
      // issues the boxes.
      std::int32_t page[SUBS], slot0[SUBS];
#pragma unroll
      for (int u = 0; u < SUBS; ++u) {
        page[u] = SUBS == 1 ? own_page : __shfl_sync(kFullMask, own_page, 16 * u);
        const std::int32_t token = first + 16 * u;
        const std::uint32_t page_no = fast_divide(static_cast<std::uint32_t>(token), p.block_magic, p.block_shift);
        slot0[u] = token - static_cast<std::int32_t>(page_no) * kv.block_size;
      }
      if (lane == 0) {
        const unsigned bar = bar_of(stage);
        const unsigned dst = warp_pipe_addr + static_cast<unsigned>(stage * T::kStageBytes);
        mbar_arrive_expect_tx(bar, T::kStageBytes);
        const bool k_inner = p.tma & kTmaKeyHeadInner, v_inner = p.tma & kTmaValueHeadInner;
#pragma unroll
        for (int u = 0; u < SUBS; ++u) {
#pragma unroll
          for (int h = 0; h < K_HALVES; ++h)
            tma_load_4d(dst + u * SUB_BYTES + h * 2048, &p.k_map, bar, 64 * h, k_inner ? kv_head : slot0[u],
                        k_inner ? slot0[u] : kv_head, page[u]);
#pragma unroll
          for (int h = 0; h < V_HALVES; ++h)
            tma_load_4d(dst + u * SUB_BYTES + (K_HALVES + h) * 2048, &p.v_map, bar, 64 * h,
                        v_inner ? kv_head : slot0[u], v_inner ? slot0[u] : kv_head, page[u]);
        }
      }
    } else if (PC_DECODE_TC_LEAN_COPY && whole_pages) {
      // One base per 16-key sub-chunk (its page and first slot), then per
      // key only the precomputed offsets. LPK is a multiple of 8, so
      // vector copy_r + LPK i of a row lands at (copy_r ^ swizzle) + LPK i.
      static_assert(!PC_DECODE_TC_LEAN_COPY || LPK % 8 == 0, "the lean copy takes whole-row copies (PC_DECODE_TC_ROWS)");
      const Raw* k_base[SUBS];
      const Raw* v_base[SUBS];
#pragma unroll
      for (int u = 0; u < SUBS; ++u) {
        const std::int32_t page = SUBS == 1 ? own_page : __shfl_sync(kFullMask, own_page, 16 * u);
        const std::int32_t token = first + 16 * u;
        const std::uint32_t page_no = fast_divide(static_cast<std::uint32_t>(token), p.block_magic, p.block_shift);
        const std::int64_t slot0 = token - static_cast<std::int64_t>(page_no) * kv.block_size;
        k_base[u] = key_base + (static_cast<std::int64_t>(page) * p.k_block_vecs + slot0 * p.k_slot_vecs);
        v_base[u] = value_base + (static_cast<std::int64_t>(page) * p.v_block_vecs + slot0 * p.v_slot_vecs);
      }
      const unsigned stage_addr = warp_pipe_addr + static_cast<unsigned>(stage * T::kStageBytes);
#pragma unroll
      for (int q = 0; q < GROUPS; ++q) {
        const int key = q * KPC + copy_key;
        const int u = (q * KPC) / 16;
        const bool valid = first + key < end;
        const unsigned k_dst = stage_addr + lean_dst[q];
        const unsigned v_dst = k_dst + static_cast<unsigned>(CHUNK * KV_VECS + key * (V_VECS - KV_VECS)) * 16;
#pragma unroll
        for (int i = 0; i < KV_VECS / LPK; ++i)
          cp_async_shared16(k_dst + LPK * i * 16, k_base[u] + lean_k[q] + LPK * i * kRawPer16, valid);
#pragma unroll
        for (int i = 0; i < V_VECS / LPK; ++i)
          cp_async_shared16(v_dst + LPK * i * 16, v_base[u] + lean_v[q] + LPK * i * kRawPer16, valid);
      }
    } else if (whole_pages) {
      std::int64_t k_sub[SUBS], v_sub[SUBS];  // row 0 of each 16-key sub-chunk
#pragma unroll
      for (int u = 0; u < SUBS; ++u) {
        const std::int32_t page = SUBS == 1 ? own_page : __shfl_sync(kFullMask, own_page, 16 * u);
        row_offsets(first + 16 * u, page, k_sub[u], v_sub[u]);
      }
#pragma unroll
      for (int q = 0; q < GROUPS; ++q) {
        const int key = q * KPC + copy_key;
        const int u = (q * KPC) / 16;  // KPC divides 16: a group lies in one sub-chunk
        const bool valid = first + key < end;
        copy_rows(stage, key, valid, valid ? k_sub[u] + (key % 16) * p.k_slot_vecs : 0,
                  valid ? v_sub[u] + (key % 16) * p.v_slot_vecs : 0);
      }
    } else {
#pragma unroll
      for (int q = 0; q < GROUPS; ++q) {
        const int key = q * KPC + copy_key;
        const std::int32_t token = first + key;
        const bool valid = token < end;
        const std::int32_t page = GROUPS == 1 ? own_page : __shfl_sync(kFullMask, own_page, key);
        std::int64_t k_off = 0, v_off = 0;  // in vectors
        if (valid) row_offsets(token, page, k_off, v_off);
        copy_rows(stage, key, valid, k_off, v_off);
      }
    }
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < my_chunks) issue(s, page_of(s));
    if constexpr (!kTma) cp_async_commit();
  }
  // PC_DECODE_TC_AHEAD: the page of the next chunk to copy, read one
  // iteration early so that the L2 round trip is off the warp's chain.
  std::int32_t next_page = PC_DECODE_TC_AHEAD ? page_of(STAGES - 1) : 0;

  // Q as the A operand, unscaled: rows 0-7 hold q rounded to the operand
  // type (hi), rows 8-15 what that rounding lost (lo, zero for a query
  // already in the operand type), so S = C[g] + C[g + 8] carries q to ~16
  // bits more than one rounding; the scale (scale * k_scale, * log2 e) is
  // applied to S in f32. (Pre-scaling q and rounding it once cost up to
  // 2^-9 of every logit: 1-2% errors at logits of 10-30, and LSE errors of
  // 0.1 on the suite's large-logit cases.)
  // q_frag[k][0] = dims 16k + 2t, +1 of head g; q_frag[k][2] = dims
  // 16k + 8 + 2t, +1; [1] and [3] their lo parts. Heads past the group are 0.
  // fp8: the k index of a step is permuted (the sum does not care) so that a
  // lane's four K bytes are contiguous: q_frag[k][2h] = dims 16k + 4t + 2h, +1.
  std::uint32_t q_frag[KSTEPS][4];  // {dims lo hi, dims lo lo, dims hi hi, dims hi lo}: the A operand
  {
    const std::int64_t q_row = p.query_start_loc[seq];
    const int heads_here = min(T::kHeadTile, p.gqa - head_tile * T::kHeadTile);
    const std::int64_t q_base = (q_row * p.q_heads + kv_head * p.gqa + head_tile * T::kHeadTile + g) * T::kHeadDim;
    const bool live = g < heads_here;
#pragma unroll
    for (int k = 0; k < KSTEPS; ++k) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int dim = FP8 ? 16 * k + 4 * t + 2 * half : 16 * k + 8 * half + 2 * t;
        const float x = live ? load_as_float(p.query_dtype, p.query, q_base + dim) : 0.0f;
        const float y = live ? load_as_float(p.query_dtype, p.query, q_base + dim + 1) : 0.0f;
        const std::uint32_t hi = pack2<F16>(x, y);
        const float2 kept = unpack2<F16>(hi);
        q_frag[k][2 * half] = hi;
        q_frag[k][2 * half + 1] = pack2<F16>(x - kept.x, y - kept.y);
      }
    }
  }

  float o[MTILES][4];
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[mt][e] = 0.0f;
  float m = -INFINITY;  // of head g, the same in the four lanes of a quad
  float l = 0.0f;       // this lane's share of head g's sum

  // ldmatrix row addresses: matrix lane / 8 = (key half, vector parity).
  const int ld_key = (lane / 16) * 8 + lane % 8;
  const int ld_vec = (lane / 8) % 2;
  const unsigned ld_row_k = static_cast<unsigned>(ld_key * KV_VECS) * 16;
  const unsigned ld_row_v = static_cast<unsigned>(CHUNK * KV_VECS + ld_key * V_VECS) * 16;
  const int ld_swizzle = ld_key % 8;
  // The address of 16-byte vector c of this lane's ldmatrix row (key ld_key
  // of sub-chunk u) in K's or V's part of a stage.
  auto k_vec = [&](unsigned stage_addr, int u, int c) -> unsigned {
    if constexpr (kTma)
      return stage_addr + static_cast<unsigned>(u * SUB_BYTES + (c >> 3) * 2048 + ld_key * 128 +
                                                ((c & 7) ^ ld_swizzle) * 16);
    else
      return stage_addr + ld_row_k + static_cast<unsigned>(u * 16 * KV_VECS * 16 + (c ^ ld_swizzle) * 16);
  };
  auto v_vec = [&](unsigned stage_addr, int u, int c) -> unsigned {
    if constexpr (kTma)
      return stage_addr + static_cast<unsigned>(u * SUB_BYTES + (K_HALVES + (c >> 3)) * 2048 + ld_key * 128 +
                                                ((c & 7) ^ ld_swizzle) * 16);
    else
      return stage_addr + ld_row_v + static_cast<unsigned>(u * 16 * V_VECS * 16 + (c ^ ld_swizzle) * 16);
  };

  for (int j = 0; j < my_chunks; ++j) {
    if (j + STAGES - 1 < my_chunks) issue(j + STAGES - 1, PC_DECODE_TC_AHEAD ? next_page : page_of(j + STAGES - 1));
    if constexpr (!kTma) cp_async_commit();
    if (PC_DECODE_TC_AHEAD) next_page = page_of(j + STAGES);
    const unsigned stage_addr = warp_pipe_addr + static_cast<unsigned>((j % STAGES) * T::kStageBytes);
    if constexpr (kTma) {
      mbar_wait(bar_of(j % STAGES), (j / STAGES) & 1);
      // The range's last chunk: V rows past its end are zeroed (their P is
      // zero, but a NaN or Inf in the pool would make P V NaN); K's are
      // masked to -inf. Generic writes, fenced before any later tensor copy
      // into the stage.
      const std::int32_t valid = end - chunk_first(j);
      if (valid < CHUNK) {
        constexpr int kRowPieces = V_HALVES * 8;
        for (int e = lane; e < (CHUNK - valid) * kRowPieces; e += 32) {
          const int key = valid + e / kRowPieces, piece = e % kRowPieces;
          const unsigned a = stage_addr + static_cast<unsigned>((key / 16) * SUB_BYTES +
                                                                (K_HALVES + piece / 8) * 2048 + (key % 16) * 128 +
                                                                (piece % 8) * 16);
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(a), "r"(0) : "memory");
        }
        fence_proxy_async();
      }
    } else {
      cp_async_wait<STAGES - 1>();
    }
    __syncwarp();

    // S = Q K^T over the chunk's keys: s[2u + n] is the 8-key tile n of the
    // 16-key sub-chunk u. One ldmatrix.x4 takes vectors 2v, 2v + 1 of keys
    // 0-7 and 8-15 of a sub-chunk: one k-step of 16 dims for 16-bit K, two
    // for fp8 (a lane's register then holds dims 4t .. 4t + 3 of key g of a
    // 16-dim step).
    // PC_DECODE_TC_SPLIT_S: two accumulator chains per 8-key tile (k-steps
    // alternating), summed after the loop: half the dependent HMMA chain.
    constexpr int CHAINS = PC_DECODE_TC_SPLIT_S ? 2 : 1;
    float sc[CHAINS][2 * SUBS][4];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
#pragma unroll
      for (int n = 0; n < 2 * SUBS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[c][n][e] = 0.0f;
#pragma unroll
    for (int u = 0; u < SUBS; ++u) {
#pragma unroll
      for (int v = 0; v < KV_VECS / 2; ++v) {
        std::uint32_t b[4];
        ldmatrix_x4(k_vec(stage_addr, u, 2 * v + ld_vec), b[0], b[1], b[2], b[3]);
        if constexpr (FP8) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int k = 2 * v + h;
            mma16816<F16>(sc[k % CHAINS][2 * u], q_frag[k], widen2(b[h]), widen2(b[h] >> 16));
            mma16816<F16>(sc[k % CHAINS][2 * u + 1], q_frag[k], widen2(b[2 + h]), widen2(b[2 + h] >> 16));
          }
        } else {
          mma16816<F16>(sc[v % CHAINS][2 * u], q_frag[v], b[0], b[1]);
          mma16816<F16>(sc[v % CHAINS][2 * u + 1], q_frag[v], b[2], b[3]);
        }
      }
    }

    // Online softmax for head g over keys 8n + 2t + e (n over the 8-key
    // tiles of the chunk): one max, one rescale of o per chunk.
    const std::int32_t chunk_begin = chunk_first(j);
    float x[4 * SUBS];
#pragma unroll
    for (int n = 0; n < 2 * SUBS; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        // Row g (q hi) + row g + 8 (q lo) of the tile, then the scale.
        float v = CHAINS == 2 ? (sc[0][n][e] + sc[0][n][2 + e]) + (sc[CHAINS - 1][n][e] + sc[CHAINS - 1][n][2 + e])
                              : sc[0][n][e] + sc[0][n][2 + e];
        v *= p.q_multiplier;
        if (p.softcap > 0.0f) v = p.softcap * tanhf(v * p.inv_softcap) * kLog2e;
        x[2 * n + e] = chunk_begin + 8 * n + 2 * t + e < end ? v : -INFINITY;
      }
    float mx = x[0];
#pragma unroll
    for (int i = 1; i < 4 * SUBS; ++i) mx = fmaxf(mx, x[i]);
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float factor = fast_exp2(m - m_use);
    float pr[4 * SUBS];
#pragma unroll
    for (int i = 0; i < 4 * SUBS; ++i) pr[i] = fast_exp2(x[i] - m_use);
    float psum = 0.0f;
#pragma unroll
    for (int i = 0; i < 4 * SUBS; i += 2) psum += pr[i] + pr[i + 1];
    l = l * factor + psum;
    m = m_new;
    std::uint32_t p_b0[SUBS], p_b1[SUBS];
#pragma unroll
    for (int u = 0; u < SUBS; ++u) {
      p_b0[u] = pack2<F16>(pr[4 * u], pr[4 * u + 1]);      // keys 16u + 2t, + 1
      p_b1[u] = pack2<F16>(pr[4 * u + 2], pr[4 * u + 3]);  // keys 16u + 8 + 2t, + 1
    }

    // O^T's columns are heads 2t and 2t + 1: their factors live in quads 2t, 2t + 1.
    const float f0 = __shfl_sync(kFullMask, factor, 8 * t);
    const float f1 = __shfl_sync(kFullMask, factor, 8 * t + 4);
#pragma unroll
    for (int mt = 0; mt < MTILES; ++mt) {
      o[mt][0] *= f0;
      o[mt][1] *= f1;
      o[mt][2] *= f0;
      o[mt][3] *= f1;
    }
    // 16-bit V: one ldmatrix.x4.trans per m-tile (16 dims). fp8 V: one per two
    // m-tiles; the transposed b16 pairs are bytes (key 2t: dims 2g, 2g + 1;
    // key 2t + 1: the same), so m-tile row g is dim 2g, row g + 8 dim 2g + 1.
#pragma unroll
    for (int u = 0; u < SUBS; ++u) {
#pragma unroll
      for (int v = 0; v < V_VECS / 2; ++v) {
        std::uint32_t a[4];
        ldmatrix_x4_trans(v_vec(stage_addr, u, 2 * v + ld_vec), a[0], a[1], a[2], a[3]);
        if constexpr (FP8) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const std::uint32_t lo_keys = __byte_perm(a[h], 0, 0x3120);      // keys 2t, 2t + 1
            const std::uint32_t hi_keys = __byte_perm(a[2 + h], 0, 0x3120);  // keys 8 + 2t, 8 + 2t + 1
            const std::uint32_t v_frag[4] = {widen2(lo_keys), widen2(lo_keys >> 16), widen2(hi_keys),
                                             widen2(hi_keys >> 16)};
            mma16816<F16>(o[2 * v + h], v_frag, p_b0[u], p_b1[u]);
          }
        } else {
          mma16816<F16>(o[v], a, p_b0[u], p_b1[u]);
        }
      }
    }
    __syncwarp();  // the next issue overwrites this stage
  }
  if constexpr (!kTma) cp_async_wait<0>();
  l += __shfl_xor_sync(kFullMask, l, 1);
  l += __shfl_xor_sync(kFullMask, l, 2);

  // Per-warp states to shared memory (reusing the drained pipelines).
  __syncthreads();
  if constexpr (kTma) {  // every phase completed: the barriers may be initialised anew by a later call
    if (lane == 0)
#pragma unroll
      for (int s = 0; s < STAGES; ++s) mbar_inval(bar_of(s));
  }
  constexpr int kRow = T::kVHeadDim + 2;
  float* merged = reinterpret_cast<float*>(smem);  // [warp][head][2 + DV]
  float* warp_rows = merged + warp * T::kHeadTile * kRow;
  if (t == 0) {
    warp_rows[g * kRow] = m;
    warp_rows[g * kRow + 1] = l;
  }
  // O^T row g of m-tile mt is dim 16 mt + g (row g + 8: + 8); fp8: 16 mt + 2g (+ 1).
  const int d_lo = FP8 ? 2 * g : g;
  const int d_hi = FP8 ? 2 * g + 1 : g + 8;
#pragma unroll
  for (int mt = 0; mt < MTILES; ++mt) {
    warp_rows[(2 * t) * kRow + 2 + 16 * mt + d_lo] = o[mt][0];
    warp_rows[(2 * t + 1) * kRow + 2 + 16 * mt + d_lo] = o[mt][1];
    warp_rows[(2 * t) * kRow + 2 + 16 * mt + d_hi] = o[mt][2];
    warp_rows[(2 * t + 1) * kRow + 2 + 16 * mt + d_hi] = o[mt][3];
  }
  __syncthreads();
  return merged;
}

// The attention loop the traits select: tensor cores or CUDA cores.
// kAllowTma (the direct kernel, auto's kernel): the tensor-copy form of the
// tensor-core loop where the launch set DecodeParams::tma, the caller says
// tma_ok (auto: a whole sequence, not a partition) and the range starts on
// a 16-key boundary (a window's start may not).
template <class T, bool kAllowTma = false>
__device__ __forceinline__ const float* attend(const DecodeParams& p, std::int64_t seq, int kv_head, int head_tile,
                                               std::int32_t begin, std::int32_t end, unsigned char* smem,
                                               bool tma_ok = true) {
  if constexpr (T::kTensorCore) {
    if constexpr (kAllowTma && T::kTmaCapable) {
      if (tma_ok && p.tma != 0 && begin % 16 == 0)
        return attend_range_tc<T, true>(p, seq, kv_head, head_tile, begin, end, smem);
    }
    return attend_range_tc<T>(p, seq, kv_head, head_tile, begin, end, smem);
  } else {
    return attend_range<T>(p, seq, kv_head, head_tile, begin, end, smem);
  }
}

// Tensor copies for the loop of the direct kernel and of auto's whole
// sequences (DecodeParams::tma, host side): on a
// compute capability 9.0 device, for 16-bit caches (T::kTmaCapable) whose
// pages hold 16n slots, under PAGECHECK_DECODE_TMA=1. Off by default until
// a device call has checked and timed them (session 20 built them with no
// device time left; docs/performance.md). A pool the encoder refuses
// (strides or base not 16-byte aligned, sizes past its limits) keeps
// cp.async.
inline bool decode_tma_allowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("PAGECHECK_DECODE_TMA");
    if (env == nullptr || std::strcmp(env, "1") != 0) return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major == 9;
  }();
  return allowed;
}

template <class T>
constexpr bool tma_capable() {
  if constexpr (T::kTensorCore)
    return T::kTmaCapable;
  else
    return false;
}

template <class T>
void set_decode_tma(const DeviceCaseView& view, DecodeParams& p) {
  p.tma = 0;
  if constexpr (tma_capable<T>()) {
    const PagedKvView& kv = view.kv;
    if (kv.block_size % 16 != 0 || kv.num_blocks < 1 || !decode_tma_allowed()) return;
    const bool f16 = T::kKvDtype == DType::F16;
    const bool k_inner = kv.key_strides.head < kv.key_strides.slot;
    const bool v_inner = kv.value_strides.head < kv.value_strides.slot;
    if (!make_kv_map(p.k_map, f16, kv.key_data, T::kHeadDim, kv.block_size, kv.kv_heads, kv.num_blocks,
                     kv.key_strides.slot, kv.key_strides.head, kv.key_strides.block, 16, k_inner)
             .ok() ||
        !make_kv_map(p.v_map, f16, kv.value_data, T::kVHeadDim, kv.block_size, kv.kv_heads, kv.num_blocks,
                     kv.value_strides.slot, kv.value_strides.head, kv.value_strides.block, 16, v_inner)
             .ok())
      return;
    p.tma = kTmaOn | (k_inner ? kTmaKeyHeadInner : 0) | (v_inner ? kTmaValueHeadInner : 0);
  } else {
    (void)view;
  }
}

// ---- which loop a launch runs ------------------------------------------------------
// The tensor-core loop is the default where it applies (round 2 measured it
// 1-6% faster than the CUDA-core loop on every decode bench shape:
// docs/performance.md). PAGECHECK_DECODE_KERNEL=simt forces the CUDA-core
// loop everywhere (A/B runs, a suspected tensor-core bug); unset, empty or
// "mma": tensor cores where they apply (app/main.cpp rejects other values).
inline bool decode_tensor_cores_allowed() {
  const char* choice = std::getenv("PAGECHECK_DECODE_KERNEL");
  return choice == nullptr || std::strcmp(choice, "simt") != 0;
}
// Tensor cores take BF16/F16 K/V at every built head dim, and fp8 K/V at head
// dims 128 and 256 (rows of a multiple of 8 16-byte vectors) when every cache
// stride is a multiple of 16 elements and the caches are 16-byte aligned;
// never ALiBi (issue 23: the CUDA-core loop's DecodeAlibiTraits take it).
inline bool decode_uses_tensor_cores(const DeviceCaseView& view) {
  if (!decode_tensor_cores_allowed() || view.alibi_slopes != nullptr) return false;
  const DType kv = view.kv_dtype;
  const std::int64_t dk = view.kv.head_dim, dv = view.kv.v_head_dim;
  if (!head_dims_tensor_core(dk, dv)) return false;  // issue 23's head sizes: the CUDA-core loop
  if (kv == DType::BF16 || kv == DType::F16) return true;
  if (kv != DType::F8_E4M3 && kv != DType::F8_E5M2) return false;
  if (!(dk == dv && (dk == 128 || dk == 256))) return false;
  for (const CacheStrides* st : {&view.kv.key_strides, &view.kv.value_strides})
    if (st->block % 16 || st->slot % 16 || st->head % 16) return false;
  return reinterpret_cast<std::uintptr_t>(view.kv.key_data) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(view.kv.value_data) % 16 == 0;
}
// Latent (MLA) caches on a compute capability 9.0 device: the wgmma kernel
// of decode_mla_sm90.cu (BF16/F16 with a query of that dtype; the other
// latent cases run the CUDA-core loop), unless PAGECHECK_DECODE_KERNEL=simt.
inline bool decode_uses_mla_sm90(const DeviceCaseView& view) {
#ifdef PAGECHECK_HAVE_SM90A
  return decode_tensor_cores_allowed() && mla_sm90_supports(view) && mla_sm90_available();
#else
  (void)view;
  return false;
#endif
}

// dispatch_decode() for the view, with the tensor-core traits where
// decode_uses_tensor_cores() says so, the ALiBi traits for an ALiBi case.
template <class F>
Status dispatch_decode_loop(const DeviceCaseView& view, F&& f) {
  const std::int64_t dk = view.kv.head_dim, dv = view.kv.v_head_dim;
  if (view.alibi_slopes != nullptr) return dispatch_decode<DecodeAlibiTraits>(view.kv_dtype, dk, dv, f);
  if (decode_uses_tensor_cores(view)) {
#ifdef PC_DECODE_SWEEP_ONLY
    if (view.kv_dtype == DType::BF16 && dk == 128 && dv == 128) return f(DecodeTcTraits<DType::BF16, 128, 128>{});
    return invalid_input("PC_DECODE_SWEEP_ONLY build: BF16 head dim 128 only", "decode");
#else
    switch (view.kv_dtype) {
      case DType::BF16: return dispatch_dims<DType::BF16, DecodeTcTraits>(dk, dv, f);
      case DType::F16: return dispatch_dims<DType::F16, DecodeTcTraits>(dk, dv, f);
      case DType::F8_E4M3: return dispatch_dims<DType::F8_E4M3, DecodeTcTraits>(dk, dv, f);
      default: return dispatch_dims<DType::F8_E5M2, DecodeTcTraits>(dk, dv, f);
    }
#endif
  }
  return dispatch_decode(view.kv_dtype, dk, dv, f);
}

}  // namespace pagecheck::gpu::decode
