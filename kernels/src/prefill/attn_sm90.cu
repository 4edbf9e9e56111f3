// attn_sm90: the prefill / FMHA attention kernel for Hopper (sm_90a only).
//
//   attn_sm90_kernel<Sm90Traits<KV, CONTIG>>
//       KV BF16 / F16 (operands as stored) or F8_E4M3 / F8_E5M2 (widened to
//       BF16 on the way into shared memory, scales folded as in
//       prefill_common.cuh); CONTIG: K/V from the gather's contiguous
//       workspace (fmha) instead of pages (prefill). Head dim 128 for K and V.
//
// Shape (one CTA per (query tile of 128 rows, sequence, KV head), heaviest
// tiles first, rows as in prefill_common.cuh: (token, GQA head) pairs, so a
// group's heads share every K/V load), 384 threads, one CTA per SM:
// - Producer warpgroup (warps 8-11): each lane owns one key of a 128-key
//   tile; it reads the key's page from the table a tile ahead, computes the
//   K and V element offsets (PagedKvView's layout, or the gather's
//   contiguous one), and the warp copies its 32 rows of K and V with 16-byte
//   cp.async (FP8: load, widen, st.shared) into the 128-byte-swizzled layout
//   wgmma descriptors name (Swizzle<3,4,3>: rows of 64 elements, chunk ^=
//   row % 8, 8-row atoms of 1024 bytes; a 128-element row is two such
//   column halves). Two stages; per stage mbarriers k_full and v_full (each
//   producer lane arrives once its copies landed, after a proxy fence) and
//   empty (each consumer warp arrives when done with the stage).
// - Two consumer warpgroups of 64 query rows: S = Q K^T as wgmma
//   m64n128k16 with both operands in shared memory (Q and K K-major), then
//   online softmax in registers (base 2, as in prefill_common.cuh), then
//   O += P V as wgmma m64n128k16 with P from registers (the S accumulators
//   rounded to BF16/F16, same fragment layout) and V MN-major (transposed
//   descriptor). S and O are 64 floats per thread each; 164 registers, no
//   spills, under the 168 that 384 threads allow.
// Every length and table entry is read from device memory; the grid depends
// only on capacity fields, so captured launches replay after tables change.
//
// Notes (H200, 2026-12-02; 32/8 heads, d128, BF16, block 16, shuffled pages,
// causal; kernels/src/dev/prefill_dev.cu bench via scripts/prefill_dev_run.sh,
// median of 15, L2 flushed; the mma.sync kernel in the same runs: 235 / 244):
//   v1 all 256 threads load (cp.async) and __syncthreads around each tile,
//      reductions through a local array:        8 x 2048 prefill 182, fmha 183
//   v2 one producer warp + mbarriers, register
//      reductions:                               120 / 125 (one warp issuing
//      256 cp.async per tile is the bottleneck)
//   v3 producer warpgroup, one key per lane:     293 / 312 (1 x 8192: 372 / 404;
//      16 x 512: 162 / 171; chunked 4 x 512 over 4096: 354 / 377)
//   Ping-pong of the consumer warpgroups (named barriers around the S GEMM
//   issue, FA3 style) measured no gain on v3 (292 / 308) and was dropped:
//   the mbarrier pipeline already lets the two drift apart.
//   v4 (tried, not kept) FA3's intra-warpgroup overlap: S of tile i and
//      P V of tile i - 1 in flight together, softmax of i under P V of i - 1;
//      3 K stages, 2 V stages; setmaxnreg 56 (producer) / 224 (consumers),
//      without which ptxas spills 252 bytes. Correct (dev checks, sweeps,
//      sanitizers) but slower: 260 / 277 (1 x 8192: 325 / 352). A first try
//      with 64 / 224 deadlocked: setmaxnreg.inc waits for registers the
//      CTA's 168 x 384 allocation never has. Not yet explained why the
//      overlap loses; candidates: the producer's 56 registers, the third K
//      stage's wait order, two wgmma groups in flight per warpgroup.
//   Profile of v3 (ncu, 2026-12-03, docs/performance.md "Issue 10"): at
//      8 x 2048 the tensor pipe is busy 32% of the time, 38.5% of issue slots
//      are used with 0.6 of 3 warps eligible per scheduler; stalls per issued
//      instruction: long scoreboard 1.58, wait 1.57, barrier 0.87, short
//      scoreboard 0.50, gmma only 0.25: each consumer warpgroup's softmax
//      runs with none of its GEMMs in flight.
//   What remains toward cuDNN (474-617 TFLOP/s at these shapes): the above,
//   understood and made to pay; TMA copies of whole pages; a persistent grid
//   for short sequences (16 x 512 is prologue bound: two key tiles per CTA
//   on average).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "prefill/attn_sm90.cuh"
#include "common/cuda_check.cuh"
#include "prefill/sm90_primitives.cuh"
#include "prefill/wgmma_tile.cuh"

namespace pagecheck::gpu::attn {
namespace {

template <KvKind KV_, bool CONTIG_>
struct Sm90Traits {
  static constexpr int DK = 128;
  static constexpr int DV = 128;
  static constexpr KvKind KV = KV_;
  static constexpr bool CONTIG = CONTIG_;
  static constexpr int kConsumerThreads = 256;             // two warpgroups of 64 query rows
  // Producer warps: one warp issuing a whole 64 KB K+V tile held the
  // kernel at 120 TFLOP/s (8 x 2048); four share it, one key per lane.
  static constexpr int kProducerWarps = 4;
  static constexpr int kThreads = kConsumerThreads + 32 * kProducerWarps;
  static constexpr int kBlockM = 128;                      // query rows per CTA
  static constexpr int kBlockN = 128;                      // keys per tile
  static constexpr int kStages = 2;
  static constexpr bool kF16 = KV == KvKind::F16;          // operand type: F16, else BF16
  static constexpr bool kFp8 = KV == KvKind::E4M3 || KV == KvKind::E5M2;
  static constexpr int kChunks = DK / 8;                   // 16-byte chunks of a 16-bit row
  static constexpr int kQBytes = kBlockM * DK * 2;
  static constexpr int kKBytes = kBlockN * DK * 2;
  static constexpr int kVBytes = kBlockN * DV * 2;
  static constexpr int kOffsetBytes = 2 * kBlockN * 8;     // producer's K and V row offsets of one tile
  static constexpr int kBarrierBytes = 3 * kStages * 8;    // k_full, v_full, empty per stage
  // +1024: the dynamic shared memory base is aligned up to the 1024-byte
  // swizzle atom inside the kernel.
  static constexpr int kSmemBytes =
      1024 + kQBytes + kStages * (kKBytes + kVBytes) + kOffsetBytes + kBarrierBytes;
  static_assert(kBlockN == 32 * kProducerWarps, "each producer lane owns one key of a tile");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
  // A split query's lo tile, at the next 1024-byte boundary past the
  // barriers: kQBytes and up to 1023 bytes of alignment.
  static constexpr int kSplitQueryBytes = kQBytes + 1024;
  static_assert(kSmemBytes + kSplitQueryBytes <= 227 * 1024, "no room for a split query's lo tile");
};

// ---- the producer warp's tile loads ------------------------------------------

// Producer warp `pw`'s 32 rows of a K or V tile (kBlockN keys x 128) into
// the swizzled layout. Rows whose offset is -1 (outside the
// visible range) are zero-filled: slots past seq_len may hold NaN, and
// P = 0 times NaN would poison the output. 16-bit K/V: cp.async (one commit
// group per call); FP8: loaded, widened and stored here.
template <class T, bool kValue>
__device__ __forceinline__ void produce_tile(const AttnParams& p, std::uint32_t tile_smem,
                                             const std::int64_t* row_offsets, int pw, int lane) {
  const char* base = static_cast<const char*>(
      kValue ? (T::CONTIG ? p.contig_value : p.view.kv.value_data) : (T::CONTIG ? p.contig_key : p.view.kv.key_data));
  if constexpr (!T::kFp8) {
    // Lanes 0-15 take the 16 chunks of row 2j, lanes 16-31 those of 2j + 1.
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int row = 32 * pw + 2 * j + lane / 16, chunk = lane % 16;
      const std::int64_t offset = row_offsets[row];
      const bool valid = offset >= 0;
      cp_async16(tile_smem + sw128<T::kBlockN>(row, chunk), valid ? base + (offset + chunk * 8) * 2 : base, valid);
    }
    cp_async_commit();
  } else {
    constexpr int kSrcChunks = T::DK / 16;  // 16 FP8 elements per 16-byte load: 8 per row
    constexpr int kRowsPerStep = 32 / kSrcChunks;
    constexpr int kBatch = 32 / kRowsPerStep;  // all of this warp's loads in flight
    static_assert(kBatch * kRowsPerStep == 32, "");
    {
      constexpr int j0 = 0;
      uint4 raw[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int row = 32 * pw + (j0 + b) * kRowsPerStep + lane / kSrcChunks;
        const std::int64_t offset = row_offsets[row];
        raw[b] = make_uint4(0, 0, 0, 0);
        if (offset >= 0) raw[b] = __ldg(reinterpret_cast<const uint4*>(base + offset + (lane % kSrcChunks) * 16));
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int row = 32 * pw + (j0 + b) * kRowsPerStep + lane / kSrcChunks, src_chunk = lane % kSrcChunks;
        uint4 lo, hi;
        fp8x16_widen<T::KV>(raw[b], lo, hi);
        st_shared16(tile_smem + sw128<T::kBlockN>(row, 2 * src_chunk), lo);
        st_shared16(tile_smem + sw128<T::kBlockN>(row, 2 * src_chunk + 1), hi);
      }
    }
  }
}

// ---- the kernel ---------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) attn_sm90_kernel(const __grid_constant__ AttnParams p) {
#ifdef PAGECHECK_SM90A_DEVICE
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, DK = T::DK;
  constexpr int kDBlocks = T::DV / 8;  // n8 blocks of O
  const DeviceCaseView& view = p.view;

  QueryTile qt;
  if (!block_query_tile<kBlockM>(p, qt)) return;
  const auto& [seq, q_begin, kv_head, row0, rows_total, seq_len, pos0, min_pos, max_pos, key_lo, key_hi, table_begin] =
      qt;
  const int tile_first = qt.first_key_tile<kBlockN>(), num_tiles = qt.end_key_tile<kBlockN>() - tile_first;
  const int group = p.group;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t raw_base = smem_u32(smem_raw);
  const std::uint32_t q_smem = (raw_base + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (q_smem - raw_base);
  const std::uint32_t k_smem = q_smem + T::kQBytes;                 // [stage] K tiles
  const std::uint32_t v_smem = k_smem + T::kStages * T::kKBytes;    // [stage] V tiles
  const int offsets_at = T::kQBytes + T::kStages * (T::kKBytes + T::kVBytes);
  std::int64_t* row_offsets = reinterpret_cast<std::int64_t*>(smem + offsets_at);  // [K/V][key]
  const std::uint32_t bars = q_smem + offsets_at + T::kOffsetBytes;
  // A split query's lo tile (AttnParams::split_query), 1024-aligned after
  // everything else: launch_query_tiles adds kSplitQueryBytes for it.
  const bool split_q = p.split_query != 0;
  const std::uint32_t q_lo_smem = (bars + 3 * T::kStages * 8 + 1023u) & ~1023u;
  // k_full[s] = bars + 8 s, v_full[s] = bars + 8 (kStages + s), empty[s] = bars + 8 (2 kStages + s).
  const auto k_full = [&](int s) { return bars + 8 * s; };
  const auto v_full = [&](int s) { return bars + 8 * (T::kStages + s); };
  const auto empty = [&](int s) { return bars + 8 * (2 * T::kStages + s); };
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(k_full(s), 32 * T::kProducerWarps);  // every producer lane, once its copies landed
      mbar_init(v_full(s), 32 * T::kProducerWarps);
      mbar_init(empty(s), 8);     // one arrival per consumer warp
    }
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp >= 8) {
    // ---- producer warps: pages, row offsets, K and V tiles -------------------
    // Warp pw owns keys 32 pw .. 32 pw + 31 of every tile, one per lane.
    const int pw = warp - 8;
    const std::int64_t table_begin = T::CONTIG ? 0 : view.kv.page_indptr[seq];
    const int my_key = 32 * pw + lane;
    const auto load_page = [&](int kt) -> std::int32_t {
      const int key = kt * kBlockN + my_key;
      return (T::CONTIG || key < key_lo || key >= key_hi)
                 ? 0
                 : ld_global_nc(view.kv.page_indices + table_begin + block_of(p, key));
    };
    std::int32_t next_page = num_tiles > 0 ? load_page(tile_first) : 0;
    for (int i = 0; i < num_tiles; ++i) {
      const int kt = tile_first + i, s = i % T::kStages;
      const std::int32_t page = next_page;
      if (i + 1 < num_tiles) next_page = load_page(kt + 1);  // a tile ahead
      if (i >= T::kStages) mbar_wait(empty(s), ((i / T::kStages) & 1) ^ 1);
      __syncwarp();  // every lane is done reading the previous tile's offsets
      {
        const int key = kt * kBlockN + my_key;
        const bool valid = key >= key_lo && key < key_hi;
        row_offsets[my_key] = valid ? kv_row_offset<T, false>(p, seq, key, page, kv_head) : -1;
        row_offsets[kBlockN + my_key] = valid ? kv_row_offset<T, true>(p, seq, key, page, kv_head) : -1;
      }
      __syncwarp();
      produce_tile<T, false>(p, k_smem + s * T::kKBytes, row_offsets, pw, lane);
      produce_tile<T, true>(p, v_smem + s * T::kVBytes, row_offsets + kBlockN, pw, lane);
      // Signal K, then V, of this tile once this lane's copies landed; the
      // proxy fence makes them visible to the tensor cores' reads.
      if constexpr (!T::kFp8) cp_async_wait<1>();
      fence_proxy_async();
      mbar_arrive(k_full(s));
      if constexpr (!T::kFp8) cp_async_wait<0>();
      fence_proxy_async();
      mbar_arrive(v_full(s));
    }
    return;
  }

  // ---- consumer warpgroups ------------------------------------------------------
  const int wg = threadIdx.x / 128;       // 0 or 1: query rows 64 wg .. 64 wg + 63
  const int wg_thread = threadIdx.x % 128;
  const int warp_in_wg = warp % 4;
  const int g = lane / 4, t = lane % 4;
  const int wg_row = wg * 64 + warp_in_wg * 16;  // first row of this warp inside the tile

  // This warpgroup's 64 Q rows -> smem (operand type); rows past the
  // sequence's query are zeros.
  {
    const QTileSource qs = q_tile_source<T::kF16>(view, q_begin, kv_head, group, rows_total);
#pragma unroll 2
    for (int i = wg_thread; i < 64 * T::kChunks; i += 128) {
      const int r = wg * 64 + i / T::kChunks, chunk = i % T::kChunks;
      load_q_chunk<T::kF16, DK>(qs, row0 + r, chunk, q_smem + sw128<kBlockM>(r, chunk), split_q, q_lo_smem - q_smem);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    named_sync(1 + wg, 128);  // this warpgroup's Q rows are in
  }

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const bool has_softcap = p.softcap_out != 0.f;
  const float exp_scale = has_softcap ? 1.f : p.logit_mul;
  const std::uint32_t q_wg = q_smem + wg * 64 * 128;  // this warpgroup's 64 rows (8 atoms)

  for (int i = 0; i < num_tiles; ++i) {
    const int kt = tile_first + i, s = i % T::kStages;
    const int parity = (i / T::kStages) & 1;
    const std::uint32_t ks = k_smem + s * T::kKBytes;
    const std::uint32_t vs = v_smem + s * T::kVBytes;

    // S = Q K^T: this warpgroup's 64 rows x 128 keys, 8 k-steps of 16 dims.
    mbar_wait(k_full(s), parity);
    float sacc[64];
    wgmma_fence();
    issue_qk<T::kF16, kBlockM, kBlockN>(sacc, q_wg, q_lo_smem + wg * 64 * 128, ks, split_q);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(sacc);

    if (has_softcap) {
#pragma unroll
      for (int e = 0; e < 64; ++e) sacc[e] = p.softcap_out * tanhf(sacc[e] * p.logit_mul);
    }
    const int n0 = kt * kBlockN;
    if (qt.needs_mask<kBlockN>(n0, view.causal, view.window))
      mask_tile(
          sacc, n0, t, row0 + wg_row + g, [&](int r) { return pos0 + r / group; }, key_lo, key_hi, view.causal,
          view.window);
    float alphas[2];
    softmax_rows(sacc, m, l, alphas, exp_scale);
    rescale_o(o, alphas);
    std::uint32_t pa[kBlockN / 16][4];
    pack_p<T::kF16, kBlockN>(sacc, pa);
    mbar_wait(v_full(s), parity);
    wgmma_fence();
    issue_pv<T::kF16, kBlockN>(o, pa, vs);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(s));  // this warp is done with the stage
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum(l[h]);
    const int row = row0 + wg_row + g + 8 * h;
    if (row >= rows_total) continue;
    const std::int64_t token = q_begin + row / group;
    const int head = kv_head * group + row % group;
    float m_row = m[h];
    const float keep = add_sink_row(view.sinks, head, m_row, sum);
    const float inv = sum > 0.f ? p.out_scale * keep / sum : 0.f;
    const std::int64_t out_row = (token * view.q_heads + head) * T::DV;
#pragma unroll
    for (int d = 0; d < kDBlocks; ++d)
      store2(view.output_dtype, view.output, out_row + d * 8 + 2 * t, o[d * 4 + 2 * h] * inv,
             o[d * 4 + 2 * h + 1] * inv);
    if (view.lse != nullptr && t == 0)
      view.lse[token * view.q_heads + head] = row_lse(m_row, sum);
  }
#endif  // PAGECHECK_SM90A_DEVICE
}

// ---- launcher ---------------------------------------------------------------

template <class T>
Status launch_traits(AttnParams p, cudaStream_t stream) {
  return launch_query_tiles<T>(attn_sm90_kernel<T>, p, stream);
}

}  // namespace

// ---- dispatch -----------------------------------------------------------------

namespace {
// Whether `device` is compute capability 9.0 and loads the sm_90a image.
bool device_runs_sm90a(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  if (major != 9 || minor != 0) return false;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, attn_sm90_kernel<Sm90Traits<KvKind::BF16, false>>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90;
}
}  // namespace

// Asked on every prefill/fmha launch (and latent decode's): the answer is
// kept per device.
bool sm90a_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  constexpr int kCachedDevices = 64;
  static std::atomic<signed char> cached[kCachedDevices];  // 0: not asked yet, 1: no, 2: yes
  if (device < 0 || device >= kCachedDevices) return device_runs_sm90a(device);
  signed char state = cached[device].load(std::memory_order_relaxed);
  if (state == 0) {
    state = device_runs_sm90a(device) ? 2 : 1;
    cached[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

// The environment is read once.
bool sm90_available() {
  static const bool forced_mma = [] {
    const char* force = std::getenv("PAGECHECK_ATTN_KERNEL");
    return force != nullptr && std::strcmp(force, "mma") == 0;
  }();
  return !forced_mma && sm90a_device();
}

bool sm90_supports(const DeviceCaseView& view, bool contiguous) {
  // Head dims 64 and 256: the warp-specialised kernel only (this file's is
  // built for 128).
  if (view.kv.head_dim == view.kv.v_head_dim && (view.kv.head_dim == 64 || view.kv.head_dim == 256))
    return sm90_ws_supports(view, contiguous);
  if (view.kv.head_dim != 128 || view.kv.v_head_dim != 128) return false;
  const DType kv = view.kv_dtype;
  if (contiguous) return kv == DType::BF16;
  return kv == DType::BF16 || kv == DType::F16 || kv == DType::F8_E4M3 || kv == DType::F8_E5M2;
}

const char* attn_kernel_name(const DeviceCaseView& view, bool contiguous) {
  if (!sm90_supports(view, contiguous) || !sm90_available()) return "mma.sync";
  if (!sm90_ws_supports(view, contiguous)) return "wgmma (sm_90a)";
  if (contiguous || sm90_ws_uses_tma(view.kv.block_size, view.kv_dtype)) return "wgmma-ws tma (sm_90a)";
  const bool fp8 = view.kv_dtype == DType::F8_E4M3 || view.kv_dtype == DType::F8_E5M2;
  return fp8 && sm90_ws_fp8_k(view) ? "wgmma-ws rows fp8-k (sm_90a)" : "wgmma-ws rows (sm_90a)";
}

Status launch_attn_sm90(AttnParams p, bool contiguous, cudaStream_t stream) {
  if (sm90_ws_supports(p.view, contiguous)) return launch_attn_sm90_ws(p, contiguous, stream);
  if (p.view.kv.head_dim != 128 || p.view.kv.v_head_dim != 128)
    return invalid_input("the sm_90a attention kernel is not built for head dim " + std::to_string(p.view.kv.head_dim) +
                         "/" + std::to_string(p.view.kv.v_head_dim));
  if (contiguous) {
    if (p.view.kv_dtype == DType::BF16) return launch_traits<Sm90Traits<KvKind::BF16, true>>(p, stream);
  } else {
    switch (p.view.kv_dtype) {
      case DType::BF16: return launch_traits<Sm90Traits<KvKind::BF16, false>>(p, stream);
      case DType::F16: return launch_traits<Sm90Traits<KvKind::F16, false>>(p, stream);
      case DType::F8_E4M3: return launch_traits<Sm90Traits<KvKind::E4M3, false>>(p, stream);
      case DType::F8_E5M2: return launch_traits<Sm90Traits<KvKind::E5M2, false>>(p, stream);
      default: break;
    }
  }
  return invalid_input("the sm_90a attention kernel is not built for kv dtype " +
                       std::string(dtype_name(p.view.kv_dtype)) + (contiguous ? " (contiguous)" : " (paged)"));
}

}  // namespace pagecheck::gpu::attn
