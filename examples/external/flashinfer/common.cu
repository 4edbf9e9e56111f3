// The FlashInfer adapter's own parts (common.cuh): workspace layout, the page
// plan, the table compaction and the epilogue kernels, the shared refusals.
#include "common.cuh"

#include "dispatch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace fi_adapter {

namespace {

thread_local std::string last_message;

constexpr int kCompactThreads = 128;
constexpr int kEpilogueThreads = 256;

// One block per sequence copies its first pages, in FlashInfer's order.
__global__ void compact_table_kernel(const std::int64_t* __restrict__ page_indptr,
                                     const std::int32_t* __restrict__ page_indices,
                                     const std::int32_t* __restrict__ kv_indptr, std::int32_t* __restrict__ indices) {
  const int seq = blockIdx.x;
  const std::int64_t from = page_indptr[seq];
  const std::int32_t to = kv_indptr[seq], pages = kv_indptr[seq + 1] - kv_indptr[seq];
  for (std::int32_t e = threadIdx.x; e < pages; e += blockDim.x) indices[to + e] = page_indices[from + e];
}

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// lse [rows] *= ln 2; output [rows, v_head_dim] *= v_scale (when scale_output).
template <class O>
__global__ void epilogue_kernel(float* __restrict__ lse, O* __restrict__ output, std::int64_t rows,
                                std::int64_t v_head_dim, float v_scale, bool scale_output) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::int64_t i = first; i < rows; i += stride) lse[i] *= 0.69314718055994530942f;
  if (!scale_output) return;
  for (std::int64_t i = first; i < rows * v_head_dim; i += stride) store(output + i, to_float(output[i]) * v_scale);
}

}  // namespace

Layout make_layout(const pagecheck_case_desc& d, std::uint64_t int_bytes, std::uint64_t float_bytes) {
  const auto n = static_cast<std::uint64_t>(d.num_seqs);
  Layout l;
  l.int_bytes = align_up(int_bytes, 256);
  l.kv_indptr = l.int_bytes;
  l.last_page_len = l.kv_indptr + align_up(4 * (n + 1), 256);
  l.plan_bytes = l.last_page_len + align_up(4 * n, 256);
  l.float_offset = l.plan_bytes;
  l.float_bytes = align_up(float_bytes, 256);
  l.indices = l.float_offset + l.float_bytes;
  l.total = l.indices + align_up(4 * static_cast<std::uint64_t>(d.table_entries), 256);
  return l;
}

void plan_pages(const pagecheck_case_desc& d, const pagecheck_plan_inputs& host, PagePlan& out) {
  const auto n = static_cast<std::size_t>(d.num_seqs);
  out.kv_indptr.assign(n + 1, 0);
  out.last_page_len.assign(n, 0);
  out.qo_indptr.assign(host.query_start_loc, host.query_start_loc + n + 1);
  for (std::size_t s = 0; s < n; ++s) {
    const std::int32_t len = host.seq_lens[s];
    const std::int32_t pages = (len + d.block_size - 1) / d.block_size;
    out.kv_indptr[s + 1] = out.kv_indptr[s] + pages;
    out.last_page_len[s] = pages == 0 ? 0 : len - (pages - 1) * d.block_size;
  }
}

cudaError_t copy_page_plan(const Layout& l, const PagePlan& pages, void* workspace, void* staging,
                           cudaStream_t stream) {
  auto* host = static_cast<unsigned char*>(staging);
  std::memcpy(host + l.kv_indptr, pages.kv_indptr.data(), 4 * pages.kv_indptr.size());
  std::memcpy(host + l.last_page_len, pages.last_page_len.data(), 4 * pages.last_page_len.size());
  auto* device = static_cast<unsigned char*>(workspace);
  return cudaMemcpyAsync(device + l.kv_indptr, host + l.kv_indptr, l.plan_bytes - l.kv_indptr, cudaMemcpyHostToDevice,
                         stream);
}

cudaError_t launch_compact_table(const pagecheck_case_desc& d, const pagecheck_buffers& b, const Layout& l,
                                 void* workspace, cudaStream_t stream) {
  auto* bytes = static_cast<unsigned char*>(workspace);
  compact_table_kernel<<<static_cast<unsigned>(d.num_seqs), kCompactThreads, 0, stream>>>(
      b.page_indptr, b.page_indices, reinterpret_cast<const std::int32_t*>(bytes + l.kv_indptr),
      reinterpret_cast<std::int32_t*>(bytes + l.indices));
  return cudaGetLastError();
}

cudaError_t launch_epilogue(const pagecheck_case_desc& d, const pagecheck_buffers& b, cudaStream_t stream) {
  const bool scale_output = d.v_scale != 1.0f;
  if (b.lse == nullptr && !scale_output) return cudaSuccess;
  const std::int64_t rows = d.num_tokens * d.q_heads;
  const std::int64_t work = scale_output ? rows * d.v_head_dim : rows;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((work + kEpilogueThreads - 1) / kEpilogueThreads, 4096));
  // A NULL lse with a v_scale: scale the output only (rows of LSE: none).
  const std::int64_t lse_rows = b.lse != nullptr ? rows : 0;
  if (d.output_dtype == PAGECHECK_DTYPE_BF16)
    epilogue_kernel<<<blocks, kEpilogueThreads, 0, stream>>>(b.lse, static_cast<__nv_bfloat16*>(b.output), lse_rows,
                                                              d.v_head_dim, d.v_scale, scale_output);
  else
    epilogue_kernel<<<blocks, kEpilogueThreads, 0, stream>>>(b.lse, static_cast<__half*>(b.output), lse_rows,
                                                              d.v_head_dim, d.v_scale, scale_output);
  return cudaGetLastError();
}

bool common_supports(const pagecheck_case_desc& d, const char* entry, char* reason, std::size_t size) {
  constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
  if (d.output_dtype != d.query_dtype) {
    std::snprintf(reason, size, "%s: the output must have the query's dtype", entry);
    return false;
  }
  if (d.head_dim != d.v_head_dim) {
    std::snprintf(reason, size, "%s: head_dim %d and v_head_dim %d differ; FlashInfer's paged cache has one head dim",
                  entry, d.head_dim, d.v_head_dim);
    return false;
  }
  if (d.key_stride_block != d.value_stride_block || d.key_stride_slot != d.value_stride_slot ||
      d.key_stride_head != d.value_stride_head) {
    std::snprintf(reason, size, "%s: the key and value caches have different strides; FlashInfer takes one set", entry);
    return false;
  }
  if (d.table_entries > kInt32Max || d.num_tokens * d.q_heads * d.head_dim > kInt32Max ||
      d.key_stride_block > std::numeric_limits<std::uint32_t>::max()) {
    std::snprintf(reason, size,
                  "%s: FlashInfer's int32 indices (page offsets, query strides) and uint32 page stride cannot address "
                  "this case",
                  entry);
    return false;
  }
  if (d.query_stride_token != static_cast<std::int64_t>(d.q_heads) * d.head_dim || d.query_stride_head != d.head_dim ||
      d.output_stride_token != static_cast<std::int64_t>(d.q_heads) * d.v_head_dim ||
      d.output_stride_head != d.v_head_dim || d.lse_stride_token != d.q_heads) {
    std::snprintf(reason, size, "%s: FlashInfer writes a contiguous output and LSE; the case's strides are not", entry);
    return false;
  }
  return true;
}

void kv_strides(const pagecheck_case_desc& d, std::int64_t out[3]) {
  out[0] = d.key_stride_block;
  if (d.kv_layout == PAGECHECK_LAYOUT_HND) {
    out[1] = d.key_stride_head;
    out[2] = d.key_stride_slot;
  } else {
    out[1] = d.key_stride_slot;
    out[2] = d.key_stride_head;
  }
}

pagecheck_kernel_entry built_entry(const char* name, const char* description, std::uint32_t features) {
  pagecheck_kernel_entry e{};
  e.name = name;
  e.description = description;
  e.query_dtypes = kBuiltDtypes;
  e.kv_dtypes = kBuiltDtypes;
  e.layouts = PAGECHECK_LAYOUT_BIT(PAGECHECK_LAYOUT_NHD) | PAGECHECK_LAYOUT_BIT(PAGECHECK_LAYOUT_HND);
  e.table_forms = PAGECHECK_TABLE_BIT(PAGECHECK_TABLE_DENSE) | PAGECHECK_TABLE_BIT(PAGECHECK_TABLE_CSR);
  e.features = features;
  e.head_dim_count = kBuiltHeadDimCount;
  e.head_dims = kBuiltHeadDims;
  e.last_error = last_error;
  return e;
}

int fail(std::string message) {
  last_message = std::move(message);
  return 1;
}

int fail_cuda(const char* what, cudaError_t err) {
  return fail(std::string(what) + ": " + cudaGetErrorString(err));
}

const char* last_error() { return last_message.c_str(); }

}  // namespace fi_adapter
