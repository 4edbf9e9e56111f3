// decode_mla_sm90: latent (MLA) decode on wgmma (sm_90a), for the direct,
// split and auto paths (issue 23, item 2).
//
// A latent cache row holds 576 columns, K; V is its first 512. Every query
// head of a sequence reads the same rows, so a decode step is two matrix
// products per key tile with the heads as rows: S = Q K^T (64 heads x keys,
// 576 deep) and O += P V (64 heads x 512). A CTA takes one (sequence, kv
// head, tile of 64 query heads) and, under split/auto, one partition of the
// keys; heads past the group are zero rows of Q whose output is not stored.
//
// CTA: two warpgroups (256 threads), both loading and both computing.
// - Shared memory: Q (64 rows x 576, nine 64-column atoms of 128-byte
//   swizzled rows, 72 KB), two stages of 64 keys x 576 (72 KB each), P
//   exchange (2 x 4 KB) and the row statistics (1 KB): 226 KB, one CTA per
//   SM. The K tile serves as V: V's 512 columns are its first eight atoms.
// - Loads: every thread copies with 16-byte cp.async, eight lanes a key row
//   (two passes of 32 keys a stage), zero-filled past the range's end; the
//   next stage's copies are issued before this stage's math.
// - Per 64-key stage, warpgroup w computes S for keys [32 w, 32 w + 32)
//   (36 wgmma m64n32k16 from shared memory), the two exchange their row
//   maxima through shared memory so that both rescale by the same max, each
//   turns its S into P (its own keys) and writes P for the other, and then
//   each accumulates O over all 64 keys for its half of V's columns
//   (columns [256 w, 256 w + 256): 4 wgmma m64n256k16, P from registers:
//   its own as S left it, the other's by ldmatrix). O is 128 floats a
//   thread; S 16.
// - Epilogue: the row sums of both warpgroups are added (same max), then
//   the direct/auto-whole output (normalised, v_scale, attention sink) and
//   LSE, or the partition state for decode_split.cu's merge kernel
//   (normalised output, base-2 max, sum), exactly the CUDA-core loop's.
#include "decode/decode_mla_sm90.cuh"

#include <string>

#include "common/cuda_check.cuh"
#include "prefill/attn_sm90.cuh"
#include "prefill/wgmma_tile.cuh"

namespace pagecheck::gpu::decode {
namespace {

namespace A = ::pagecheck::gpu::attn;

constexpr int kDK = 576, kDV = 512;
constexpr int kAtomsK = kDK / 64;   // 64-column atoms of a K row (9)
constexpr int kChunksK = kDK / 8;   // 16-byte chunks of a row (72)
constexpr int kKeys = 64;           // keys per stage
constexpr int kHalfKeys = kKeys / 2;  // S of a warpgroup
constexpr int kThreads = 256;
constexpr int kAtomBytes = 64 * 128;  // 64 rows (heads or keys) of one atom
constexpr int kQBytes = kAtomsK * kAtomBytes;
constexpr int kStageBytes = kAtomsK * kAtomBytes;
constexpr int kStages = 2;
constexpr int kPBytes = kMlaHeadTile * kHalfKeys * 2;  // a warpgroup's P: 64 rows x 32 keys
constexpr int kStatBytes = 2 * 2 * kMlaHeadTile * 4;   // row maxima and sums of both warpgroups
constexpr int kSmemBytes = 1024 + kQBytes + kStages * kStageBytes + 2 * kPBytes + kStatBytes;
static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");
static_assert(kMlaHeadTile == 64, "the wgmma M");

// Byte offset of key chunk (16 bytes) `chunk` of P row `row` in a 64-byte
// row: chunk XOR (row / 2) % 4, so that ldmatrix's eight rows (and the
// stores of a warp's eight rows) hit eight different 16-byte bank groups.
// scripts/mla_layout_check.py checks the exchange (stores, ldmatrix lane
// addresses, fragments) on paper.
__device__ __forceinline__ std::uint32_t p_offset(int row, int chunk) {
  return static_cast<std::uint32_t>(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
}

template <bool kF16, MlaLaunch kKind>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_kernel(const __grid_constant__ DecodeParams p) {
#ifdef PAGECHECK_SM90A_DEVICE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t raw = A::smem_u32(smem_raw);
  const std::uint32_t base = (raw + 1023u) & ~1023u;
  const std::uint32_t q_smem = base;
  const std::uint32_t kv_smem = q_smem + kQBytes;
  const std::uint32_t p_smem = kv_smem + kStages * kStageBytes;
  float* stats = reinterpret_cast<float*>(smem_raw + (p_smem + 2 * kPBytes - raw));  // [max | sum][wg][row]

  const int per_seq = p.kv.kv_heads * p.head_tiles;
  const std::int64_t seq = blockIdx.x / per_seq;
  const int kv_head = (blockIdx.x % per_seq) / p.head_tiles;
  const int tile = blockIdx.x % p.head_tiles;
  const std::int64_t partition = blockIdx.y;
  if constexpr (kKind != MlaLaunch::Direct) {
    // The merge kernel may start once every partition CTA has started (its
    // griddepcontrol.wait still waits for this grid).
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  const std::int32_t seq_len = p.kv.seq_lens[seq];
  if (!seq_selected(p, seq_len)) return;
  bool whole = kKind == MlaLaunch::Direct;
  if constexpr (kKind == MlaLaunch::Auto) whole = seq_len <= p.threshold_tokens;
  if (whole && partition != 0) return;
  const KeyRange keys = key_range(p, seq_len, partition, whole);
  const std::int32_t begin = keys.begin, end = keys.end;

  const int tid = threadIdx.x, wg = tid / 128, wi = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int heads_here = min(kMlaHeadTile, p.gqa - tile * kMlaHeadTile);
  const int first_head = kv_head * p.gqa + tile * kMlaHeadTile;
  const std::int64_t q_row = p.query_start_loc[seq];

  // Q (the query's dtype is the operand type): 64 rows x 72 chunks; rows
  // past the group are zeros.
  {
    const char* q_base = static_cast<const char*>(p.query);
#pragma unroll 2
    for (int i = tid; i < kMlaHeadTile * kChunksK; i += kThreads) {
      const int r = i / kChunksK, c = i % kChunksK;
      const bool valid = r < heads_here;
      const char* src = q_base + ((q_row * p.q_heads + first_head + (valid ? r : 0)) * kDK + c * 8) * 2;
      A::cp_async16(q_smem + A::sw128<64>(r, c), src, valid);
    }
    A::cp_async_commit();
  }

  // K rows of stage `stage` for keys begin + 64 it + j: lane group tid / 8
  // takes key j (two passes of 32), lane tid % 8 chunk tid % 8 of each of
  // the nine atoms.
  const std::int64_t table = p.kv.page_indptr[seq];
  const char* k_base = static_cast<const char*>(p.kv.key_data);
  const int cc = tid % 8;
  const auto issue = [&](int it, int stage) {
    const std::uint32_t dst = kv_smem + stage * kStageBytes;
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      const int j = tid / 8 + 32 * pass;
      const std::int32_t token = begin + it * kKeys + j;
      const bool valid = token < end;
      std::int64_t off = 0;  // in 16-byte vectors
      if (valid) {
        const std::uint32_t page_no = fast_divide(static_cast<std::uint32_t>(token), p.block_magic, p.block_shift);
        const std::int32_t slot = token - static_cast<std::int32_t>(page_no) * p.kv.block_size;
        const std::int32_t page = p.kv.page_indices[table + page_no];
        off = static_cast<std::int64_t>(page) * p.k_block_vecs + (slot * p.k_slot_vecs + kv_head * p.k_head_vecs);
      }
      const char* src = k_base + (off + cc) * 16;
#pragma unroll
      for (int a = 0; a < kAtomsK; ++a) A::cp_async16(dst + A::sw128<kKeys>(j, a * 8 + cc), src + a * 128, valid);
    }
  };

  const int iters = end > begin ? (end - begin + kKeys - 1) / kKeys : 0;
  if (iters > 0) issue(0, 0);
  A::cp_async_commit();

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float exp_scale = p.q_multiplier;  // scale * k_scale * log2 e (no softcap here)
  const int row_base = wi * 16 + g;        // this thread's rows: row_base and row_base + 8
  float* row_max = stats;                  // [wg][64]
  float* row_sums = stats + 2 * kMlaHeadTile;

  for (int it = 0; it < iters; ++it) {
    const int stage = it & 1;
    if (it + 1 < iters) issue(it + 1, stage ^ 1);
    A::cp_async_commit();
    A::cp_async_wait<1>();  // Q and this stage are in (this thread's copies)
    A::fence_proxy_async();
    __syncthreads();        // ... and every thread's
    const std::uint32_t ks = kv_smem + stage * kStageBytes;

    // S = Q K^T over this warpgroup's 32 keys: 36 k-steps of 16 columns.
    float s[16];
    A::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDK / 16; ++kk) {
      const std::uint64_t da = A::smem_desc(q_smem + (kk >> 2) * kAtomBytes + (kk & 3) * 32, 16, 1024);
      const std::uint64_t db =
          A::smem_desc(ks + wg * kHalfKeys * 128 + (kk >> 2) * kAtomBytes + (kk & 3) * 32, 16, 1024);
      A::wgmma_ss<kF16, 16>(s, da, db, kk > 0);
    }
    A::wgmma_commit();
    A::wgmma_wait<0>();
    A::fence_regs(s);

    // Keys past the range's end (the last stage): -inf. s[4 nb + 2 h + e]
    // is key key0 + 8 nb + 2 t + e of row row_base + 8 h.
    const int key0 = begin + it * kKeys + wg * kHalfKeys;
    if (key0 + kHalfKeys > end) {
#pragma unroll
      for (int nb = 0; nb < 4; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (key0 + 8 * nb + 2 * t + e >= end) {
            s[4 * nb + e] = -INFINITY;
            s[4 * nb + 2 + e] = -INFINITY;
          }
    }

    // One max per row over both warpgroups' keys, then the online softmax.
    const float mt0 = A::row_max(s, 0), mt1 = A::row_max(s, 1);
    if (t == 0) {
      row_max[wg * kMlaHeadTile + row_base] = mt0;
      row_max[wg * kMlaHeadTile + row_base + 8] = mt1;
    }
    A::named_sync(1, kThreads);
    float alphas[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + 8 * h;
      const float m_tile = fmaxf(row_max[row], row_max[kMlaHeadTile + row]) * exp_scale;
      const float m_new = fmaxf(m[h], m_tile);
      const float ref = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet
      alphas[h] = fast_exp2(m[h] - ref);
      m[h] = m_new;
      l[h] = l[h] * alphas[h] + A::exp_row(s, h, exp_scale, ref);
    }
    A::rescale_o(o, alphas);

    // P: this warpgroup's keys into registers and, for the other, shared
    // memory; then the other's by ldmatrix.
    std::uint32_t own[2][4], other[2][4];
    A::pack_p<kF16, kHalfKeys>(s, own);
    {
      const std::uint32_t mine = p_smem + wg * kPBytes;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int q = 0; q < 4; ++q)  // own[kk][q]: row row_base + 8 (q & 1), keys 8 (2 kk + q / 2) + 2 t
          A::st_shared32(mine + p_offset(row_base + 8 * (q & 1), 2 * kk + (q >> 1)) + 4 * t, own[kk][q]);
    }
    A::named_sync(2, kThreads);
    {
      const std::uint32_t theirs = p_smem + (wg ^ 1) * kPBytes;
      const int r = wi * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
        ldmatrix_x4(theirs + p_offset(r, 2 * kk + (lane >> 4)), other[kk][0], other[kk][1], other[kk][2],
                    other[kk][3]);
    }

    // O += P V for columns [256 wg, 256 wg + 256): V's atoms 4 wg .. 4 wg + 3
    // of this stage, k-steps of 16 keys (own keys first; the sum's order is
    // fixed per warpgroup, so the result does not depend on timing).
    const std::uint32_t vs = ks + wg * 4 * kAtomBytes;
    A::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
      A::wgmma_rs<kF16>(o, own[kk], A::smem_desc(vs + (2 * wg + kk) * 16 * 128, kAtomBytes, 1024));
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
      A::wgmma_rs<kF16>(o, other[kk], A::smem_desc(vs + (2 * (wg ^ 1) + kk) * 16 * 128, kAtomBytes, 1024));
    A::wgmma_commit();
    A::wgmma_wait<0>();
    A::fence_regs(o);
    __syncthreads();  // the stage, P and the maxima are free for the next one
  }
  A::cp_async_wait<0>();

  // Row sums: each warpgroup summed its own keys' P under the shared max.
  const float sum0 = A::row_sum(l[0]), sum1 = A::row_sum(l[1]);
  if (t == 0) {
    row_sums[wg * kMlaHeadTile + row_base] = sum0;
    row_sums[wg * kMlaHeadTile + row_base + 8] = sum1;
  }
  __syncthreads();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row_base + 8 * h;
    if (row >= heads_here) continue;
    const std::int64_t q_head = first_head + row;
    float mm = m[h];
    float ll = row_sums[row] + row_sums[kMlaHeadTile + row];
    float mul = ll > 0.f ? 1.f / ll : 0.f;
    if (whole) {
      if (p.sinks != nullptr) mul *= add_sink(1.f, mm, ll, sink_logit2(p, q_head));  // mm, ll: with the sink
      mul *= p.v_scale;
      const std::int64_t out0 = (q_row * p.q_heads + q_head) * kDV + wg * 256 + 2 * t;
#pragma unroll
      for (int nb = 0; nb < 32; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          store_from_float(p.output_dtype, p.output, out0 + 8 * nb + e, o[4 * nb + 2 * h + e] * mul);
      if (wg == 0 && t == 0 && p.lse != nullptr) p.lse[q_row * p.q_heads + q_head] = state_lse(mm, ll);
    } else {
      const std::int64_t slot = (seq * p.q_heads + q_head) * p.max_partitions + partition;
      float* out = p.partial_out + slot * kDV + wg * 256 + 2 * t;
      mul *= p.v_scale;
#pragma unroll
      for (int nb = 0; nb < 32; ++nb)
        *reinterpret_cast<float2*>(out + 8 * nb) = make_float2(o[4 * nb + 2 * h] * mul, o[4 * nb + 2 * h + 1] * mul);
      if (wg == 0 && t == 0) {
        p.partial_max[slot] = mm;
        p.partial_sum[slot] = ll;
      }
    }
  }
#endif
}

template <bool kF16, MlaLaunch kKind>
Status launch_kind(const DecodeParams& p, std::int64_t ctas, std::int64_t rows, cudaStream_t stream) {
  auto kernel = mla_decode_kernel<kF16, kKind>;
  CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  kernel<<<dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(rows)), kThreads, kSmemBytes, stream>>>(p);
  CUDA_TRY_LAUNCH();
  return {};
}

template <bool kF16>
Status launch_dtype(const DecodeParams& p, MlaLaunch kind, std::int64_t ctas, std::int64_t rows,
                    cudaStream_t stream) {
  switch (kind) {
    case MlaLaunch::Direct: return launch_kind<kF16, MlaLaunch::Direct>(p, ctas, 1, stream);
    case MlaLaunch::Split: return launch_kind<kF16, MlaLaunch::Split>(p, ctas, rows, stream);
    default: return launch_kind<kF16, MlaLaunch::Auto>(p, ctas, rows, stream);
  }
}

}  // namespace

bool mla_sm90_supports(const DeviceCaseView& view) {
  if (view.kv.head_dim != kDK || view.kv.v_head_dim != kDV) return false;
  if (view.kv_dtype != DType::BF16 && view.kv_dtype != DType::F16) return false;
  if (view.query_dtype != view.kv_dtype) return false;  // Q is copied as the operand
  if (view.alibi_slopes != nullptr || view.softcap > 0.f) return false;
  const CacheStrides& st = view.kv.key_strides;
  if (st.block % 8 || st.slot % 8 || st.head % 8 || st.slot <= 0) return false;
  return reinterpret_cast<std::uintptr_t>(view.kv.key_data) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(view.query) % 16 == 0;
}

bool mla_sm90_available() { return attn::sm90a_device(); }

Status launch_mla_sm90(const DecodeParams& p, MlaLaunch kind, std::int64_t ctas, std::int64_t rows,
                       cudaStream_t stream) {
  if (ctas <= 0) return {};
  if (ctas > 0x7fffffff || rows < 1 || rows > 65535)
    return invalid_input("the MLA decode grid (" + std::to_string(ctas) + " x " + std::to_string(rows) +
                             ") exceeds one launch",
                         "decode");
  if (p.query_dtype == DType::F16) return launch_dtype<true>(p, kind, ctas, rows, stream);
  return launch_dtype<false>(p, kind, ctas, rows, stream);
}

}  // namespace pagecheck::gpu::decode
