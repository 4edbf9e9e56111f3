// attn_sm90_ws: the warp-specialised Hopper prefill / FMHA kernel (sm_90a).
//
//   attn_ws_kernel<WsTraits<KV, CONTIG>>
//       KV BF16 / F16 (wgmma operands as stored); CONTIG: K/V from the
//       gather's contiguous workspace (fmha) instead of pages (prefill).
//       Head dim 128 for K and V. Pages: block sizes 8, 16, 32, 64, 128, 256
//       (whole TMA boxes per page); every other case runs attn_sm90.cu's
//       kernel or the portable one (sm90_ws_supports says which).
//
// Roles (384 threads, one CTA per SM, one CTA per (query tile of 128 rows,
// sequence, KV head), heaviest tiles first; rows are (token, GQA head) pairs
// as in prefill_common.cuh):
// - Producer warpgroup (warps 8-11, setmaxnreg 24): warp 8 alone works.
//   Lane b reads the page of box b of the next tile from the table a tile
//   ahead; lane 0 issues the tile's K, then V, as tensor copies
//   (cp.async.bulk.tensor, 4-D maps over (dim, slot, head, block), boxes of
//   64 dims x min(block, 128) slots, 128-byte swizzle: exactly the layout
//   the wgmma descriptors read), completing on the stage's full mbarrier
//   with its byte count. A box with a key outside [key_lo, key_hi) (the
//   sequence's first and last tiles only) is copied row by row by the
//   warp's lanes with 16-byte cp.async, invalid rows zero-filled (slots
//   past seq_len may hold NaN, and P = 0 times NaN would poison O), then
//   fenced for the async proxy before lane 0 arrives.
// - Two consumer warpgroups of 64 query rows (setmaxnreg 240), each:
//   S_j = Q K_j^T (wgmma SS) is issued before P_{j-1} V_{j-1} (wgmma RS),
//   both in flight together; the softmax of S_j runs while P_{j-1} V_{j-1}
//   is still on the tensor cores (FlashAttention-3's intra-warpgroup
//   overlap); O is rescaled once that GEMM is done.
// - Ping-pong: each warpgroup issues its GEMMs of an iteration only on its
//   turn (named barrier kTurnBar + wg, 256 threads: the other warpgroup
//   arrives on it once it has issued its own), so one warpgroup's softmax
//   runs under the other's GEMMs. Warpgroup 1 arrives first, at the start,
//   and skips its arrival after its last issue, so every barrier balances.
//
// Pipeline: kStages stages of K and of V; barriers per stage k_full, v_full
// (one producer arrival with the transaction bytes), k_empty, v_empty (one
// arrival per consumer warp, 8). Stage of tile i: i % kStages, phase parity
// (i / kStages) & 1.
//
// Every length and table entry is read from device memory; the grid and the
// tensor maps depend only on capacity fields, so captured launches replay
// after tables and lengths change.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <string>

#include "attn_sm90.cuh"
#include "cuda_check.cuh"
#include "sm90_primitives.cuh"

namespace pagecheck::gpu::attn {
namespace {

template <KvKind KV_, bool CONTIG_>
struct WsTraits {
  static constexpr int DK = 128;
  static constexpr int DV = 128;
  static constexpr KvKind KV = KV_;
  static constexpr bool CONTIG = CONTIG_;
  static constexpr bool kF16 = KV == KvKind::F16;  // operand type: F16, else BF16
  static constexpr int kThreads = 384;             // producer warpgroup + two consumer warpgroups
  static constexpr int kBlockM = 128;              // query rows per CTA, 64 per consumer warpgroup
  static constexpr int kBlockN = 128;              // keys per tile
  static constexpr int kStages = 2;
  static constexpr int kChunks = DK / 8;           // 16-byte chunks of a row
  static constexpr int kQBytes = kBlockM * DK * 2;
  static constexpr int kTileBytes = kBlockN * DK * 2;  // one K or V tile
  static constexpr int kBarrierBytes = 4 * kStages * 8;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  // +1024: the dynamic shared memory base is aligned up to the swizzle atom.
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + kBarrierBytes;
  static constexpr int kSplitQueryBytes = kQBytes + 1024;  // a split query's lo tile, 1024-aligned
  static_assert(kSmemBytes + kSplitQueryBytes <= 227 * 1024, "shared memory over the sm_90 limit");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * 384,
                "setmaxnreg budgets exceed the registers the CTA is launched with");
};

// Named barriers: 0 is __syncthreads; 1, 2: a consumer warpgroup's own Q
// load; 3, 4: warpgroup 0's and 1's turn to issue GEMMs.
constexpr int kQBar = 1;
constexpr int kTurnBar = 3;

struct WsParams {
  CUtensorMap key_map;    // (dim, slot, head, block) over the key cache (or the contiguous K)
  CUtensorMap value_map;  // same over V
  AttnParams a;
  std::int32_t box_rows = 0;       // slots per tensor-copy box: min(block_size, 128), 128 contiguous
  std::int32_t boxes_per_tile = 0; // kBlockN / box_rows
  std::int32_t head_inner = 0;     // the maps order (dim, head, slot, block): head stride < slot stride
};

// ---- producer -------------------------------------------------------------------

// One K or V tile of key tile `kt` into `tile` (kBlockN rows x 128 dims, two
// column halves of 128-byte swizzled rows): whole boxes by tensor copy, edge
// boxes row by row. `pages` holds lane b's page of box b (lanes past the
// boxes: unused). Lane 0 arrives on `full` with the copied bytes.
template <class T, bool kValue>
__device__ __forceinline__ void produce_tile(const WsParams& p, std::uint32_t tile, std::uint32_t full, int kt,
                                             std::int32_t page, std::int64_t seq, int kv_head, int key_lo,
                                             int key_hi, int lane) {
  const void* map = kValue ? static_cast<const void*>(&p.value_map) : static_cast<const void*>(&p.key_map);
  const int key0 = kt * T::kBlockN;
  const int box_rows = p.box_rows;
  const bool edge = key0 < key_lo || key0 + T::kBlockN > key_hi;
  std::uint32_t edge_boxes = 0;  // bit b: box b is copied row by row
  if (edge) {
    for (int b = 0; b < p.boxes_per_tile; ++b) {
      const int k0 = key0 + b * box_rows;
      if (k0 < key_lo || k0 + box_rows > key_hi) edge_boxes |= 1u << b;
    }
    // Rows of edge boxes: lanes 0-15 take the 16 chunks of one row, 16-31
    // those of the next.
    const char* base = static_cast<const char*>(
        kValue ? (T::CONTIG ? p.a.contig_value : p.a.view.kv.value_data)
               : (T::CONTIG ? p.a.contig_key : p.a.view.kv.key_data));
    const CacheStrides& st = kValue ? p.a.view.kv.value_strides : p.a.view.kv.key_strides;
    for (int b = 0; b < p.boxes_per_tile; ++b) {
      if (!(edge_boxes & (1u << b))) continue;
      const std::int64_t box_page = __shfl_sync(0xffffffffu, page, b);
      for (int r = lane / 16; r < box_rows; r += 2) {
        const int row = b * box_rows + r, key = key0 + row, chunk = lane % 16;
        const bool valid = key >= key_lo && key < key_hi;
        std::int64_t offset = 0;
        if constexpr (T::CONTIG) {
          offset = ((seq * p.a.contig_capacity + key) * p.a.view.kv.kv_heads + kv_head) * T::DK;
        } else {
          const int slot = T::CONTIG ? 0 : key % p.a.view.kv.block_size;
          offset = box_page * st.block + slot * st.slot + kv_head * st.head;
        }
        const std::uint32_t dst = tile + (chunk >> 3) * (T::kBlockN * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
        cp_async16(dst, valid ? base + (offset + chunk * 8) * 2 : base, valid);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    __syncwarp();
  }
  // Whole boxes: lane 0 announces the bytes, then copies.
  const int whole = p.boxes_per_tile - __popc(edge_boxes);
  if (lane == 0) mbar_arrive_expect_tx(full, static_cast<std::uint32_t>(whole * box_rows * 256));
  for (int b = 0; b < p.boxes_per_tile; ++b) {
    const std::int32_t box_page = __shfl_sync(0xffffffffu, page, b);
    if (lane != 0 || (edge_boxes & (1u << b))) continue;
    const int k0 = key0 + b * box_rows;
    int slot, block;
    if constexpr (T::CONTIG) {
      slot = k0;
      block = static_cast<int>(seq);
    } else {
      slot = k0 % p.a.view.kv.block_size;
      block = box_page;
    }
    const std::uint32_t dst = tile + b * box_rows * 128;
    const int c1 = p.head_inner ? kv_head : slot, c2 = p.head_inner ? slot : kv_head;
    tma_load_4d(dst, map, full, 0, c1, c2, block);
    tma_load_4d(dst + T::kBlockN * 128, map, full, 64, c1, c2, block);
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) attn_ws_kernel(const __grid_constant__ WsParams p) {
#ifdef PAGECHECK_SM90A_DEVICE
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, DK = T::DK;
  constexpr int kDBlocks = T::DV / 8;  // n8 blocks of O
  const DeviceCaseView& view = p.a.view;

  const std::int64_t work = blockIdx.x;
  const std::int64_t num_seqs = view.kv.num_seqs;
  const int kv_heads = view.kv.kv_heads;
  const std::int64_t seq = work % num_seqs;
  const int kv_head = static_cast<int>((work / num_seqs) % kv_heads);
  const int tile = p.a.tiles_per_seq - 1 - static_cast<int>(work / (num_seqs * kv_heads));

  const int group = p.a.group;
  const std::int64_t q_begin = view.query_start_loc[seq];
  const std::int64_t q_end = view.query_start_loc[seq + 1];
  const int seq_len = view.kv.seq_lens[seq];
  const int q_len = static_cast<int>(q_end - q_begin);
  const int rows_total = q_len * group;
  const int row0 = tile * kBlockM;
  if (row0 >= rows_total) return;

  const int pos0 = seq_len - q_len;
  const int last_row = min(row0 + kBlockM, rows_total) - 1;
  const int min_pos = pos0 + row0 / group;
  const int max_pos = pos0 + last_row / group;
  const bool causal = view.causal;
  const std::int64_t window = view.window;
  int key_lo = 0, key_hi = seq_len;
  if (causal) key_hi = max(0, min(seq_len, max_pos + 1));
  if (window > 0) key_lo = static_cast<int>(max(static_cast<std::int64_t>(0), min_pos - window + 1));
  key_lo = min(key_lo, key_hi);
  const int tile_first = key_lo / kBlockN;
  const int num_tiles = (key_hi + kBlockN - 1) / kBlockN - tile_first;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t raw_base = smem_u32(smem_raw);
  const std::uint32_t q_smem = (raw_base + 1023u) & ~1023u;
  const std::uint32_t k_smem = q_smem + T::kQBytes;                    // [stage] K tiles
  const std::uint32_t v_smem = k_smem + T::kStages * T::kTileBytes;    // [stage] V tiles
  const std::uint32_t bars = v_smem + T::kStages * T::kTileBytes;
  const bool split_q = p.a.split_query != 0;
  const std::uint32_t q_lo_smem = (bars + T::kBarrierBytes + 1023u) & ~1023u;
  const auto k_full = [&](int s) { return bars + 8 * s; };
  const auto v_full = [&](int s) { return bars + 8 * (T::kStages + s); };
  const auto k_empty = [&](int s) { return bars + 8 * (2 * T::kStages + s); };
  const auto v_empty = [&](int s) { return bars + 8 * (3 * T::kStages + s); };
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), 8);  // one arrival per consumer warp
      mbar_init(v_empty(s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp >= 8) {
    // ---- producer ----------------------------------------------------------------
    setmaxnreg_dec<T::kProducerRegs>();
    if (warp != 8) return;
    prefetch_tensor_map(&p.key_map);
    prefetch_tensor_map(&p.value_map);
    const std::int64_t table_begin = T::CONTIG ? 0 : view.kv.page_indptr[seq];
    // Lane b: the page of box b of tile kt (0 where the box has no key in
    // [key_lo, key_hi): its entry may not exist).
    const auto load_page = [&](int kt) -> std::int32_t {
      if (T::CONTIG || lane >= p.boxes_per_tile) return 0;
      const int k0 = kt * kBlockN + lane * p.box_rows;
      if (k0 >= key_hi || k0 + p.box_rows <= key_lo) return 0;
      return ld_global_nc(view.kv.page_indices + table_begin + k0 / view.kv.block_size);
    };
    std::int32_t next_page = num_tiles > 0 ? load_page(tile_first) : 0;
    for (int i = 0; i < num_tiles; ++i) {
      const int kt = tile_first + i, s = i % T::kStages;
      const int parity = ((i / T::kStages) & 1) ^ 1;
      const std::int32_t page = next_page;
      if (i + 1 < num_tiles) next_page = load_page(kt + 1);  // a tile ahead
      if (i >= T::kStages) mbar_wait(k_empty(s), parity);
      produce_tile<T, false>(p, k_smem + s * T::kTileBytes, k_full(s), kt, page, seq, kv_head, key_lo, key_hi, lane);
      if (i >= T::kStages) mbar_wait(v_empty(s), parity);
      produce_tile<T, true>(p, v_smem + s * T::kTileBytes, v_full(s), kt, page, seq, kv_head, key_lo, key_hi, lane);
    }
    return;
  }

  // ---- consumer warpgroups ----------------------------------------------------------
  setmaxnreg_inc<T::kConsumerRegs>();
  const int wg = threadIdx.x / 128;  // 0 or 1: query rows 64 wg .. 64 wg + 63
  const int wg_thread = threadIdx.x % 128;
  const int warp_in_wg = warp % 4;
  const int g = lane / 4, t = lane % 4;
  const int wg_row = wg * 64 + warp_in_wg * 16;  // first row of this warp inside the tile

  // This warpgroup's 64 Q rows -> smem (operand type); rows past the
  // sequence's query are zeros.
  {
    const DType qdt = view.query_dtype;
    const bool direct_copy = (qdt == DType::BF16 && !T::kF16) || (qdt == DType::F16 && T::kF16);
    const int qsize = qdt == DType::F32 ? 4 : 2;
#pragma unroll 2
    for (int i = wg_thread; i < 64 * T::kChunks; i += 128) {
      const int r = wg * 64 + i / T::kChunks, chunk = i % T::kChunks;
      const int row = row0 + r;
      const bool valid = row < rows_total;
      const std::int64_t token = q_begin + row / group;
      const int head = kv_head * group + row % group;
      const char* src = static_cast<const char*>(view.query) +
                        ((token * view.q_heads + head) * DK + chunk * 8) * static_cast<std::int64_t>(qsize);
      const std::uint32_t dst = q_smem + sw128<kBlockM>(r, chunk);
      if (direct_copy) {
        cp_async16(dst, valid ? src : static_cast<const char*>(view.query), valid);
      } else {
        float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (valid) load8_as_float(qdt, src, f);
        if (split_q) {
          uint4 hi, lo;
          split8<T::kF16>(f, hi, lo);
          st_shared16(dst, hi);
          st_shared16(dst - q_smem + q_lo_smem, lo);
        } else {
          st_shared16(dst, pack8<T::kF16>(f));
        }
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    named_sync(kQBar + wg, 128);  // this warpgroup's Q rows are in
  }

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const bool has_softcap = p.a.softcap_out != 0.f;
  const float exp_scale = has_softcap ? 1.f : p.a.logit_mul;
  const std::uint32_t q_wg = q_smem + wg * 64 * 128;  // this warpgroup's 64 rows (8 atoms)
  const std::uint32_t q_lo_wg = q_lo_smem + wg * 64 * 128;

  const auto turn_sync = [&] { named_sync(kTurnBar + wg, 256); };
  const auto turn_pass = [&] { named_arrive(kTurnBar + (wg ^ 1), 256); };
  const auto issue_s = [&](float (&sacc)[64], std::uint32_t ks) {
#pragma unroll
    for (int kk = 0; kk < DK / 16; ++kk) {
      const std::uint64_t da = smem_desc(q_wg + (kk >> 2) * (kBlockM * 128) + (kk & 3) * 32, 16, 1024);
      const std::uint64_t db = smem_desc(ks + (kk >> 2) * (kBlockN * 128) + (kk & 3) * 32, 16, 1024);
      wgmma_ss<T::kF16>(sacc, da, db, kk > 0);
    }
    if (split_q) {  // S += Q_lo K^T
#pragma unroll
      for (int kk = 0; kk < DK / 16; ++kk) {
        const std::uint64_t da = smem_desc(q_lo_wg + (kk >> 2) * (kBlockM * 128) + (kk & 3) * 32, 16, 1024);
        const std::uint64_t db = smem_desc(ks + (kk >> 2) * (kBlockN * 128) + (kk & 3) * 32, 16, 1024);
        wgmma_ss<T::kF16>(sacc, da, db, true);
      }
    }
  };
  // O += P V: 8 k-steps of 16 keys; V is MN-major (dims contiguous):
  // leading byte offset = the second 64-dim column half, stride = 8 keys.
  const auto issue_pv = [&](const std::uint32_t (&pa)[kBlockN / 16][4], std::uint32_t vs) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const std::uint64_t dv = smem_desc(vs + kk * 16 * 128, kBlockN * 128, 1024);
      wgmma_rs<T::kF16>(o, pa[kk], dv);
    }
  };
  const auto release = [&](std::uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  // Masks S of key tile kt, then turns it into P (in place, unnormalised,
  // base 2) and updates m and l; returns the rescale factors of O.
  const auto softmax = [&](float (&sacc)[64], int kt, float (&alphas)[2]) {
    if (has_softcap) {
#pragma unroll
      for (int e = 0; e < 64; ++e) sacc[e] = p.a.softcap_out * tanhf(sacc[e] * p.a.logit_mul);
    }
    const int n0 = kt * kBlockN;
    const bool need_mask = n0 + kBlockN > key_hi || n0 < key_lo || (causal && n0 + kBlockN - 1 > min_pos) ||
                           (window > 0 && n0 <= max_pos - window);
    if (need_mask) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int pos = pos0 + (row0 + wg_row + g + 8 * h) / group;
        const int vis_hi = min(key_hi, causal ? pos + 1 : key_hi);
        const int vis_lo =
            window > 0 ? static_cast<int>(max(static_cast<std::int64_t>(key_lo), pos - window + 1)) : key_lo;
#pragma unroll
        for (int nb = 0; nb < 16; ++nb)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = n0 + nb * 8 + 2 * t + e;
            if (key < vis_lo || key >= vis_hi) sacc[nb * 4 + 2 * h + e] = -INFINITY;
          }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = fmaxf(m[h], row_max(sacc, h) * exp_scale);
      const float ref = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet
      const float alpha = fast_exp2(m[h] - ref);
      m[h] = m_new;
      float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
      for (int nb = 0; nb < 16; ++nb) {
        sacc[nb * 4 + 2 * h] = fast_exp2(fmaf(sacc[nb * 4 + 2 * h], exp_scale, -ref));
        sacc[nb * 4 + 2 * h + 1] = fast_exp2(fmaf(sacc[nb * 4 + 2 * h + 1], exp_scale, -ref));
        sum_a += sacc[nb * 4 + 2 * h];
        sum_b += sacc[nb * 4 + 2 * h + 1];
      }
      l[h] = l[h] * alpha + (sum_a + sum_b);
      alphas[h] = alpha;
    }
  };
  // P (registers, operand type) in the A-fragment layout: k-step kk holds
  // keys 16 kk .. 16 kk + 15, i.e. S's n8 blocks 2 kk and 2 kk + 1.
  const auto to_operand = [&](const float (&sacc)[64], std::uint32_t (&pa)[kBlockN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      pa[kk][0] = pack2<T::kF16>(sacc[8 * kk + 0], sacc[8 * kk + 1]);
      pa[kk][1] = pack2<T::kF16>(sacc[8 * kk + 2], sacc[8 * kk + 3]);
      pa[kk][2] = pack2<T::kF16>(sacc[8 * kk + 4], sacc[8 * kk + 5]);
      pa[kk][3] = pack2<T::kF16>(sacc[8 * kk + 6], sacc[8 * kk + 7]);
    }
  };

  if (num_tiles > 0) {
    if (wg == 1) turn_pass();  // warpgroup 0 issues first
    std::uint32_t pa[kBlockN / 16][4];
    float sacc[64];
    float alphas[2];
    // Tile 0: S alone.
    mbar_wait(k_full(0), 0);
    turn_sync();
    wgmma_fence();
    issue_s(sacc, k_smem);
    wgmma_commit();
    turn_pass();  // P V of the last tile is issued after this
    wgmma_wait<0>();
    fence_regs(sacc);
    release(k_empty(0));
    softmax(sacc, tile_first, alphas);
    to_operand(sacc, pa);
    for (int i = 1; i < num_tiles; ++i) {
      const int s = i % T::kStages, sp = (i - 1) % T::kStages;
      mbar_wait(k_full(s), (i / T::kStages) & 1);
      turn_sync();
      wgmma_fence();
      issue_s(sacc, k_smem + s * T::kTileBytes);
      wgmma_commit();
      mbar_wait(v_full(sp), ((i - 1) / T::kStages) & 1);
      issue_pv(pa, v_smem + sp * T::kTileBytes);
      wgmma_commit();
      turn_pass();
      wgmma_wait<1>();  // S_i done, P_{i-1} V_{i-1} may still run
      fence_regs(sacc);
      release(k_empty(s));
      softmax(sacc, tile_first + i, alphas);
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(sacc);
      fence_regs_u(pa);
      release(v_empty(sp));
      if (__any_sync(0xffffffffu, alphas[0] != 1.f || alphas[1] != 1.f)) {
#pragma unroll
        for (int d = 0; d < kDBlocks; ++d) {
          o[d * 4 + 0] *= alphas[0];
          o[d * 4 + 1] *= alphas[0];
          o[d * 4 + 2] *= alphas[1];
          o[d * 4 + 3] *= alphas[1];
        }
      }
      to_operand(sacc, pa);
    }
    // P V of the last tile.
    {
      const int sp = (num_tiles - 1) % T::kStages;
      mbar_wait(v_full(sp), ((num_tiles - 1) / T::kStages) & 1);
      turn_sync();
      wgmma_fence();
      issue_pv(pa, v_smem + sp * T::kTileBytes);
      wgmma_commit();
      if (wg == 0) turn_pass();  // warpgroup 1's last issue: nobody waits for a pass
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs_u(pa);
      release(v_empty(sp));
    }
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row0 + wg_row + g + 8 * h;
    if (row >= rows_total) continue;
    const float inv = sum > 0.f ? p.a.out_scale / sum : 0.f;
    const std::int64_t token = q_begin + row / group;
    const int head = kv_head * group + row % group;
    const std::int64_t out_row = (token * view.q_heads + head) * T::DV;
#pragma unroll
    for (int d = 0; d < kDBlocks; ++d)
      store2(view.output_dtype, view.output, out_row + d * 8 + 2 * t, o[d * 4 + 2 * h] * inv,
             o[d * 4 + 2 * h + 1] * inv);
    if (view.lse != nullptr && t == 0)
      view.lse[token * view.q_heads + head] = sum > 0.f ? (m[h] + log2f(sum)) * 0.6931471805599453f : -INFINITY;
  }
#endif  // PAGECHECK_SM90A_DEVICE
}

// ---- launcher -------------------------------------------------------------------

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver, looked up once (the runtime is
// linked statically; libcuda is only reached through the driver entry point).
EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
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

// A 4-D map of 16-bit elements over (dim, slot, head, block), or (dim,
// head, slot, block) when `head_inner` (strides ascending either way), with
// the given element strides; boxes of 64 dims x box_rows slots x 1 head x 1
// block, 128-byte swizzle: box rows land 128 bytes apart in either order.
Status make_map(CUtensorMap& map, bool f16, const void* base, std::int64_t slots, std::int64_t heads,
                std::int64_t blocks, std::int64_t slot_stride, std::int64_t head_stride, std::int64_t block_stride,
                int box_rows, bool head_inner) {
  EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return invalid_input("cuTensorMapEncodeTiled is not available from the driver");
  // One head: its stride is never stepped; give it a legal value.
  if (heads == 1) head_stride = head_inner ? slot_stride : block_stride;
  const cuuint64_t n_slot = static_cast<cuuint64_t>(slots), n_head = static_cast<cuuint64_t>(heads);
  const cuuint64_t s_slot = static_cast<cuuint64_t>(slot_stride) * 2, s_head = static_cast<cuuint64_t>(head_stride) * 2;
  const cuuint64_t dims[4] = {128, head_inner ? n_head : n_slot, head_inner ? n_slot : n_head,
                              static_cast<cuuint64_t>(blocks)};
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

template <class T>
Status launch_ws(const AttnParams& a, cudaStream_t stream) {
  WsParams p{};
  p.a = a;
  const DeviceCaseView& view = a.view;
  const std::int64_t rows = static_cast<std::int64_t>(view.max_q_len) * a.group;
  p.a.tiles_per_seq = static_cast<std::int32_t>((rows + T::kBlockM - 1) / T::kBlockM);
  const std::int64_t ctas = static_cast<std::int64_t>(p.a.tiles_per_seq) * view.kv.num_seqs * view.kv.kv_heads;
  if (ctas == 0) return {};
  if (ctas > INT_MAX)
    return invalid_input("attention grid of " + std::to_string(ctas) + " CTAs exceeds the 1-D grid limit");
  if constexpr (T::CONTIG) {
    p.box_rows = T::kBlockN;
    const std::int64_t h = view.kv.kv_heads;
    p.head_inner = 1;
    PC_TRY(make_map(p.key_map, T::kF16, a.contig_key, a.contig_capacity, h, view.kv.num_seqs, h * 128, 128,
                    a.contig_capacity * h * 128, p.box_rows, true));
    PC_TRY(make_map(p.value_map, T::kF16, a.contig_value, a.contig_capacity, h, view.kv.num_seqs, h * 128, 128,
                    a.contig_capacity * h * 128, p.box_rows, true));
  } else {
    p.box_rows = view.kv.block_size < T::kBlockN ? view.kv.block_size : T::kBlockN;
    const CacheStrides& ks = view.kv.key_strides;
    const CacheStrides& vs = view.kv.value_strides;
    // K and V share one order (the kernel has one flag): head inner when
    // both caches step heads faster than slots (NHD).
    p.head_inner = ks.head < ks.slot && vs.head < vs.slot;
    if (!p.head_inner && (ks.head < ks.slot || vs.head < vs.slot))
      return invalid_input("key and value caches with different layouts are not built for the tensor-copy kernel");
    PC_TRY(make_map(p.key_map, T::kF16, view.kv.key_data, view.kv.block_size, view.kv.kv_heads, view.kv.num_blocks,
                    ks.slot, ks.head, ks.block, p.box_rows, p.head_inner));
    PC_TRY(make_map(p.value_map, T::kF16, view.kv.value_data, view.kv.block_size, view.kv.kv_heads,
                    view.kv.num_blocks, vs.slot, vs.head, vs.block, p.box_rows, p.head_inner));
  }
  p.boxes_per_tile = T::kBlockN / p.box_rows;
  const int smem = T::kSmemBytes + (a.split_query ? T::kSplitQueryBytes : 0);
  CUDA_TRY(cudaFuncSetAttribute(attn_ws_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  attn_ws_kernel<T><<<static_cast<unsigned>(ctas), T::kThreads, smem, stream>>>(p);
  CUDA_TRY_LAUNCH();
  return {};
}

}  // namespace

// ---- dispatch -----------------------------------------------------------------

bool sm90_ws_supports(const DeviceCaseView& view, bool contiguous) {
  static const bool forced_v3 = [] {
    const char* force = std::getenv("PAGECHECK_ATTN_KERNEL");
    return force != nullptr && std::strcmp(force, "wgmma") == 0;
  }();
  if (forced_v3) return false;
  if (view.kv.head_dim != 128 || view.kv.v_head_dim != 128) return false;
  if (view.kv_dtype != DType::BF16 && view.kv_dtype != DType::F16) return false;
  if (contiguous) return view.kv_dtype == DType::BF16;
  const int b = view.kv.block_size;
  if (!(b == 8 || b == 16 || b == 32 || b == 64 || b == 128 || b == 256)) return false;
  // Tensor maps: 16-byte aligned base, strides multiples of 16 bytes.
  for (const CacheStrides* st : {&view.kv.key_strides, &view.kv.value_strides})
    if (st->slot % 8 != 0 || st->head % 8 != 0 || st->block % 8 != 0 || st->slot <= 0 || st->head < 0 ||
        st->block <= 0)
      return false;
  if (view.kv.num_blocks <= 0 || view.kv.num_blocks > INT_MAX) return false;
  return true;
}

Status launch_attn_sm90_ws(AttnParams p, bool contiguous, cudaStream_t stream) {
  if (contiguous) {
    if (p.view.kv_dtype == DType::BF16) return launch_ws<WsTraits<KvKind::BF16, true>>(p, stream);
  } else {
    switch (p.view.kv_dtype) {
      case DType::BF16: return launch_ws<WsTraits<KvKind::BF16, false>>(p, stream);
      case DType::F16: return launch_ws<WsTraits<KvKind::F16, false>>(p, stream);
      default: break;
    }
  }
  return invalid_input("the warp-specialised sm_90a kernel is not built for kv dtype " +
                       std::string(dtype_name(p.view.kv_dtype)) + (contiguous ? " (contiguous)" : " (paged)"));
}

}  // namespace pagecheck::gpu::attn
