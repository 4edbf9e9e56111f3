// simple_decode: a first paged-attention decode kernel, written the way one
// writes a first kernel to try pagecheck on: plain CUDA, no tensor cores,
// one thread block per (sequence, query head).
//
// Each block walks the sequence's keys in tiles of kThreads: every thread
// computes one logit (q . k through the block table), the block takes the
// tile's max, rescales its running sum and accumulators (online softmax), and
// each thread accumulates p * v for its own output dims. F16/BF16 query and
// caches, NHD layout, any block size, head dims up to 256, sliding window,
// softcap, k/v scales.
//
// Built four times from this file (examples/external/CMakeLists.txt), by
// SIMPLE_DECODE_VARIANT:
//   0 libsimple_decode.so          entry simple_decode
//   1 libsimple_decode_faulty.so   entries with a deliberate bug each, for the
//                                  GPU test that proves pagecheck's checks
//                                  reach a plugin:
//     simple_decode_stale_key      reads the last key from the slot before it
//     simple_decode_no_lse         never writes the LSE
//   2 libplanned_decode.so         the plan step of ABI 1.1, for the tests of
//                                  its contract:
//     planned_decode               plan copies the host lengths, query offsets
//                                  and page offsets into the plan-owned
//                                  workspace; the kernel reads them from there
//                                  alone, and checks that the rest of the
//                                  workspace was poisoned before this plan
//                                  (else it writes nothing: unwritten)
//     planned_decode_baked         plan keeps the host lengths and launch bakes
//                                  them into the kernel's arguments: right on
//                                  every eager run, stale in a graph replay
//   3 libsimple_decode_abi1_0.so   entry simple_decode_abi1_0, exported as a
//                                  library built against ABI 1.0 exports it
//                                  (abi_minor 0, the 1.0 entry size)
//
// Run (one line):
//   pagecheck run --kernel build/examples/external/libsimple_decode.so
//       --paths reference,ext:simple_decode --kv-dtype BF16 --q-dtype BF16
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "pagecheck/external.h"

#ifndef SIMPLE_DECODE_VARIANT
#define SIMPLE_DECODE_VARIANT 0
#endif

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

#if SIMPLE_DECODE_VARIANT == 2
// ---- planned_decode: the plan step of ABI 1.1 --------------------------------
// The plan-owned workspace, all offsets in bytes:
//   [0, 8)        the plan's number (uint32), then padding
//   page_indptr   int64 [num_seqs + 1]
//   seq_lens      int32 [num_seqs]
//   query offsets int32 [num_seqs + 1]
// and after it, one probe word (uint32) per (sequence, query head).
struct PlanLayout {
  std::uint64_t indptr, lens, starts, plan_bytes, probe, total;
};

PlanLayout plan_layout(const pagecheck_case_desc* d) {
  PlanLayout l{};
  const auto n = static_cast<std::uint64_t>(d->num_seqs);
  l.indptr = 8;
  l.lens = l.indptr + 8 * (n + 1);
  l.starts = l.lens + 4 * n;
  l.plan_bytes = (l.starts + 4 * (n + 1) + 15) / 16 * 16;
  l.probe = l.plan_bytes;
  l.total = l.probe + 4 * n * static_cast<std::uint64_t>(d->q_heads);
  return l;
}

std::uint64_t planned_workspace_bytes(const pagecheck_case_desc* d) { return plan_layout(d).total; }
std::uint64_t planned_plan_bytes(const pagecheck_case_desc* d) { return plan_layout(d).plan_bytes; }

std::uint32_t plans_made = 0;  // numbers the plans; never 0xFFFFFFFF in a test's lifetime

int planned_plan(const pagecheck_case_desc* d, const pagecheck_plan_inputs* host, const pagecheck_buffers*,
                 void* workspace, void* staging, void* stream) {
  const PlanLayout l = plan_layout(d);
  const auto n = static_cast<std::size_t>(d->num_seqs);
  auto* bytes = static_cast<unsigned char*>(staging);
  const std::uint32_t number = ++plans_made;
  std::memcpy(bytes, &number, sizeof(number));
  std::memcpy(bytes + l.indptr, host->page_indptr, 8 * (n + 1));
  std::memcpy(bytes + l.lens, host->seq_lens, 4 * n);
  std::memcpy(bytes + l.starts, host->query_start_loc, 4 * (n + 1));
  const cudaError_t err = cudaMemcpyAsync(workspace, staging, l.plan_bytes, cudaMemcpyHostToDevice,
                                          static_cast<cudaStream_t>(stream));
  return err == cudaSuccess ? 0 : fail("planned_decode plan: copy to the workspace", err);
}

int planned_launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* workspace, void* stream) {
  const PlanLayout l = plan_layout(d);
  auto* bytes = static_cast<unsigned char*>(workspace);
  Params p = params_of(d, b);
  // Lengths and offsets from what plan wrote; the table entries from the buffers.
  p.plan_number = reinterpret_cast<const std::uint32_t*>(bytes);
  p.page_indptr = reinterpret_cast<const std::int64_t*>(bytes + l.indptr);
  p.seq_lens = reinterpret_cast<const std::int32_t*>(bytes + l.lens);
  p.query_start_loc = reinterpret_cast<const std::int32_t*>(bytes + l.starts);
  p.probe = reinterpret_cast<std::uint32_t*>(bytes + l.probe);
  return enqueue<kNoFault>(d, p, stream);
}

// planned_decode_baked: the lengths of the last plan, kept on the host.
std::vector<int> baked_lens;

int baked_supports(const pagecheck_case_desc* d, char* reason, size_t size) {
  if (d->num_seqs > kMaxBakedSeqs) {
    std::snprintf(reason, size, "planned_decode_baked: at most %d sequences (lengths passed by value)", kMaxBakedSeqs);
    return 0;
  }
  return supports(d, reason, size);
}

int baked_plan(const pagecheck_case_desc* d, const pagecheck_plan_inputs* host, const pagecheck_buffers*, void*, void*,
               void*) {
  baked_lens.assign(host->seq_lens, host->seq_lens + d->num_seqs);
  return 0;
}

int baked_launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void*, void* stream) {
  Params p = params_of(d, b);
  p.baked = 1;
  for (std::size_t s = 0; s < baked_lens.size() && s < kMaxBakedSeqs; ++s) p.baked_lens[s] = baked_lens[s];
  return enqueue<kNoFault>(d, p, stream);
}
#endif

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

#if SIMPLE_DECODE_VARIANT == 1
const pagecheck_kernel_entry kEntries[] = {
    make_entry("simple_decode_stale_key", "simple_decode with a bug: the last key is read from the slot before it",
               launch<kStaleLastKey>),
    make_entry("simple_decode_no_lse", "simple_decode with a bug: the LSE is never written", launch<kNoLse>),
};
#elif SIMPLE_DECODE_VARIANT == 2
pagecheck_kernel_entry planned_entry() {
  pagecheck_kernel_entry e = make_entry(
      "planned_decode", "simple_decode reading lengths and offsets from the plan-owned workspace", planned_launch);
  e.workspace_bytes = planned_workspace_bytes;
  e.plan = planned_plan;
  e.plan_workspace_bytes = planned_plan_bytes;
  e.host_staging_bytes = planned_plan_bytes;
  return e;
}
pagecheck_kernel_entry baked_entry() {
  pagecheck_kernel_entry e = make_entry(
      "planned_decode_baked", "simple_decode with a bug: plan's host lengths baked into the kernel's arguments",
      baked_launch);
  e.supports = baked_supports;
  e.plan = baked_plan;
  return e;
}
const pagecheck_kernel_entry kEntries[] = {planned_entry(), baked_entry()};
#elif SIMPLE_DECODE_VARIANT == 3
// What a library built against ABI 1.0 exports: entries of the 1.0 size
// (the prefix of today's entry), abi_minor 0.
struct alignas(pagecheck_kernel_entry) EntryAbi10 {
  unsigned char bytes[PAGECHECK_ENTRY_SIZE_1_0];
};
EntryAbi10 as_abi_1_0(const pagecheck_kernel_entry& e) {
  EntryAbi10 out;
  std::memcpy(out.bytes, &e, sizeof(out.bytes));
  return out;
}
const EntryAbi10 kEntries[] = {as_abi_1_0(make_entry(
    "simple_decode_abi1_0", "simple_decode exported as an ABI 1.0 library", launch<kNoFault>))};
#else
const pagecheck_kernel_entry kEntries[] = {
    make_entry("simple_decode", "a first decode kernel: one block per (sequence, head), online softmax", launch<kNoFault>),
};
#endif

#if SIMPLE_DECODE_VARIANT == 3
const pagecheck_kernel_table kTable = {PAGECHECK_ABI_MAJOR, 0, PAGECHECK_ENTRY_SIZE_1_0,
                                       sizeof(kEntries) / sizeof(kEntries[0]),
                                       reinterpret_cast<const pagecheck_kernel_entry*>(kEntries)};
#else
const pagecheck_kernel_table kTable = {PAGECHECK_ABI_MAJOR, PAGECHECK_ABI_MINOR, sizeof(pagecheck_kernel_entry),
                                       sizeof(kEntries) / sizeof(kEntries[0]), kEntries};
#endif

}  // namespace

extern "C" PAGECHECK_EXPORT const pagecheck_kernel_table* pagecheck_kernels_v1(void) { return &kTable; }
