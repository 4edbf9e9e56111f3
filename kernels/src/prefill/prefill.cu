// prefill: attention of every query token of each sequence over its pages
// (prompt prefill, chunked prefill, mixed prefill + decode batches; q_len = 1
// is just a short tile).
//
// Variants (one switch in launch_prefill picks them):
//   attn_sm90.cu's wgmma kernel on a compute capability 9.0 device for head
//       dim 128 and KV BF16 / F16 / F8_E4M3 / F8_E5M2 (sm_90a build only;
//       PAGECHECK_ATTN_KERNEL=mma skips it); otherwise:
//   attn_kernel<AttnTraits<DK, DV, KV, false>>  (prefill_common.cuh)
//       tensor cores, mma.sync m16n8k16; KV BF16 / F16 (F16 operands) /
//       F8_E4M3 / F8_E5M2 (widened to BF16 in shared memory, scales folded
//       into the logit scale and the output). Query F32/F16 is rounded to the
//       operand type on load.
//   prefill_f32_kernel<DK, DV>   F32 K/V on CUDA cores: one warp per (query
//       token, query head), float accumulation throughout; also every ALiBi
//       case, for every cache dtype (issue 23: the tensor-core kernels do
//       not take the bias yet).
// Head dims built: 64, 128, 256 and 192/128 (K/V); issue 23's 32, 80, 96,
// 112 and 120 on prefill_f32_kernel, for every cache dtype.
//
// Notes (H200, see the report and docs/performance.md):
//   Shapes: 32 query / 8 KV heads, d128, BF16, block 16, shuffled pages,
//   causal; FLOPs = 4 * 128 * visible keys per query head per token; CUDA
//   events, median of 15, L2 flushed before each repeat
//   (kernels/src/dev/prefill_dev.cu bench), H200, 2026-12-02:
//     8 x 2048        1.168 ms  235.4 TFLOP/s   (target 250; FA2 300, cuDNN 534)
//     1 x 8192        2.053 ms  267.8 TFLOP/s   (FA2 317, cuDNN 604)
//     16 x 512        0.218 ms  158.2 TFLOP/s   (FA2 172, cuDNN 297)
//     chunked 4 x 512 new over 4096 cached   0.570 ms  256.3 TFLOP/s
//   History at 8 x 2048: 16 rows per warp, 8 warps, Q in registers: 91;
//   FA2 layout (4 warps x 32 rows, Q re-read from smem, 2 CTAs/SM): 143;
//   branch-free softmax (per-element softcap/mask branches had split the
//   loop into tiny blocks, 2x the instructions): 216; table load issued
//   ahead of the mma: 226; block division by multiply, offset work spread
//   over all four warps, tree reductions: 235.
//   Where it stands: 255 registers -> 2 CTAs (8 warps) per SM, latency bound
//   (ncu: one eligible warp in ~1/3 of cycles), ldmatrix of Q, K and V moves
//   40 KB of smem per warp per 64-key tile; each CTA's prologue (Q, table,
//   first tile) is not overlapped with its own work, which is why 8 x 2048
//   (16 key tiles per CTA on average) runs 12% below 1 x 8192 (64).
//   Past FlashAttention-2 takes Hopper's wgmma: on compute capability 9.0
//   launch_prefill runs attn_sm90.cu's kernel for head dim 128 (16-bit and
//   FP8 K/V): 8 x 2048 294 TFLOP/s, 1 x 8192 371 (docs/performance.md).
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

using attn::AttnParams;
using attn::AttnTraits;
using attn::KvKind;

// ---- F32 K/V: CUDA cores --------------------------------------------------

__device__ __forceinline__ float load1(DType dtype, const void* base, std::int64_t index) {
  if (dtype == DType::F32) return static_cast<const float*>(base)[index];
  if (dtype == DType::F16) return __half2float(static_cast<const __half*>(base)[index]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
}
// One K or V element of any built cache dtype (fp8 widened; the scales are
// in logit_mul and out_scale as for every kernel).
__device__ __forceinline__ float load_kv1(DType dtype, const void* base, std::int64_t index) {
  if (dtype == DType::F8_E4M3 || dtype == DType::F8_E5M2) {
    const __nv_fp8_storage_t v = static_cast<const __nv_fp8_storage_t*>(base)[index];
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, dtype == DType::F8_E4M3 ? __NV_E4M3 : __NV_E5M2)));
  }
  return load1(dtype, base, index);
}
__device__ __forceinline__ void store1(DType dtype, void* base, std::int64_t index, float x) {
  if (dtype == DType::F32)
    static_cast<float*>(base)[index] = x;
  else if (dtype == DType::F16)
    static_cast<__half*>(base)[index] = __float2half_rn(x);
  else
    static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(x);
}

constexpr int kF32Warps = 4;  // query heads per CTA

// grid.x = max_q_len * num_seqs (token index major), grid.y = ceil(q_heads / 4).
template <int DK, int DV>
__global__ void __launch_bounds__(kF32Warps * 32) prefill_f32_kernel(const __grid_constant__ AttnParams p) {
  const DeviceCaseView& view = p.view;
  const std::int64_t seq = blockIdx.x % view.kv.num_seqs;
  const int i = static_cast<int>(blockIdx.x / view.kv.num_seqs);
  const int head = blockIdx.y * kF32Warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const std::int64_t q_begin = view.query_start_loc[seq];
  const int q_len = static_cast<int>(view.query_start_loc[seq + 1] - q_begin);
  if (i >= q_len || head >= view.q_heads) return;
  const int kv_head = head / p.group;
  const int seq_len = view.kv.seq_lens[seq];
  const int pos = seq_len - q_len + i;
  const std::int64_t token = q_begin + i;

  // Lane l holds dims l, l + 32, ...; head dims that are not a multiple of
  // 32 (issue 23's 80, 112, 120) leave the last lanes' last dim empty.
  constexpr int kKSlots = (DK + 31) / 32, kVSlots = (DV + 31) / 32;
  const auto k_in = [&](int k) { return DK % 32 == 0 || lane + 32 * k < DK; };
  const auto v_in = [&](int k) { return DV % 32 == 0 || lane + 32 * k < DV; };
  float q[kKSlots];
#pragma unroll
  for (int k = 0; k < kKSlots; ++k)
    q[k] = k_in(k) ? load1(view.query_dtype, view.query, (token * view.q_heads + head) * DK + lane + 32 * k) : 0.f;
  float acc[kVSlots];
#pragma unroll
  for (int k = 0; k < kVSlots; ++k) acc[k] = 0.f;
  float m = -INFINITY, l = 0.f;

  int key_lo = 0, key_hi = seq_len;
  if (view.causal) key_hi = max(0, min(seq_len, pos + 1));
  if (view.window > 0) key_lo = static_cast<int>(max(static_cast<std::int64_t>(0), pos - view.window + 1));
  const DType kv_dtype = view.kv_dtype;
  // ALiBi: logit += slope * (key position - query position), in base 2
  // like the logits, after the cap (the reference's order).
  const float alibi2 = view.alibi_slopes != nullptr ? view.alibi_slopes[head] * 1.4426950408889634f : 0.f;
  for (int j = key_lo; j < key_hi; ++j) {
    if (!key_visible(j, pos, view.causal, view.window)) continue;
    const std::int64_t krow = view.kv.key_offset(seq, j, kv_head);
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < kKSlots; ++k)
      if (k_in(k)) dot += q[k] * load_kv1(kv_dtype, view.kv.key_data, krow + lane + 32 * k);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    float x = p.softcap_out != 0.f ? p.softcap_out * tanhf(dot * p.logit_mul) : dot * p.logit_mul;
    x += alibi2 * static_cast<float>(j - pos);
    const float m_new = fmaxf(m, x);
    const float alpha = exp2f(m - m_new);  // m = -inf at the first key: 0
    const float prob = exp2f(x - m_new);
    l = l * alpha + prob;
    m = m_new;
    const std::int64_t vrow = view.kv.value_offset(seq, j, kv_head);
#pragma unroll
    for (int k = 0; k < kVSlots; ++k)
      if (v_in(k)) acc[k] = acc[k] * alpha + prob * load_kv1(kv_dtype, view.kv.value_data, vrow + lane + 32 * k);
  }
  const float keep = attn::add_sink_row(view.sinks, head, m, l);  // m, l: the row's with the sink
  const float inv = l > 0.f ? p.out_scale * keep / l : 0.f;
#pragma unroll
  for (int k = 0; k < kVSlots; ++k)
    if (v_in(k)) store1(view.output_dtype, view.output, (token * view.q_heads + head) * DV + lane + 32 * k, acc[k] * inv);
  if (view.lse != nullptr && lane == 0)
    view.lse[token * view.q_heads + head] = l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : -INFINITY;
}

template <int DK, int DV>
Status launch_f32(AttnParams p, cudaStream_t stream) {
  const std::int64_t blocks_x = static_cast<std::int64_t>(p.view.max_q_len) * p.view.kv.num_seqs;
  if (blocks_x == 0) return {};
  if (blocks_x > INT_MAX) return invalid_input("max_q_len * num_seqs exceeds the grid limit");
  const dim3 grid(static_cast<unsigned>(blocks_x), (p.view.q_heads + kF32Warps - 1) / kF32Warps);
  prefill_f32_kernel<DK, DV><<<grid, kF32Warps * 32, 0, stream>>>(p);
  CUDA_TRY_LAUNCH();
  return {};
}

// ---- dispatch ----------------------------------------------------------------

constexpr const char* kBuiltDims = "32, 64, 80, 96, 112, 120, 128, 256, 192/128";
constexpr const char* kBuiltKv = "F32, F16, BF16, F8_E4M3, F8_E5M2";

// Head dims of the tensor-core kernels (and the F32 one).
bool dims_tensor_core(std::int64_t dk, std::int64_t dv) {
  return (dk == dv && (dk == 64 || dk == 128 || dk == 256)) || (dk == 192 && dv == 128);
}
// Issue 23's head sizes, on the CUDA-core kernel for every cache dtype
// until the tensor-core kernels take them.
bool dims_cuda_core_only(std::int64_t dk, std::int64_t dv) {
  return dk == dv && (dk == 32 || dk == 80 || dk == 96 || dk == 112 || dk == 120);
}
bool dims_built(std::int64_t dk, std::int64_t dv) { return dims_tensor_core(dk, dv) || dims_cuda_core_only(dk, dv); }

// The CUDA-core kernel for the case's head dims (any cache dtype).
Status launch_f32_dims(const AttnParams& p, int dk, int dv, cudaStream_t stream) {
  if (dk == 64 && dv == 64) return launch_f32<64, 64>(p, stream);
  if (dk == 128 && dv == 128) return launch_f32<128, 128>(p, stream);
  if (dk == 256 && dv == 256) return launch_f32<256, 256>(p, stream);
  if (dk == 192 && dv == 128) return launch_f32<192, 128>(p, stream);
  if (dk == dv) {
    switch (dk) {
      case 32: return launch_f32<32, 32>(p, stream);
      case 80: return launch_f32<80, 80>(p, stream);
      case 96: return launch_f32<96, 96>(p, stream);
      case 112: return launch_f32<112, 112>(p, stream);
      case 120: return launch_f32<120, 120>(p, stream);
      default: break;
    }
  }
  return invalid_input("head_dim " + std::to_string(dk) + "/" + std::to_string(dv) + " is not built; built: " +
                       kBuiltDims);
}
bool kv_built(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F8_E4M3 || d == DType::F8_E5M2;
}

template <int DK, int DV>
Status launch_dims(const AttnParams& p, cudaStream_t stream) {
  switch (p.view.kv_dtype) {
    case DType::BF16: return attn::launch_attn<AttnTraits<DK, DV, KvKind::BF16, false>>(p, stream);
    case DType::F16: return attn::launch_attn<AttnTraits<DK, DV, KvKind::F16, false>>(p, stream);
    case DType::F8_E4M3: return attn::launch_attn<AttnTraits<DK, DV, KvKind::E4M3, false>>(p, stream);
    case DType::F8_E5M2: return attn::launch_attn<AttnTraits<DK, DV, KvKind::E5M2, false>>(p, stream);
    case DType::F32: return launch_f32<DK, DV>(p, stream);
    default: break;
  }
  return invalid_input("kv dtype " + std::string(dtype_name(p.view.kv_dtype)) + " is not built; built: " + kBuiltKv);
}

}  // namespace

Applicability prefill_applies(const Case& c) {
  const DType q = c.query.dtype;
  if (q != DType::F32 && q != DType::F16 && q != DType::BF16)
    return {false, "query dtype " + std::string(dtype_name(q)) + " is not built; built: F32, F16, BF16"};
  if (c.key_cache.dtype != c.value_cache.dtype)
    return {false, "key dtype " + std::string(dtype_name(c.key_cache.dtype)) + " differs from value dtype " +
                       std::string(dtype_name(c.value_cache.dtype))};
  if (!kv_built(c.key_cache.dtype))
    return {false, "kv dtype " + std::string(dtype_name(c.key_cache.dtype)) + " is not built; built: " + kBuiltKv};
  if (!dims_built(c.key_head_dim(), c.v_head_dim()))
    return {false, "head_dim " + std::to_string(c.key_head_dim()) + "/" + std::to_string(c.v_head_dim()) +
                       " is not built; built: " + kBuiltDims};
  if (c.kv_heads() <= 0 || c.q_heads() % c.kv_heads() != 0)
    return {false, "q_heads " + std::to_string(c.q_heads()) + " is not a multiple of kv_heads " +
                       std::to_string(c.kv_heads())};
  if (c.block_size() < 1 || c.block_size() > 256)
    return {false, "block_size " + std::to_string(c.block_size()) + " is outside 1..256"};
  return {};
}

const char* prefill_kernel_name(const DeviceCaseView& view) {
  if (view.alibi_slopes != nullptr) return "CUDA cores (ALiBi)";
  if (dims_cuda_core_only(view.kv.head_dim, view.kv.v_head_dim)) return "CUDA cores (head dim)";
  if (view.kv_dtype == DType::F32) return "f32 (CUDA cores)";
#ifdef PAGECHECK_HAVE_SM90A
  return attn::attn_kernel_name(view, false);
#else
  return "mma.sync";
#endif
}

Status launch_prefill(const DeviceCaseView& view, cudaStream_t stream) {
  PC_TRY(attn::check_common(view));
  const AttnParams p = attn::make_params(view);
  const int dk = view.kv.head_dim, dv = view.kv.v_head_dim;
  if (view.alibi_slopes != nullptr) {
    // ALiBi (issue 23) on the CUDA-core kernel, for every cache dtype: a
    // correct path for ALiBi models until the tensor-core kernels take the
    // bias (it is as slow as the F32 path). Issue 23's head sizes likewise.
    return launch_f32_dims(p, dk, dv, stream);
  }
  if (dims_cuda_core_only(dk, dv)) return launch_f32_dims(p, dk, dv, stream);
#ifdef PAGECHECK_HAVE_SM90A
  // Hopper: the wgmma kernel (attn_sm90.cu) where it is built for the case.
  if (attn::sm90_supports(view, false) && attn::sm90_available()) return attn::launch_attn_sm90(p, false, stream);
#endif
  if (dk == 64 && dv == 64) return launch_dims<64, 64>(p, stream);
  if (dk == 128 && dv == 128) return launch_dims<128, 128>(p, stream);
  if (dk == 256 && dv == 256) return launch_dims<256, 256>(p, stream);
  if (dk == 192 && dv == 128) return launch_dims<192, 128>(p, stream);
  return invalid_input("head_dim " + std::to_string(dk) + "/" + std::to_string(dv) + " is not built; built: " +
                       kBuiltDims);
}

}  // namespace pagecheck::gpu
