// simple_decode's kernel and its glue (examples/external/simple_decode.cu
// has the description): the parameters, the kernel, supports, the launch
// and the entry every simple_decode entry starts from. Included by
// simple_decode.cu and by misbehaving.cu (whose stale_lengths and
// wrong_stream entries are this kernel called the wrong way), one library
// each: everything here has internal linkage.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "pagecheck/external.h"

namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;  // output dims each thread accumulates

enum Fault : int { kNoFault = 0, kStaleLastKey = 1, kNoLse = 2 };

constexpr int kMaxBakedSeqs = 64;  // planned_decode_baked: lengths passed by value
constexpr std::uint32_t kPoisonWord = 0xFFFFFFFFu;

// Everything the kernel reads, by value.
struct Params {
  const void* query;               // [num_tokens, q_heads, head_dim]
  const void* key_cache;           // NHD [num_blocks, block_size, kv_heads, head_dim]
  const void* value_cache;         // NHD [num_blocks, block_size, kv_heads, v_head_dim]
  const std::int64_t* page_indptr; // [num_seqs + 1]
  const std::int32_t* page_indices;
  const std::int32_t* seq_lens;    // [num_seqs], read at run time (graphs replay with new lengths)
  const std::int32_t* query_start_loc;
  void* output;                    // [num_tokens, q_heads, v_head_dim]
  float* lse;                      // [num_tokens, q_heads] or null
  std::int64_t q_stride_token, q_stride_head;
  std::int64_t k_stride_block, k_stride_slot, k_stride_head;
  std::int64_t v_stride_block, v_stride_slot, v_stride_head;
  std::int64_t o_stride_token, o_stride_head, lse_stride_token;
  std::int64_t window;
  int q_heads, kv_heads, head_dim, v_head_dim, block_size;
  float scale, softcap, k_scale, v_scale;
  // planned_decode: the plan's number (in the plan-owned workspace) and one
  // word per block in the rest of the workspace; null otherwise.
  const std::uint32_t* plan_number;
  std::uint32_t* probe;
  // planned_decode_baked: the lengths of the last plan, by value.
  int baked;
  int baked_lens[kMaxBakedSeqs];
};

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

template <class Q, class KV, int kFault>
__global__ void __launch_bounds__(kThreads) simple_decode_kernel(const __grid_constant__ Params p) {
  const int seq = blockIdx.x;
  const int head = blockIdx.y;
  const int tid = threadIdx.x;
  const int kv_head = head / (p.q_heads / p.kv_heads);
  if (p.probe != nullptr) {
    // The block's probe word holds NaN bytes (poisoned before this plan) or
    // this plan's number (an earlier launch of the same plan wrote it, as in
    // timing's repeats); anything else means the workspace kept a value from
    // before this plan: write nothing, so the run fails as unwritten.
    __shared__ int poisoned;
    std::uint32_t* word = p.probe + seq * gridDim.y + head;
    if (tid == 0) {
      const std::uint32_t seen = *word, number = *p.plan_number;
      poisoned = seen == kPoisonWord || seen == number;
      *word = number;
    }
    __syncthreads();
    if (!poisoned) return;
  }
  const int len = p.baked ? p.baked_lens[seq] : p.seq_lens[seq];
  const int token = p.query_start_loc[seq];  // decode: the sequence's one query token
  const std::int64_t pos = len - 1;
  const int first = p.window > 0 ? static_cast<int>(max(std::int64_t{0}, pos - p.window + 1)) : 0;
  const std::int64_t table_row = p.page_indptr[seq];

  __shared__ float q[kMaxHeadDim];
  __shared__ float logits[kThreads];
  __shared__ float reduce[kThreads];

  const Q* q_row = static_cast<const Q*>(p.query) + token * p.q_stride_token + head * p.q_stride_head;
  for (int d = tid; d < p.head_dim; d += kThreads) q[d] = to_float(q_row[d]);
  __syncthreads();

  const KV* keys = static_cast<const KV*>(p.key_cache);
  const KV* values = static_cast<const KV*>(p.value_cache);
  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kDimsPerThread] = {};

  for (int tile = first; tile < len; tile += kThreads) {
    const int j = tile + tid;
    float logit = -INFINITY;
    if (j < len) {
      int key = j;
      if (kFault == kStaleLastKey && j == len - 1 && len > 1) key = j - 1;  // the bug: one slot early
      const std::int64_t page = p.page_indices[table_row + key / p.block_size];
      const KV* k = keys + page * p.k_stride_block + (key % p.block_size) * p.k_stride_slot + kv_head * p.k_stride_head;
      float dot = 0.0f;
      for (int d = 0; d < p.head_dim; ++d) dot += q[d] * to_float(k[d]);
      logit = dot * p.k_scale * p.scale;
      if (p.softcap > 0.0f) logit = p.softcap * tanhf(logit / p.softcap);
    }
    logits[tid] = logit;
    reduce[tid] = logit;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (tid < half) reduce[tid] = fmaxf(reduce[tid], reduce[tid + half]);
      __syncthreads();
    }
    // The tile has at least one key (tile < len), so the max is finite.
    const float new_max = fmaxf(running_max, reduce[0]);
    const float correction = expf(running_max - new_max);  // 0 on the first tile
    running_sum *= correction;
    for (int i = 0; i < kDimsPerThread; ++i) acc[i] *= correction;
    const int tile_keys = min(kThreads, len - tile);
    for (int t = 0; t < tile_keys; ++t) {
      const float weight = expf(logits[t] - new_max);
      running_sum += weight;  // every thread keeps the same sum, in the same order
      const int key = tile + t;
      const std::int64_t page = p.page_indices[table_row + key / p.block_size];
      const KV* v = values + page * p.v_stride_block + (key % p.block_size) * p.v_stride_slot + kv_head * p.v_stride_head;
      for (int i = 0; i < kDimsPerThread; ++i) {
        const int d = tid + i * kThreads;
        if (d < p.v_head_dim) acc[i] += weight * to_float(v[d]);
      }
    }
    running_max = new_max;
    __syncthreads();  // logits and reduce are rewritten by the next tile
  }

  Q* out = static_cast<Q*>(p.output) + token * p.o_stride_token + head * p.o_stride_head;
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int d = tid + i * kThreads;
    if (d < p.v_head_dim) store(out + d, acc[i] * p.v_scale / running_sum);
  }
  if (kFault != kNoLse && tid == 0 && p.lse != nullptr)
    p.lse[token * p.lse_stride_token + head] = running_max + logf(running_sum);
}

thread_local char last_message[512];

int fail(const char* what, cudaError_t err) {
  std::snprintf(last_message, sizeof(last_message), "%s: %s", what, cudaGetErrorString(err));
  return 1;
}

const char* last_error() { return last_message; }

int supports(const pagecheck_case_desc* d, char* reason, size_t size) {
  // Dtypes, layout, decode-only and the features are declared in the entry;
  // pagecheck checks those. What is left:
  if (d->head_dim > kMaxHeadDim || d->v_head_dim > kMaxHeadDim) {
    std::snprintf(reason, size, "simple_decode: head dims up to %d, got %d/%d", kMaxHeadDim, d->head_dim, d->v_head_dim);
    return 0;
  }
  if (d->query_dtype != d->output_dtype) {
    std::snprintf(reason, size, "simple_decode: the output must have the query's dtype");
    return 0;
  }
  if (d->q_heads > 65535) {
    std::snprintf(reason, size, "simple_decode: at most 65535 query heads (grid y)");
    return 0;
  }
  return 1;
}

// The kernel's arguments for one call, reading everything from the buffers.
Params params_of(const pagecheck_case_desc* d, const pagecheck_buffers* b) {
  Params p{};
  p.query = b->query;
  p.key_cache = b->key_cache;
  p.value_cache = b->value_cache;
  p.page_indptr = b->page_indptr;
  p.page_indices = b->page_indices;
  p.seq_lens = b->seq_lens;
  p.query_start_loc = b->query_start_loc;
  p.output = b->output;
  p.lse = b->lse;
  p.q_stride_token = d->query_stride_token;
  p.q_stride_head = d->query_stride_head;
  p.k_stride_block = d->key_stride_block;
  p.k_stride_slot = d->key_stride_slot;
  p.k_stride_head = d->key_stride_head;
  p.v_stride_block = d->value_stride_block;
  p.v_stride_slot = d->value_stride_slot;
  p.v_stride_head = d->value_stride_head;
  p.o_stride_token = d->output_stride_token;
  p.o_stride_head = d->output_stride_head;
  p.lse_stride_token = d->lse_stride_token;
  p.window = d->window;
  p.q_heads = d->q_heads;
  p.kv_heads = d->kv_heads;
  p.head_dim = d->head_dim;
  p.v_head_dim = d->v_head_dim;
  p.block_size = d->block_size;
  p.scale = d->scale;
  p.softcap = d->softcap;
  p.k_scale = d->k_scale;
  p.v_scale = d->v_scale;
  return p;
}

template <int kFault>
int enqueue(const pagecheck_case_desc* d, const Params& p, void* stream) {
  // The grid comes from capacity fields only: num_seqs and q_heads.
  const dim3 grid(static_cast<unsigned>(d->num_seqs), static_cast<unsigned>(d->q_heads));
  const auto s = static_cast<cudaStream_t>(stream);
  const bool q_bf16 = d->query_dtype == PAGECHECK_DTYPE_BF16, kv_bf16 = d->kv_dtype == PAGECHECK_DTYPE_BF16;
  if (q_bf16 && kv_bf16) simple_decode_kernel<__nv_bfloat16, __nv_bfloat16, kFault><<<grid, kThreads, 0, s>>>(p);
  else if (q_bf16) simple_decode_kernel<__nv_bfloat16, __half, kFault><<<grid, kThreads, 0, s>>>(p);
  else if (kv_bf16) simple_decode_kernel<__half, __nv_bfloat16, kFault><<<grid, kThreads, 0, s>>>(p);
  else simple_decode_kernel<__half, __half, kFault><<<grid, kThreads, 0, s>>>(p);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return fail("simple_decode_kernel launch", err);
  return 0;
}

template <int kFault>
int launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* /*workspace*/, void* stream) {
  return enqueue<kFault>(d, params_of(d, b), stream);
}

pagecheck_kernel_entry make_entry(const char* name, const char* description,
                                  int (*launch_fn)(const pagecheck_case_desc*, const pagecheck_buffers*, void*, void*)) {
  pagecheck_kernel_entry e{};
  e.name = name;
  e.description = description;
  e.query_dtypes = PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_F16) | PAGECHECK_DTYPE_BIT(PAGECHECK_DTYPE_BF16);
  e.kv_dtypes = e.query_dtypes;
  e.layouts = PAGECHECK_LAYOUT_BIT(PAGECHECK_LAYOUT_NHD);
  e.table_forms = PAGECHECK_TABLE_BIT(PAGECHECK_TABLE_DENSE) | PAGECHECK_TABLE_BIT(PAGECHECK_TABLE_CSR);
  e.features = PAGECHECK_FEATURE_DECODE | PAGECHECK_FEATURE_WINDOW | PAGECHECK_FEATURE_SOFTCAP |
               PAGECHECK_FEATURE_KV_SCALES | PAGECHECK_FEATURE_NON_CAUSAL;
  e.supports = supports;
  e.launch = launch_fn;
  e.last_error = last_error;
  return e;
}

}  // namespace
