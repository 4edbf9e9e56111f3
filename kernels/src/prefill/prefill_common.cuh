// Device helpers and the tensor-core attention kernel shared by prefill.cu
// (paged K/V) and fmha.cu (contiguous K/V written by the gather kernel).
//
// FlashAttention-2 shape, mma.sync m16n8k16 (sm_80 and later):
// - One CTA per (tile of kBlockM query rows, sequence, KV head), heaviest
//   tiles first. A row is a (query token, query head of the KV head's GQA
//   group) pair, so the heads of a group share every K/V load; row r of tile
//   t is token (t * kBlockM + r) / group, head kv_head * group + (t * kBlockM
//   + r) % group.
// - 4 warps of 32 rows (two m16 blocks; one for head dim 256), Q re-read
//   from shared memory every key tile (AttnTraits says why).
// - K and V tiles of kBlockN keys go through shared memory (16-byte chunks
//   XOR-swizzled so ldmatrix is conflict free), double buffered with
//   cp.async. A tile may straddle pages: each key's element offset comes
//   from its page (PagedKvView's layout: page * block stride + slot * slot
//   stride + head * head stride), computed one tile ahead into shared memory
//   with the table load issued early. FP8 K/V are widened to BF16 on the way
//   in (exact), their scales folded into the logit scale and the output.
// - Online softmax in registers, base 2, scale * log2(e) folded into the
//   exponent's FFMA; O rescaled only when a row maximum moved.
// Every length and table entry is read from device memory; the grid depends
// only on capacity fields (max_q_len, num_seqs, kv_heads), so a captured
// launch replays correctly after tables and context lengths change.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/device_case.cuh"
#include "common/mma_sync.cuh"
#include "pagecheck/fast_div.hpp"
#include "pagecheck/paged_kv.hpp"

namespace pagecheck::gpu::attn {

// Element types of the K/V cache that the tensor-core kernel reads.
enum class KvKind : int { BF16, F16, E4M3, E5M2 };

// Everything one launch needs beyond the view.
struct AttnParams {
  DeviceCaseView view;
  // Contiguous K/V (fmha): token j of sequence s, KV head h at
  // ((s * contig_capacity + j) * kv_heads + h) * head_dim; unused for paged.
  const void* contig_key = nullptr;
  const void* contig_value = nullptr;
  std::int64_t contig_capacity = 0;
  std::int32_t group = 1;        // q_heads / kv_heads
  std::int32_t tiles_per_seq = 0;  // ceil(max_q_len * group / kBlockM)
  float logit_mul = 0;   // no softcap: scale * k_scale * log2(e); softcap: scale * k_scale / softcap
  float softcap_out = 0; // softcap * log2(e), 0 without softcap
  float out_scale = 1;   // v_scale
  // token / block_size as (umulhi(token, magic) + token) >> shift, exact for
  // token < 2^31 (no integer division in the tile loop).
  std::uint32_t block_magic = 1;
  std::uint32_t block_shift = 0;
  // The query holds more precision than the mma operand type (an F32 query,
  // or F16 over BF16 operands): Q is kept as hi + lo, two operand-type parts
  // (hi = Q rounded, lo = the rest rounded), and S = Q_hi K^T + Q_lo K^T.
  // One rounded Q alone shifts logits by |logit| * 2^-9 (BF16): with logits
  // in the hundreds that moved softmax weights by tens of percent (the
  // covering suite's large-logits cases, H200, 2026-12-03). The lo tile takes
  // kSplitQueryBytes more dynamic shared memory, only in those launches.
  std::int32_t split_query = 0;
};

// The divisor pair for `d` in 1..2^31 (AttnParams::block_magic/shift;
// pagecheck/fast_div.hpp).
inline void make_fast_div(std::uint32_t d, std::uint32_t& magic, std::uint32_t& shift) {
  const FastDiv f = fast_divisor(d);
  magic = f.mul;
  shift = f.shift;
}

template <int DK_, int DV_, KvKind KV_, bool CONTIG_>
struct AttnTraits {
  static constexpr int DK = DK_;
  static constexpr int DV = DV_;
  static constexpr KvKind KV = KV_;
  static constexpr bool CONTIG = CONTIG_;
  // FlashAttention-2 shape: 4 warps, each 32 query rows (two m16 blocks) so
  // every K/V fragment read from shared memory feeds two mma; Q is re-read
  // from shared memory each key tile, which keeps ~230 registers and lets two
  // CTAs share an SM (their softmax phases then overlap the other's mma).
  // Head dim 256: one m16 block per warp (the O accumulator alone is 128
  // registers) and 32-key tiles.
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowBlocks = DV > 128 ? 1 : 2;  // m16 row blocks per warp
  static constexpr int kBlockM = kWarps * 16 * kRowBlocks;  // query rows per CTA
  // Keys per tile. Measured at head dim 128 (H200, 8 x 2048 causal): 32-key
  // tiles are 2% slower for fmha (240 vs 244.5 TFLOP/s) and 4% for prefill
  // (226 vs 235); they spill no registers but double the per-tile barriers,
  // reductions and O rescales.
  static constexpr int kBlockN = DK > 128 ? 32 : 64;
  static constexpr int kMinBlocks = 2;                       // CTAs per SM
  static constexpr bool kF16 = KV == KvKind::F16;  // mma operand type: F16, else BF16
  static constexpr bool kFp8 = KV == KvKind::E4M3 || KV == KvKind::E5M2;
  static constexpr int kChunksK = DK / 8;  // 16-byte chunks of one smem row (16-bit elements)
  static constexpr int kChunksV = DV / 8;
  static constexpr int kQBytes = kBlockM * DK * 2;
  static constexpr int kKBytes = kBlockN * DK * 2;
  static constexpr int kVBytes = kBlockN * DV * 2;
  static constexpr int kOffsetBytes = 2 * 2 * kBlockN * 8;  // [stage][K/V][key] int64 element offsets
  static constexpr int kSmemBytes = kQBytes + 2 * kKBytes + 2 * kVBytes + kOffsetBytes;
  // A split query (AttnParams::split_query) puts its lo tile after these;
  // such launches run one CTA per SM.
  static constexpr int kSplitQueryBytes = kQBytes;
  static_assert(kSmemBytes + kSplitQueryBytes <= 227 * 1024, "no room for a split query's lo tile");
  static_assert(DK % 32 == 0 && DV % 16 == 0, "head dims must be multiples of 32 (K) and 16 (V)");
  static_assert(kChunksK >= 8 && kChunksV >= 8, "the XOR swizzle needs rows of at least 8 chunks (dim >= 64)");
  static_assert(kBlockN % 16 == 0, "key tile must be a multiple of the mma k (16)");
  static_assert(kThreads >= 2 * kBlockN, "one thread per key and K/V computes the tile's row offsets");
  static_assert(kSmemBytes * kMinBlocks <= 227 * 1024, "shared memory over the sm_90 limit for kMinBlocks CTAs");
};

// ---- small device helpers -------------------------------------------------

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile.
template <int kChunks>
__device__ __forceinline__ std::uint32_t swz(int row, int chunk) {
  return static_cast<std::uint32_t>((row * kChunks + (chunk ^ (row & 7))) * 16);
}

__device__ __forceinline__ std::uint32_t smem_u32(const void* ptr) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16-byte cp.async; copies zeros when !valid (src-size 0 reads nothing).
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void st_shared16(std::uint32_t dst, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

// Eight floats into a 16-byte chunk of the mma operand type.
template <bool kF16>
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  return make_uint4(pack2<kF16>(f[0], f[1]), pack2<kF16>(f[2], f[3]), pack2<kF16>(f[4], f[5]),
                    pack2<kF16>(f[6], f[7]));
}

// Eight floats as hi + lo chunks of the mma operand type: hi = f rounded,
// lo = (f - hi) rounded, so hi + lo holds about twice the operand's bits.
template <bool kF16>
__device__ __forceinline__ void split8(const float (&f)[8], uint4& hi, uint4& lo) {
  float rest[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float h = kF16 ? __half2float(__float2half_rn(f[i])) : __bfloat162float(__float2bfloat16_rn(f[i]));
    rest[i] = f[i] - h;
  }
  hi = pack8<kF16>(f);
  lo = pack8<kF16>(rest);
}

// Eight query elements of `dtype` (F32, F16, BF16) at `src`, widened.
__device__ __forceinline__ void load8_as_float(DType dtype, const void* src, float (&f)[8]) {
  if (dtype == DType::F32) {
    const float4 a = reinterpret_cast<const float4*>(src)[0];
    const float4 b = reinterpret_cast<const float4*>(src)[1];
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 v;
      if (dtype == DType::F16)
        v = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      else
        v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
}

// One 16-byte chunk (8 dims) of query row `row` of a work tile into shared
// memory at `dst`, in the operand type (kF16: F16, else BF16): row r holds
// token q_begin + r / group, query head kv_head * group + r % group; rows at
// or past rows_total are zeros. A query already in the operand type is
// copied by cp.async (the caller commits and waits); others are widened and
// rounded, and with split_q also split into hi (at dst) and lo (at
// dst + lo_offset).
struct QTileSource {
  const void* query = nullptr;
  DType dtype = DType::BF16;
  bool direct_copy = false;  // the query is in the operand type already
  int elem_bytes = 2;
  std::int64_t q_heads = 0;
  std::int64_t q_begin = 0;
  int kv_head = 0;
  int group = 1;
  int rows_total = 0;
};
template <bool kF16>
__device__ __forceinline__ QTileSource q_tile_source(const DeviceCaseView& view, std::int64_t q_begin, int kv_head,
                                                     int group, int rows_total) {
  QTileSource q;
  q.query = view.query;
  q.dtype = view.query_dtype;
  q.direct_copy = (q.dtype == DType::BF16 && !kF16) || (q.dtype == DType::F16 && kF16);
  q.elem_bytes = q.dtype == DType::F32 ? 4 : 2;
  q.q_heads = view.q_heads;
  q.q_begin = q_begin;
  q.kv_head = kv_head;
  q.group = group;
  q.rows_total = rows_total;
  return q;
}
template <bool kF16, int kDims>
__device__ __forceinline__ void load_q_chunk(const QTileSource& q, int row, int chunk, std::uint32_t dst,
                                             bool split_q, std::uint32_t lo_offset) {
  const bool valid = row < q.rows_total;
  const std::int64_t token = q.q_begin + row / q.group;
  const int head = q.kv_head * q.group + row % q.group;
  const char* src = static_cast<const char*>(q.query) +
                    ((token * q.q_heads + head) * kDims + chunk * 8) * static_cast<std::int64_t>(q.elem_bytes);
  if (q.direct_copy) {
    cp_async16(dst, valid ? src : static_cast<const char*>(q.query), valid);
  } else {
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (valid) load8_as_float(q.dtype, src, f);
    if (split_q) {
      uint4 hi, lo;
      split8<kF16>(f, hi, lo);
      st_shared16(dst, hi);
      st_shared16(dst + lo_offset, lo);
    } else {
      st_shared16(dst, pack8<kF16>(f));
    }
  }
}

// Sixteen FP8 values (one 16-byte load) into two 16-byte chunks of the
// operand type, exactly: every E4M3/E5M2 value is representable in F16 and
// then in BF16. To F16 (kToF16; the warp-specialised kernel's FP8 operands)
// one conversion a pair; to BF16 four (to F16, to two F32, packed).
template <KvKind KV, bool kToF16 = false>
__device__ __forceinline__ void fp8x16_widen(uint4 raw, uint4& lo, uint4& hi) {
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  std::uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * half));
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, KV == KvKind::E4M3 ? __NV_E4M3 : __NV_E5M2);
      if constexpr (kToF16) {
        out[2 * i + half] = static_cast<std::uint32_t>(h.x) | (static_cast<std::uint32_t>(h.y) << 16);
      } else {
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&h));
        out[2 * i + half] = pack2<false>(v.x, v.y);
      }
    }
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// An attention sink (issue 23): the head's sink logit (natural units)
// joins a finished row's max and its sum, never P V. Takes the row's max m
// (base 2) and sum, makes them the row's with the sink (what the LSE is
// taken of) and returns the factor `keep` of the row's unnormalised output,
// which the epilogue scales by out_scale * keep / sum. A row without keys
// gets output 0 (keep 0) and the sink as its LSE; without sinks nothing
// changes (keep 1).
__device__ __forceinline__ float add_sink_row(const float* sinks, int head, float& m, float& sum) {
  if (sinks == nullptr) return 1.f;
  const float s2 = sinks[head] * 1.4426950408889634f;
  if (!(s2 > -INFINITY)) return 1.f;
  const float mx = fmaxf(m, s2);
  const float keep = m == -INFINITY ? 0.f : exp2f(m - mx);
  sum = sum * keep + exp2f(s2 - mx);
  m = mx;
  return keep;
}

// Stores two adjacent output elements (columns c, c+1) of `dtype`.
__device__ __forceinline__ void store2(DType dtype, void* base, std::int64_t index, float x, float y) {
  if (dtype == DType::F32) {
    *reinterpret_cast<float2*>(static_cast<float*>(base) + index) = make_float2(x, y);
  } else if (dtype == DType::F16) {
    *reinterpret_cast<__half2*>(static_cast<__half*>(base) + index) = __floats2half2_rn(x, y);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(base) + index) = __floats2bfloat162_rn(x, y);
  }
}

// ---- tile loads -------------------------------------------------------------

__device__ __forceinline__ int block_of(const AttnParams& p, int token) {
  return static_cast<int>(fast_div(static_cast<std::uint32_t>(token), p.block_magic, p.block_shift));
}

// Element offset of row `token` of `kv_head` in the K (or V) source, given the
// token's physical page (paged; PagedKvView::key_offset/value_offset with the
// page already looked up) or nothing (contiguous).
template <class T, bool kValue>
__device__ __forceinline__ std::int64_t kv_row_offset(const AttnParams& p, std::int64_t seq, int token,
                                                      std::int64_t page, int kv_head) {
  if constexpr (T::CONTIG) {
    constexpr int dim = kValue ? T::DV : T::DK;
    return ((seq * p.contig_capacity + token) * p.view.kv.kv_heads + kv_head) * dim;
  } else {
    const CacheStrides& st = kValue ? p.view.kv.value_strides : p.view.kv.key_strides;
    const int slot = token - block_of(p, token) * p.view.kv.block_size;
    return page * st.block + slot * st.slot + kv_head * st.head;
  }
}

// Loads one K or V tile into a swizzled smem tile. `row_offsets` holds each
// key's element offset (-1: outside [key_lo, key_hi), zero-filled: slots past
// seq_len may hold NaN, and P = 0 times NaN would poison the output).
template <class T, bool kValue>
__device__ __forceinline__ void load_kv_tile(const AttnParams& p, std::uint32_t tile_smem,
                                             const std::int64_t* row_offsets) {
  constexpr int dim = kValue ? T::DV : T::DK;
  constexpr int kChunks = dim / 8;  // 16-byte chunks of one BF16/F16 row
  const char* base = static_cast<const char*>(
      kValue ? (T::CONTIG ? p.contig_value : p.view.kv.value_data) : (T::CONTIG ? p.contig_key : p.view.kv.key_data));
  if constexpr (!T::kFp8) {
    constexpr int kTotal = T::kBlockN * kChunks;
#pragma unroll
    for (int it = 0; it < (kTotal + T::kThreads - 1) / T::kThreads; ++it) {
      const int i = it * T::kThreads + threadIdx.x;
      if (kTotal % T::kThreads != 0 && i >= kTotal) break;
      const int row = i / kChunks, chunk = i % kChunks;
      const std::int64_t offset = row_offsets[row];
      const bool valid = offset >= 0;
      const char* src = valid ? base + (offset + chunk * 8) * 2 : base;
      cp_async16(tile_smem + swz<kChunks>(row, chunk), src, valid);
    }
  } else {
    constexpr int kSrcChunks = dim / 16;  // 16 FP8 elements per 16-byte load
    constexpr int kTotal = T::kBlockN * kSrcChunks;
#pragma unroll
    for (int it = 0; it < (kTotal + T::kThreads - 1) / T::kThreads; ++it) {
      const int i = it * T::kThreads + threadIdx.x;
      if (kTotal % T::kThreads != 0 && i >= kTotal) break;
      const int row = i / kSrcChunks, src_chunk = i % kSrcChunks;
      const std::int64_t offset = row_offsets[row];
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (offset >= 0) raw = __ldg(reinterpret_cast<const uint4*>(base + offset + src_chunk * 16));
      uint4 lo, hi;
      fp8x16_widen<T::KV>(raw, lo, hi);
      st_shared16(tile_smem + swz<kChunks>(row, 2 * src_chunk), lo);
      st_shared16(tile_smem + swz<kChunks>(row, 2 * src_chunk + 1), hi);
    }
  }
}

// A table load issued where it is written: volatile asm keeps it ahead of the
// tile's mma (also volatile), so its latency hides behind them instead of
// stalling the barrier at the end of the iteration.
__device__ __forceinline__ std::int32_t ld_global_nc(const std::int32_t* ptr) {
  std::int32_t v;
  asm volatile("ld.global.nc.s32 %0, [%1];\n" : "=r"(v) : "l"(ptr));
  return v;
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh x = 1 - 2 / (2^(2 x log2 e) + 1) with one ex2.approx and one
// rcp.approx: an absolute error under 5e-7 (4.1e-7 at x near -0.9, simulated
// on the CPU with both approximations at 2^-22 and 2^-23 relative error; a
// softcap of 30 moves a logit by about 1e-5), saturating to +-1 through
// inf and 0, in 5 instructions where tanhf takes about 16 and a branch
// (attn_sm90_ws.cu's PAGECHECK_WS_FAST_TANH).
__device__ __forceinline__ float tanh_ex2(float x) {
  const float e = fast_exp2(x * 2.8853900817779268f);
  return fmaf(-2.f, fast_rcp(e + 1.f), 1.f);
}

// add_sink_row without branches (attn_sm90_ws.cu's PAGECHECK_WS_FLAT_STATS):
// the sink is -inf where there is none (or where add_sink_row ignores it:
// -inf or NaN), so the row's max stays and its keep factor is 2^0 = 1; a
// row with no key (m = -inf) keeps nothing of its (zero) sum. The same
// values as add_sink_row up to exp2's approximation, with no jump for the
// instruction fetch to follow.
__device__ __forceinline__ float add_sink_row_flat(const float* sinks, int head, float& m, float& sum) {
  float s2 = -INFINITY;
  if (sinks != nullptr) {
    const float v = sinks[head] * 1.4426950408889634f;
    s2 = v > -INFINITY ? v : -INFINITY;
  }
  const float mx = fmaxf(m, s2);
  const float keep = m == -INFINITY ? 0.f : fast_exp2(m - mx);
  const float add = s2 == -INFINITY ? 0.f : fast_exp2(s2 - mx);
  sum = sum * keep + add;
  m = mx;
  return keep;
}

// One query tile of the prefill kernels (this file's, attn_sm90.cu's and
// attn_sm90_ws.cu's): rows row0 .. row0 + kBlockM - 1 of (sequence seq, KV
// head kv_head), row r being token q_begin + r / group and query head
// kv_head * group + r % group, and the keys [key_lo, key_hi) that some row
// of it sees (causal: up to the last row's position; window: from the first
// row's). Positions are absolute: token j of the query is at pos0 + j.
struct QueryTile {
  std::int64_t seq = 0;
  std::int64_t q_begin = 0;
  int kv_head = 0;
  int row0 = 0, rows_total = 0;
  int seq_len = 0;
  int pos0 = 0, min_pos = 0, max_pos = 0;
  int key_lo = 0, key_hi = 0;
  std::int64_t table_begin = 0;  // the sequence's first block-table entry (query_tile<.., true>)

  // The key tiles of kBlockN keys it sees: [first_key_tile, end_key_tile).
  template <int kBlockN>
  __device__ __forceinline__ int first_key_tile() const {
    return key_lo / kBlockN;
  }
  template <int kBlockN>
  __device__ __forceinline__ int end_key_tile() const {
    return (key_hi + kBlockN - 1) / kBlockN;
  }
  // Whether key tile [n0, n0 + kBlockN) needs the mask: it crosses
  // [key_lo, key_hi), a row's causal limit (the first row's position is the
  // lowest) or a row's window start (the last row's is the highest).
  template <int kBlockN>
  __device__ __forceinline__ bool needs_mask(int n0, bool causal, std::int64_t window) const {
    return n0 + kBlockN > key_hi || n0 < key_lo || (causal && n0 + kBlockN - 1 > min_pos) ||
           (window > 0 && n0 <= max_pos - window);
  }
};

// The per-sequence values a query tile is decoded from, loaded apart from
// the decoding so that a persistent kernel can issue the loads of its next
// tile early (attn_sm90_ws.cu).
struct QueryTileLoads {
  std::int64_t q_begin = 0, q_end = 0;
  int seq_len = 0;
  std::int64_t table_begin = 0;
};

template <bool kTable = false>
__device__ __forceinline__ QueryTileLoads query_tile_loads(const AttnParams& p, std::int64_t seq) {
  const DeviceCaseView& view = p.view;
  QueryTileLoads ld;
  ld.q_begin = view.query_start_loc[seq];
  ld.q_end = view.query_start_loc[seq + 1];
  ld.seq_len = view.kv.seq_lens[seq];
  if constexpr (kTable) ld.table_begin = view.kv.page_indptr[seq];
  return ld;
}

// Tile `tile` of (seq, kv_head) from its sequence's values; false when it
// holds no row of its sequence (a shorter query than the batch's longest).
template <int kBlockM>
__device__ __forceinline__ bool query_tile_from(const AttnParams& p, std::int64_t seq, int kv_head, int tile,
                                                const QueryTileLoads& ld, QueryTile& k) {
  const DeviceCaseView& view = p.view;
  k.seq = seq;
  k.kv_head = kv_head;
  k.q_begin = ld.q_begin;
  k.table_begin = ld.table_begin;
  const int seq_len = ld.seq_len;
  const int q_len = static_cast<int>(ld.q_end - ld.q_begin);
  k.seq_len = seq_len;
  k.rows_total = q_len * p.group;
  k.row0 = tile * kBlockM;
  if (k.row0 >= k.rows_total) return false;
  k.pos0 = seq_len - q_len;
  const int last_row = min(k.row0 + kBlockM, k.rows_total) - 1;
  k.min_pos = k.pos0 + k.row0 / p.group;
  k.max_pos = k.pos0 + last_row / p.group;
  k.key_lo = 0;
  k.key_hi = seq_len;
  if (view.causal) k.key_hi = max(0, min(seq_len, k.max_pos + 1));
  if (view.window > 0)
    k.key_lo = static_cast<int>(max(static_cast<std::int64_t>(0), k.min_pos - view.window + 1));
  k.key_lo = min(k.key_lo, k.key_hi);
  return true;
}

// Tile `tile` of (seq, kv_head); false when it holds no row of its
// sequence. kTable: also the sequence's first block-table entry, loaded
// beside the other per-sequence values so that the latencies overlap.
template <int kBlockM, bool kTable = false>
__device__ __forceinline__ bool query_tile(const AttnParams& p, std::int64_t seq, int kv_head, int tile,
                                           QueryTile& k) {
  return query_tile_from<kBlockM>(p, seq, kv_head, tile, query_tile_loads<kTable>(p, seq), k);
}

// The one-CTA-per-tile kernels' work order: block w is tile
// tiles_per_seq - 1 - w / (num_seqs * kv_heads) (heaviest first: the latest
// tokens see the most keys under causal masking) of sequence
// w % num_seqs, KV head (w / num_seqs) % kv_heads.
template <int kBlockM, bool kTable = false>
__device__ __forceinline__ bool block_query_tile(const AttnParams& p, QueryTile& k) {
  const std::int64_t work = blockIdx.x;
  const std::int64_t num_seqs = p.view.kv.num_seqs;
  const int kv_heads = p.view.kv.kv_heads;
  return query_tile<kBlockM, kTable>(p, work % num_seqs, static_cast<int>((work / num_seqs) % kv_heads),
                             p.tiles_per_seq - 1 - static_cast<int>(work / (num_seqs * kv_heads)), k);
}

// ---- the kernel -------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) attn_kernel(const __grid_constant__ AttnParams p) {
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, DK = T::DK, DV = T::DV;
  constexpr int kRB = T::kRowBlocks;
  constexpr int kNBlocks = kBlockN / 8;  // n8 blocks of S
  constexpr int kDBlocks = DV / 8;       // n8 blocks of O
  const DeviceCaseView& view = p.view;

  QueryTile qt;
  if (!block_query_tile<kBlockM, !T::CONTIG>(p, qt)) return;
  const auto& [seq, q_begin, kv_head, row0, rows_total, seq_len, pos0, min_pos, max_pos, key_lo, key_hi, table_begin] =
      qt;
  const int tile_first = qt.first_key_tile<kBlockN>(), tile_end = qt.end_key_tile<kBlockN>();
  const int group = p.group;

  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t q_smem = smem_u32(smem);
  const std::uint32_t k_smem = q_smem + T::kQBytes;
  const std::uint32_t v_smem = k_smem + 2 * T::kKBytes;
  const bool split_q = p.split_query != 0;
  const std::uint32_t q_lo_smem = q_smem + T::kSmemBytes;  // split query only: Q_lo, as Q
  std::int64_t* row_offsets = reinterpret_cast<std::int64_t*>(smem + T::kQBytes + 2 * T::kKBytes + 2 * T::kVBytes);
  // row_offsets[(stage * 2 + is_value) * kBlockN + key]

  // Threads [0, kBlockN) compute the K offset of key threadIdx.x of a tile,
  // threads [kBlockN, 2 kBlockN) its V offset (every warp does the same
  // share, so no warp holds the barrier). The page is read early and used
  // late, so the table load's latency hides behind the mma.
  const int offset_key = static_cast<int>(threadIdx.x) % kBlockN;
  const bool offset_is_value = static_cast<int>(threadIdx.x) >= kBlockN;
  const bool offset_thread = static_cast<int>(threadIdx.x) < 2 * kBlockN;
  const auto tile_page = [&](int kt) -> std::int32_t {
    const int key = kt * kBlockN + offset_key;
    if (T::CONTIG || !offset_thread || key < key_lo || key >= key_hi) return 0;
    return ld_global_nc(view.kv.page_indices + table_begin + block_of(p, key));
  };
  const auto store_offsets = [&](int kt, int stage, std::int32_t page) {
    if (!offset_thread) return;
    const int key = kt * kBlockN + offset_key;
    const bool valid = key >= key_lo && key < key_hi;
    std::int64_t offset = -1;
    if (valid)
      offset = offset_is_value ? kv_row_offset<T, true>(p, seq, key, page, kv_head)
                               : kv_row_offset<T, false>(p, seq, key, page, kv_head);
    row_offsets[stage * 2 * kBlockN + threadIdx.x] = offset;  // [stage][K/V][key]
  };

  // Q tile -> smem (operand type), rows past the sequence's query are zeros.
  {
    const QTileSource qs = q_tile_source<T::kF16>(view, q_begin, kv_head, group, rows_total);
    for (int i = threadIdx.x; i < kBlockM * T::kChunksK; i += T::kThreads) {
      const int r = i / T::kChunksK, chunk = i % T::kChunksK;
      load_q_chunk<T::kF16, DK>(qs, row0 + r, chunk, q_smem + swz<T::kChunksK>(r, chunk), split_q, q_lo_smem - q_smem);
    }
    cp_async_commit();
  }
  if (tile_first < tile_end) {
    store_offsets(tile_first, 0, tile_page(tile_first));
    if (tile_first + 1 < tile_end) store_offsets(tile_first + 1, 1, tile_page(tile_first + 1));
    __syncthreads();
    load_kv_tile<T, false>(p, k_smem, row_offsets);
    load_kv_tile<T, true>(p, v_smem, row_offsets + kBlockN);
  }
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row = warp * 16 * kRB;  // first row of this warp inside the tile

  float o[kRB][kDBlocks][4];
  float m[kRB][2], l[kRB][2];  // running max (log2 domain) and partial sum of this thread's rows
#pragma unroll
  for (int mb = 0; mb < kRB; ++mb) {
#pragma unroll
    for (int d = 0; d < kDBlocks; ++d) o[mb][d][0] = o[mb][d][1] = o[mb][d][2] = o[mb][d][3] = 0.f;
    m[mb][0] = m[mb][1] = -INFINITY;
    l[mb][0] = l[mb][1] = 0.f;
  }
  const bool has_softcap = p.softcap_out != 0.f;
  // Without softcap the logit scale is folded into the exponent (one FFMA).
  const float exp_scale = has_softcap ? 1.f : p.logit_mul;

  for (int kt = tile_first; kt < tile_end; ++kt) {
    const int stage = (kt - tile_first) & 1;
    // Offsets of tile kt + 2 go where tile kt's were (its loads were issued
    // an iteration ago); the page is loaded now and stored after the mma.
    const bool prefetch_offsets = kt + 2 < tile_end;
    const std::int32_t next_page = prefetch_offsets ? tile_page(kt + 2) : 0;
    if (kt + 1 < tile_end) {
      const std::int64_t* next = row_offsets + (stage ^ 1) * 2 * kBlockN;
      load_kv_tile<T, false>(p, k_smem + (stage ^ 1) * T::kKBytes, next);
      load_kv_tile<T, true>(p, v_smem + (stage ^ 1) * T::kVBytes, next + kBlockN);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const std::uint32_t ks = k_smem + stage * T::kKBytes;
    const std::uint32_t vs = v_smem + stage * T::kVBytes;

    // S = Q K^T for this warp's rows x kBlockN keys (raw dot products).
    float s[kRB][kNBlocks][4];
#pragma unroll
    for (int mb = 0; mb < kRB; ++mb)
#pragma unroll
      for (int nb = 0; nb < kNBlocks; ++nb) s[mb][nb][0] = s[mb][nb][1] = s[mb][nb][2] = s[mb][nb][3] = 0.f;
    const auto qk = [&](std::uint32_t q_tile) {
#pragma unroll
      for (int kk = 0; kk < DK / 16; ++kk) {
        std::uint32_t qa[kRB][4];
#pragma unroll
        for (int mb = 0; mb < kRB; ++mb)
          ldmatrix_x4(q_tile + swz<T::kChunksK>(warp_row + mb * 16 + (lane % 16), 2 * kk + lane / 16), qa[mb][0],
                      qa[mb][1], qa[mb][2], qa[mb][3]);
#pragma unroll
        for (int nb = 0; nb < kNBlocks; nb += 2) {
          // b0,b1: keys nb*8.. ; b2,b3: keys (nb+1)*8..; dims 16*kk .. 16*kk+15.
          std::uint32_t b0, b1, b2, b3;
          ldmatrix_x4(ks + swz<T::kChunksK>(nb * 8 + (lane % 8) + (lane / 16) * 8, 2 * kk + (lane / 8) % 2), b0, b1,
                      b2, b3);
#pragma unroll
          for (int mb = 0; mb < kRB; ++mb) {
            mma16816<T::kF16>(s[mb][nb], qa[mb], b0, b1);
            mma16816<T::kF16>(s[mb][nb + 1], qa[mb], b2, b3);
          }
        }
      }
    };
    qk(q_smem);
    // Split query: Q_lo K^T over the same K tile (its fragments read again).
    if (split_q) qk(q_lo_smem);

    // Softcap (log2 domain afterwards), then the mask; uniform branches
    // around whole unrolled loops keep the common path branch free.
    if (has_softcap) {
#pragma unroll
      for (int mb = 0; mb < kRB; ++mb)
#pragma unroll
        for (int nb = 0; nb < kNBlocks; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mb][nb][e] = p.softcap_out * tanhf(s[mb][nb][e] * p.logit_mul);
    }
    const int n0 = kt * kBlockN;
    if (qt.needs_mask<kBlockN>(n0, view.causal, view.window)) {
      const bool causal = view.causal;
      const std::int64_t window = view.window;
#pragma unroll
      for (int mb = 0; mb < kRB; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int pos = pos0 + (row0 + warp_row + mb * 16 + g + 8 * h) / group;
          const int vis_hi = min(key_hi, causal ? pos + 1 : key_hi);  // keys < vis_hi
          const int vis_lo = window > 0 ? static_cast<int>(max(static_cast<std::int64_t>(key_lo), pos - window + 1))
                                        : key_lo;  // keys >= vis_lo
#pragma unroll
          for (int nb = 0; nb < kNBlocks; ++nb)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = n0 + nb * 8 + 2 * t + e;
              if (key < vis_lo || key >= vis_hi) s[mb][nb][2 * h + e] = -INFINITY;
            }
        }
    }

    // Online softmax: new row maxima, rescale, probabilities.
    float alphas[kRB][2];
#pragma unroll
    for (int mb = 0; mb < kRB; ++mb) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // Pairwise (tree) reductions: short dependency chains.
        float part[kNBlocks];
#pragma unroll
        for (int nb = 0; nb < kNBlocks; ++nb) part[nb] = fmaxf(s[mb][nb][2 * h], s[mb][nb][2 * h + 1]);
#pragma unroll
        for (int width = kNBlocks / 2; width > 0; width /= 2)
#pragma unroll
          for (int i = 0; i < width; ++i) part[i] = fmaxf(part[i], part[i + width]);
        float mx = part[0];
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[mb][h], mx * exp_scale);
        // A row that has seen no key yet keeps max -inf: subtract 0 instead.
        const float ref = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = fast_exp2(m[mb][h] - ref);
        m[mb][h] = m_new;
#pragma unroll
        for (int nb = 0; nb < kNBlocks; ++nb) {
          s[mb][nb][2 * h] = fast_exp2(fmaf(s[mb][nb][2 * h], exp_scale, -ref));
          s[mb][nb][2 * h + 1] = fast_exp2(fmaf(s[mb][nb][2 * h + 1], exp_scale, -ref));
          part[nb] = s[mb][nb][2 * h] + s[mb][nb][2 * h + 1];
        }
#pragma unroll
        for (int width = kNBlocks / 2; width > 0; width /= 2)
#pragma unroll
          for (int i = 0; i < width; ++i) part[i] += part[i + width];
        const float sum = part[0];
        l[mb][h] = l[mb][h] * alpha + sum;
        alphas[mb][h] = alpha;
      }
    }
    // Rescale O only when some row of the warp has a new maximum (after the
    // first few tiles, most tiles change no row's maximum).
    bool rescale = false;
#pragma unroll
    for (int mb = 0; mb < kRB; ++mb) rescale |= alphas[mb][0] != 1.f || alphas[mb][1] != 1.f;
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mb = 0; mb < kRB; ++mb)
#pragma unroll
        for (int d = 0; d < kDBlocks; ++d) {
          o[mb][d][0] *= alphas[mb][0];
          o[mb][d][1] *= alphas[mb][0];
          o[mb][d][2] *= alphas[mb][1];
          o[mb][d][3] *= alphas[mb][1];
        }
    }

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      std::uint32_t a[kRB][4];
#pragma unroll
      for (int mb = 0; mb < kRB; ++mb) {
        a[mb][0] = pack2<T::kF16>(s[mb][2 * kk][0], s[mb][2 * kk][1]);
        a[mb][1] = pack2<T::kF16>(s[mb][2 * kk][2], s[mb][2 * kk][3]);
        a[mb][2] = pack2<T::kF16>(s[mb][2 * kk + 1][0], s[mb][2 * kk + 1][1]);
        a[mb][3] = pack2<T::kF16>(s[mb][2 * kk + 1][2], s[mb][2 * kk + 1][3]);
      }
#pragma unroll
      for (int db = 0; db < kDBlocks; db += 2) {
        std::uint32_t b0, b1, b2, b3;
        const int key = kk * 16 + (lane % 8) + ((lane / 8) & 1) * 8;
        ldmatrix_x4_trans(vs + swz<T::kChunksV>(key, db + lane / 16), b0, b1, b2, b3);
#pragma unroll
        for (int mb = 0; mb < kRB; ++mb) {
          mma16816<T::kF16>(o[mb][db], a[mb], b0, b1);
          mma16816<T::kF16>(o[mb][db + 1], a[mb], b2, b3);
        }
      }
    }
    if (prefetch_offsets) store_offsets(kt + 2, stage, next_page);
    __syncthreads();  // the next iteration's loads overwrite this stage
  }
  cp_async_wait<0>();  // the Q copy when no K/V tile ran

  // Normalise and store; rows past the query are not ours.
#pragma unroll
  for (int mb = 0; mb < kRB; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mb][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = row0 + warp_row + mb * 16 + g + 8 * h;
      if (row >= rows_total) continue;
      const std::int64_t token = q_begin + row / group;
      const int head = kv_head * group + row % group;
      float m_row = m[mb][h];
      const float keep = add_sink_row(view.sinks, head, m_row, sum);
      const float inv = sum > 0.f ? p.out_scale * keep / sum : 0.f;
      const std::int64_t out_row = (token * view.q_heads + head) * DV;
#pragma unroll
      for (int d = 0; d < kDBlocks; ++d)
        store2(view.output_dtype, view.output, out_row + d * 8 + 2 * t, o[mb][d][2 * h] * inv,
               o[mb][d][2 * h + 1] * inv);
      if (view.lse != nullptr && t == 0)
        view.lse[token * view.q_heads + head] = sum > 0.f ? (m_row + log2f(sum)) * 0.6931471805599453f : -INFINITY;
    }
  }
}

}  // namespace pagecheck::gpu::attn

// ---- launch helpers (host) --------------------------------------------------

#include <climits>
#include <string>

#include "common/cuda_check.cuh"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu::attn {

// The scalars of AttnParams that come from the view.
inline AttnParams make_params(const DeviceCaseView& view) {
  AttnParams p;
  p.view = view;
  p.group = view.kv.kv_heads > 0 ? view.q_heads / view.kv.kv_heads : 1;
  constexpr float kLog2e = 1.4426950408889634f;
  const float logit = view.scale * view.k_scale;
  if (view.softcap > 0.f) {
    p.logit_mul = logit / view.softcap;
    p.softcap_out = view.softcap * kLog2e;
  } else {
    p.logit_mul = logit * kLog2e;
    p.softcap_out = 0.f;
  }
  p.out_scale = view.v_scale;
  // Operand type: F16 for F16 caches, else BF16 (BF16 and fp8 caches, and
  // the gather's BF16 workspace); F32 caches take the CUDA-core kernel.
  const bool f16_operands = view.kv_dtype == DType::F16;
  p.split_query = view.kv_dtype != DType::F32 &&
                  (view.query_dtype == DType::F32 || (view.query_dtype == DType::F16 && !f16_operands));
  make_fast_div(static_cast<std::uint32_t>(view.kv.block_size > 0 ? view.kv.block_size : 1), p.block_magic,
                p.block_shift);
  return p;
}

// Shape checks every attention launcher shares; names the value at fault.
inline Status check_common(const DeviceCaseView& view) {
  if (view.kv.kv_heads <= 0 || view.q_heads % view.kv.kv_heads != 0)
    return invalid_input("q_heads " + std::to_string(view.q_heads) + " is not a multiple of kv_heads " +
                         std::to_string(view.kv.kv_heads));
  for (DType d : {view.query_dtype, view.output_dtype})
    if (d != DType::F32 && d != DType::F16 && d != DType::BF16)
      return invalid_input("query/output dtype " + std::string(dtype_name(d)) + " is not built; built: F32, F16, BF16");
  const auto misaligned = [](const void* ptr) { return (reinterpret_cast<std::uintptr_t>(ptr) & 15u) != 0; };
  if (misaligned(view.query) || misaligned(view.output) || misaligned(view.kv.key_data) ||
      misaligned(view.kv.value_data))
    return invalid_input("query, output, key and value buffers must be 16-byte aligned");
  if (view.kv.block_size < 1 || view.kv.block_size > 256)
    return invalid_input("block_size " + std::to_string(view.kv.block_size) + " is outside 1..256");
  return {};
}

// One CTA per (query tile of T::kBlockM rows, sequence, KV head), heaviest
// tiles first: the grid of `kernel` (attn_kernel<T> here, attn_sm90.cu's
// kernel there), which takes T::kThreads threads and T::kSmemBytes of
// dynamic shared memory (T::kSplitQueryBytes more for a split query).
template <class T>
Status launch_query_tiles(void (*kernel)(AttnParams), AttnParams p, cudaStream_t stream) {
  const DeviceCaseView& view = p.view;
  const std::int64_t rows = static_cast<std::int64_t>(view.max_q_len) * p.group;
  p.tiles_per_seq = static_cast<std::int32_t>((rows + T::kBlockM - 1) / T::kBlockM);
  const std::int64_t ctas = static_cast<std::int64_t>(p.tiles_per_seq) * view.kv.num_seqs * view.kv.kv_heads;
  if (ctas == 0) return {};
  if (ctas > INT_MAX)
    return invalid_input("attention grid of " + std::to_string(ctas) + " CTAs exceeds the 1-D grid limit");
  // A split query (AttnParams::split_query) keeps its lo tile behind
  // everything else.
  const int smem = T::kSmemBytes + (p.split_query ? T::kSplitQueryBytes : 0);
  CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<static_cast<unsigned>(ctas), T::kThreads, smem, stream>>>(p);
  CUDA_TRY_LAUNCH();
  return {};
}

template <class T>
Status launch_attn(AttnParams p, cudaStream_t stream) {
  return launch_query_tiles<T>(attn_kernel<T>, p, stream);
}

}  // namespace pagecheck::gpu::attn
