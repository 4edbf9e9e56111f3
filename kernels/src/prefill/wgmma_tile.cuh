// One consumer warpgroup's step over a key tile, shared by the two wgmma
// attention kernels (attn_sm90.cu, attn_sm90_ws.cu): S = Q K^T for the
// warpgroup's 64 query rows against 128 keys (64 at head dim 256), the mask, the online softmax
// of this thread's two rows (g and g + 8 of its warp's 16), P packed into
// the A-operand registers, and O += P V. The kernels differ in how K/V
// arrive and who waits for what; the arithmetic is this one copy.
// Accumulator layout (wgmma m64nNk16, F32): this thread holds, for n8 block
// nb, s[nb * 4 + 2 h + e] = row g + 8 h, key 8 nb + 2 t + e (t = lane % 4).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "common/exp2_fma.cuh"
#include "prefill/prefill_common.cuh"
#include "prefill/sm90_primitives.cuh"

// The k-steps' descriptors as a base descriptor plus each step's offset
// (desc_at: one add) instead of smem_desc of each step's address (add,
// mask, shift, or, and the constant high word: about 5 instructions each,
// 24 descriptors a key tile). Nsight Compute (session 22, 16 x 512): the
// uniform datapath's descriptor arithmetic was 23% of the consumers'
// instructions in the key-tile loop, 28 of them between the turn's barrier
// and the first wgmma. 0, the default until measured; 1 in a dev build.
#ifndef PAGECHECK_WGMMA_DESC_ADD
#define PAGECHECK_WGMMA_DESC_ADD 0
#endif

namespace pagecheck::gpu::attn {

// A k-step's descriptor: base's plus `bytes`, or smem_desc of the address.
__device__ __forceinline__ std::uint64_t step_desc(std::uint64_t base, std::uint32_t addr, std::uint32_t bytes,
                                                   std::uint32_t leading_bytes) {
  if constexpr (PAGECHECK_WGMMA_DESC_ADD)
    return desc_at(base, bytes);
  else
    return smem_desc(addr + bytes, leading_bytes, 1024);
}

// S = Q K^T (or S += Q_lo K^T after it for a split query): kDK / 16
// k-steps of 16 dims over 128-byte swizzled Q (kRowsQ rows a 64-dim column
// half) and K (kKeys rows a column half; S holds kKeys / 2 floats a thread:
// m64n128 for 128 keys, m64n64 for 64).
template <bool kF16, int kRowsQ, int kKeys, int kDK = 128>
__device__ __forceinline__ void issue_qk(float (&s)[kKeys / 2], std::uint32_t q_wg, std::uint32_t q_lo_wg,
                                         std::uint32_t ks, bool split_q) {
  static_assert(kDK == 64 || kDK == 128 || kDK == 256, "head dims of one, two or four 64-dim column halves");
  const std::uint64_t q0 = smem_desc(q_wg, 16, 1024), k0 = smem_desc(ks, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kDK / 16; ++kk) {
    const std::uint64_t da = step_desc(q0, q_wg, (kk >> 2) * (kRowsQ * 128) + (kk & 3) * 32, 16);
    const std::uint64_t db = step_desc(k0, ks, (kk >> 2) * (kKeys * 128) + (kk & 3) * 32, 16);
    wgmma_ss<kF16, kKeys / 2>(s, da, db, kk > 0);
  }
  if (split_q) {
    const std::uint64_t q_lo0 = smem_desc(q_lo_wg, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < kDK / 16; ++kk) {
      const std::uint64_t da = step_desc(q_lo0, q_lo_wg, (kk >> 2) * (kRowsQ * 128) + (kk & 3) * 32, 16);
      const std::uint64_t db = step_desc(k0, ks, (kk >> 2) * (kKeys * 128) + (kk & 3) * 32, 16);
      wgmma_ss<kF16, kKeys / 2>(s, da, db, true);
    }
  }
}

// S = Q_hi K^T + Q_lo K^T over an FP8 key tile (attn_sm90_ws.cu's FP8-K
// kernel): K as stored (128 keys of 128 one-byte dims, 128-byte swizzled
// rows), Q as two E4M3 parts (kRowsQ rows of 128 bytes each, q_lo_wg the
// second part), four k-steps of 32 dims each; E5M2 keys with kE5M2.
template <bool kE5M2, int kRowsQ>
__device__ __forceinline__ void issue_qk_fp8(float (&s)[64], std::uint32_t q_hi_wg, std::uint32_t q_lo_wg,
                                             std::uint32_t ks) {
  const std::uint64_t hi0 = smem_desc(q_hi_wg, 16, 1024), lo0 = smem_desc(q_lo_wg, 16, 1024),
                      k0 = smem_desc(ks, 16, 1024);
#pragma unroll
  for (int part = 0; part < 2; ++part) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const std::uint64_t da = step_desc(part ? lo0 : hi0, part ? q_lo_wg : q_hi_wg, kk * 32, 16);
      const std::uint64_t db = step_desc(k0, ks, kk * 32, 16);
      wgmma_ss_fp8<kE5M2>(s, da, db, part > 0 || kk > 0);
    }
  }
}

// O += P V: k-steps of 16 keys; V is MN-major (dims contiguous): leading
// byte offset = the next 64-dim column half, stride = 8 keys. kDV 128
// (m64n128, O 64 floats a thread), 64 (m64n64, 32) or 256 (m64n256, 128).
template <bool kF16, int kKeys, int kDV = 128>
__device__ __forceinline__ void issue_pv(float (&o)[kDV / 2], const std::uint32_t (&pa)[kKeys / 16][4],
                                         std::uint32_t vs) {
  const std::uint64_t v0 = smem_desc(vs, kKeys * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    const std::uint64_t dv = step_desc(v0, vs, kk * 16 * 128, kKeys * 128);
    wgmma_rs<kF16>(o, pa[kk], dv);
  }
}

// The mask of key tile n0 for this thread's rows (first_row and
// first_row + 8 of a work tile): row r (token pos_of(r), pos0 + r / group
// for the caller's pos0 and GQA group) sees keys
// [max(key_lo, pos - window + 1), min(key_hi, pos + 1)) (causal; without
// causal up to key_hi; without a window from key_lo); the others become
// -inf. Key n0 + 2 t + c with c = 8 nb + e is compared as c against bounds
// relative to n0 + 2 t, so c stays an immediate. (Computing both rows'
// bounds first and masking after rescheduled a fifth of the ws kernel's
// SASS; this order leaves it as it was.)
template <int N, class PosOf>
__device__ __forceinline__ void mask_tile(float (&s)[N], int n0, int t, int first_row, PosOf pos_of, int key_lo,
                                          int key_hi, bool causal, std::int64_t window) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int pos = pos_of(first_row + 8 * h);
    const int vis_hi = min(key_hi, causal ? pos + 1 : key_hi);
    const int vis_lo = window > 0 ? static_cast<int>(max(static_cast<std::int64_t>(key_lo), pos - window + 1)) : key_lo;
    const int lo_rel = vis_lo - (n0 + 2 * t), hi_rel = vis_hi - (n0 + 2 * t);
#pragma unroll
    for (int nb = 0; nb < N / 4; ++nb)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = nb * 8 + e;
        if (c < lo_rel || c >= hi_rel) s[nb * 4 + 2 * h + e] = -INFINITY;
      }
  }
}

// Row h of this thread's S becomes exp2(S * exp_scale - ref) in place;
// returns the thread's part of the row sum (two chains, half the latency).
// kPolyEvery > 0: every kPolyEvery-th n8 block's exponentials run on the
// FMA pipe (exp2_poly3) instead of MUFU, FlashAttention-4's split, for a
// softmax whose exponentials bind (head dim 64; a developer knob until
// measured: attn_sm90_ws.cu's PAGECHECK_WS_EXP_POLY).
template <int kPolyEvery = 0, int N>
__device__ __forceinline__ float exp_row(float (&s)[N], int h, float exp_scale, float ref) {
  const auto exp2_of = [](int nb, float x) {
    constexpr int kEvery = kPolyEvery > 0 ? kPolyEvery : 1;  // (no % 0, even where unused)
    return kPolyEvery > 0 && nb % kEvery == kEvery - 1 ? exp2_poly3(x) : fast_exp2(x);
  };
  float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
  for (int nb = 0; nb < N / 4; ++nb) {
    s[nb * 4 + 2 * h] = exp2_of(nb, fmaf(s[nb * 4 + 2 * h], exp_scale, -ref));
    s[nb * 4 + 2 * h + 1] = exp2_of(nb, fmaf(s[nb * 4 + 2 * h + 1], exp_scale, -ref));
    sum_a += s[nb * 4 + 2 * h];
    sum_b += s[nb * 4 + 2 * h + 1];
  }
  return sum_a + sum_b;
}

// Online softmax of this thread's two rows: S (scaled by exp_scale, base 2)
// becomes unnormalised P in place, m and l are updated, alphas receive O's
// rescale factors.
template <int N>
__device__ __forceinline__ void softmax_rows(float (&s)[N], float (&m)[2], float (&l)[2], float (&alphas)[2],
                                             float exp_scale) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = fmaxf(m[h], row_max(s, h) * exp_scale);
    const float ref = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet
    const float alpha = fast_exp2(m[h] - ref);
    m[h] = m_new;
    l[h] = l[h] * alpha + exp_row(s, h, exp_scale, ref);
    alphas[h] = alpha;
  }
}

// softmax_rows with a lazy reference (FlashAttention-4's conditional
// rescale): a row keeps its reference max m until a tile's max exceeds it by
// more than kLazySlack (base 2), so the unnormalised P stays below
// 2^kLazySlack (exact in float, and in the 16-bit operand types, whose
// relative rounding does not depend on the magnitude) and O and l are
// rescaled only when a row's reference moves: alphas are 1 otherwise, and
// rescale_o skips the warp's 64 multiplies when all of them are. m is the
// reference, so m + log2(l) is the row's LSE (base 2) as before.
constexpr float kLazySlack = 8.f;
// exp_scales: each row's own scale (the FP8 query of attn_sm90_ws.cu's
// FP8-K kernel carries a power of two a row); a float: one for both rows.
template <int kPolyEvery = 0, int N>
__device__ __forceinline__ void softmax_rows_lazy(float (&s)[N], float (&m)[2], float (&l)[2], float (&alphas)[2],
                                                  const float (&exp_scales)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float exp_scale = exp_scales[h];
    const float m_tile = row_max(s, h) * exp_scale;
    const bool move = m_tile > m[h] + kLazySlack;  // always for a row with no key yet (m = -inf), never for an empty tile
    const float m_new = move ? m_tile : m[h];
    const float ref = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet
    const float alpha = move ? fast_exp2(m[h] - ref) : 1.f;
    m[h] = m_new;
    l[h] = l[h] * alpha + exp_row<kPolyEvery>(s, h, exp_scale, ref);
    alphas[h] = alpha;
  }
}
template <int kPolyEvery = 0, int N>
__device__ __forceinline__ void softmax_rows_lazy(float (&s)[N], float (&m)[2], float (&l)[2], float (&alphas)[2],
                                                  float exp_scale) {
  const float exp_scales[2] = {exp_scale, exp_scale};
  softmax_rows_lazy<kPolyEvery>(s, m, l, alphas, exp_scales);
}

// O's rows times their rescale factors, skipped when no row of the warp moved.
template <int N>
__device__ __forceinline__ void rescale_o(float (&o)[N], const float (&alphas)[2]) {
  if (__any_sync(0xffffffffu, alphas[0] != 1.f || alphas[1] != 1.f)) {
#pragma unroll
    for (int d = 0; d < N / 4; ++d) {
      o[d * 4 + 0] *= alphas[0];
      o[d * 4 + 1] *= alphas[0];
      o[d * 4 + 2] *= alphas[1];
      o[d * 4 + 3] *= alphas[1];
    }
  }
}

// P (registers, operand type) in the A-fragment layout: k-step kk holds
// keys 16 kk .. 16 kk + 15, i.e. S's n8 blocks 2 kk and 2 kk + 1.
template <bool kF16, int kKeys>
__device__ __forceinline__ void pack_p(const float (&s)[kKeys / 2], std::uint32_t (&pa)[kKeys / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    pa[kk][0] = pack2<kF16>(s[8 * kk + 0], s[8 * kk + 1]);
    pa[kk][1] = pack2<kF16>(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = pack2<kF16>(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = pack2<kF16>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// FP8 P V (attn_sm90_ws.cu, PAGECHECK_WS_FP8_PV): P of a 128-key tile as
// the A operand of m64n128k32 E4M3 wgmma from registers, in two parts (hi =
// E4M3(p scale), lo = E4M3(p scale - hi): one part misses the default
// tolerances, tests/test_reference.cpp), with no shuffle: pa[2 c] (hi) and
// pa[2 c + 1] (lo) of 32-key step c hold this thread's S entries as they
// lie, keys 32 c + {2t, 2t+1, 8+2t, 9+2t} in registers 0 (row g) and 1
// (row g + 8), 32 c + 16 + the same in 2 and 3; wgmma reads them as k =
// 4t..4t+3 and 16+4t..16+4t+3, so V^T's columns follow that key order
// (transpose_unit_fp8). `scale` keeps the lazy softmax's largest P (2^8)
// inside E4M3's 448.
__device__ __forceinline__ void split_e4m3x4(float a, float b, float c, float d, std::uint32_t& hi,
                                             std::uint32_t& lo) {
  const __nv_fp8x2_storage_t h0 = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t h1 = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  const __half2_raw r0 = __nv_cvt_fp8x2_to_halfraw2(h0, __NV_E4M3);
  const __half2_raw r1 = __nv_cvt_fp8x2_to_halfraw2(h1, __NV_E4M3);
  const float2 f0 = __half22float2(*reinterpret_cast<const __half2*>(&r0));
  const float2 f1 = __half22float2(*reinterpret_cast<const __half2*>(&r1));
  const __nv_fp8x2_storage_t l0 = __nv_cvt_float2_to_fp8x2(make_float2(a - f0.x, b - f0.y), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t l1 = __nv_cvt_float2_to_fp8x2(make_float2(c - f1.x, d - f1.y), __NV_SATFINITE, __NV_E4M3);
  hi = static_cast<std::uint32_t>(h0) | static_cast<std::uint32_t>(h1) << 16;
  lo = static_cast<std::uint32_t>(l0) | static_cast<std::uint32_t>(l1) << 16;
}
template <int kKeys>
__device__ __forceinline__ void pack_p_fp8(const float (&s)[kKeys / 2], std::uint32_t (&pa)[kKeys / 16][4],
                                           float scale) {
#pragma unroll
  for (int c = 0; c < kKeys / 32; ++c) {
    const float* b = s + 16 * c;  // n8 blocks 4c .. 4c + 3: [4 j + e] row g, [4 j + 2 + e] row g + 8
    split_e4m3x4(b[0] * scale, b[1] * scale, b[4] * scale, b[5] * scale, pa[2 * c][0], pa[2 * c + 1][0]);
    split_e4m3x4(b[2] * scale, b[3] * scale, b[6] * scale, b[7] * scale, pa[2 * c][1], pa[2 * c + 1][1]);
    split_e4m3x4(b[8] * scale, b[9] * scale, b[12] * scale, b[13] * scale, pa[2 * c][2], pa[2 * c + 1][2]);
    split_e4m3x4(b[10] * scale, b[11] * scale, b[14] * scale, b[15] * scale, pa[2 * c][3], pa[2 * c + 1][3]);
  }
}
// O += (P_hi + P_lo) V over V^T (128 dim rows of 128 key bytes, 128-byte
// swizzled, as FP8-K's K tile; E5M2 values with kE5M2): two k-steps of 32
// keys each 32 bytes on.
template <bool kE5M2, int kKeys>
__device__ __forceinline__ void issue_pv_fp8(float (&o)[64], const std::uint32_t (&pa)[kKeys / 16][4],
                                             std::uint32_t vs) {
  const std::uint64_t v0 = smem_desc(vs, 16, 1024);
#pragma unroll
  for (int c = 0; c < kKeys / 32; ++c) {
    const std::uint64_t dv = step_desc(v0, vs, c * 32, 16);
    wgmma_rs_fp8<kE5M2>(o, pa[2 * c], dv, 1);
    wgmma_rs_fp8<kE5M2>(o, pa[2 * c + 1], dv, 1);
  }
}

// A row's output scale (out_scale / its sum over the four lanes of the row,
// 0 for a row that saw no key) and its LSE (natural log), from m (base 2)
// and the thread's partial sum l.
__device__ __forceinline__ float row_sum(float l) {
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  return l + __shfl_xor_sync(0xffffffffu, l, 2);
}
__device__ __forceinline__ float row_lse(float m, float sum) {
  return sum > 0.f ? (m + log2f(sum)) * 0.6931471805599453f : -INFINITY;
}

}  // namespace pagecheck::gpu::attn
