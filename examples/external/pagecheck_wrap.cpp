// pagecheck_wrap: pagecheck's own decode kernels behind the external-kernel
// ABI (include/pagecheck/external.h), the way a runtime wraps the kernels it
// already has: build the kernel's own view from the ABI's description and
// buffers, call its launcher, turn its status into a return code.
//
//   pagecheck_direct  launch_direct (kernels/src/decode/decode_direct.cu): one pass,
//                     no workspace
//   pagecheck_split   launch_split (decode_split.cu), 256-token partitions:
//                     its partial outputs and statistics live in the ABI's
//                     workspace
//
// Run (one line):
//   pagecheck run --kernel build/examples/external/libpagecheck_wrap.so
//       --paths reference,direct,ext:pagecheck_direct,ext:pagecheck_split
//
// Both entries declare no capabilities (masks 0): supports() decides, with
// the same rules as decode_applies, so its reasons are the library's own.
#include <cstdio>
#include <string>

#include "common/launchers.cuh"
#include "pagecheck/external.h"

namespace {

using pagecheck::DType;
using pagecheck::gpu::DeviceCaseView;

constexpr std::int64_t kPartitionTokens = 256;

thread_local std::string last_message;

int fail(std::string message) {
  last_message = std::move(message);
  return 1;
}

const char* last_error() { return last_message.c_str(); }

bool dtype_of(std::int32_t code, DType& out) {
  switch (code) {
    case PAGECHECK_DTYPE_F32: out = DType::F32; return true;
    case PAGECHECK_DTYPE_F16: out = DType::F16; return true;
    case PAGECHECK_DTYPE_BF16: out = DType::BF16; return true;
    case PAGECHECK_DTYPE_F8_E4M3: out = DType::F8_E4M3; return true;
    case PAGECHECK_DTYPE_F8_E5M2: out = DType::F8_E5M2; return true;
    default: return false;
  }
}

// The kernels' view of one call. `b` may be null (workspace sizing: only the
// capacity fields matter then).
DeviceCaseView view_of(const pagecheck_case_desc& d, const pagecheck_buffers* b) {
  DeviceCaseView v;
  if (b != nullptr) {
    v.kv.key_data = b->key_cache;
    v.kv.value_data = b->value_cache;
    v.kv.page_indices = b->page_indices;
    v.kv.page_indptr = b->page_indptr;
    v.kv.seq_lens = b->seq_lens;
    v.query = b->query;
    v.query_start_loc = b->query_start_loc;
    v.output = b->output;
    v.lse = b->lse;
  }
  v.kv.num_seqs = d.num_seqs;
  v.kv.num_blocks = d.num_blocks;
  v.kv.block_size = d.block_size;
  v.kv.kv_heads = d.kv_heads;
  v.kv.head_dim = d.head_dim;
  v.kv.v_head_dim = d.v_head_dim;
  v.kv.key_strides = {d.key_stride_block, d.key_stride_slot, d.key_stride_head};
  v.kv.value_strides = {d.value_stride_block, d.value_stride_slot, d.value_stride_head};
  dtype_of(d.kv_dtype, v.kv_dtype);
  dtype_of(d.query_dtype, v.query_dtype);
  dtype_of(d.output_dtype, v.output_dtype);
  v.num_tokens = d.num_tokens;
  v.q_heads = d.q_heads;
  v.max_q_len = d.max_q_len;
  v.max_seq_len = d.max_seq_len;
  v.scale = d.scale;
  v.softcap = d.softcap;
  v.k_scale = d.k_scale;
  v.v_scale = d.v_scale;
  v.window = d.window;
  v.causal = d.causal != 0;
  return v;
}

int refuse(char* reason, std::size_t size, const std::string& why) {
  if (size > 0) std::snprintf(reason, size, "%s", why.c_str());
  return 0;
}

// decode_applies (decode_direct.cu), on the description; plus the layout the
// view assumes: query, output and LSE contiguous.
int supports(const pagecheck_case_desc* d, char* reason, std::size_t size) {
  if (d->abi_major != PAGECHECK_ABI_MAJOR) return refuse(reason, size, "pagecheck_wrap: another ABI major");
  if (!d->is_decode)
    return refuse(reason, size,
                  "pagecheck_wrap: decode only (one query token per sequence); this case has max_q_len " +
                      std::to_string(d->max_q_len));
  DType q{}, kv{}, out{};
  if (!dtype_of(d->query_dtype, q) || !dtype_of(d->kv_dtype, kv) || !dtype_of(d->output_dtype, out))
    return refuse(reason, size, "pagecheck_wrap: unknown dtype code");
  if (q != DType::F32 && q != DType::F16 && q != DType::BF16)
    return refuse(reason, size, "pagecheck_wrap: query dtype must be F32, F16 or BF16");
  const bool dims = (d->head_dim == d->v_head_dim && (d->head_dim == 64 || d->head_dim == 128 || d->head_dim == 256)) ||
                    (d->head_dim == 192 && d->v_head_dim == 128);
  if (!dims)
    return refuse(reason, size,
                  "pagecheck_wrap: head_dim " + std::to_string(d->head_dim) + "/" + std::to_string(d->v_head_dim) +
                      " is not built; built: 64, 128, 192/128, 256");
  if (d->block_size < 1 || d->block_size > 256)
    return refuse(reason, size, "pagecheck_wrap: block_size must be 1..256, got " + std::to_string(d->block_size));
  if (d->query_stride_head != d->head_dim || d->query_stride_token != d->q_heads * d->head_dim ||
      d->output_stride_head != d->v_head_dim || d->output_stride_token != d->q_heads * d->v_head_dim ||
      d->lse_stride_token != d->q_heads)
    return refuse(reason, size, "pagecheck_wrap: query, output and LSE must be contiguous");
  return 1;
}

int launch_direct_entry(const pagecheck_case_desc* d, const pagecheck_buffers* b, void*, void* stream) {
  const pagecheck::Status s = pagecheck::gpu::launch_direct(view_of(*d, b), static_cast<cudaStream_t>(stream));
  return s.ok() ? 0 : fail(s.error().describe());
}

std::uint64_t split_workspace_bytes(const pagecheck_case_desc* d) {
  const DeviceCaseView v = view_of(*d, nullptr);
  return (pagecheck::gpu::split_partial_out_floats(v, kPartitionTokens) +
          2 * pagecheck::gpu::split_stat_floats(v, kPartitionTokens)) *
         sizeof(float);
}

int launch_split_entry(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* workspace, void* stream) {
  const DeviceCaseView v = view_of(*d, b);
  if (workspace == nullptr) return fail("pagecheck_split: no workspace");
  pagecheck::gpu::SplitWorkspace ws;
  ws.partial_out = static_cast<float*>(workspace);
  ws.partial_max = ws.partial_out + pagecheck::gpu::split_partial_out_floats(v, kPartitionTokens);
  ws.partial_sum = ws.partial_max + pagecheck::gpu::split_stat_floats(v, kPartitionTokens);
  ws.max_partitions = (v.max_seq_len + kPartitionTokens - 1) / kPartitionTokens;
  const pagecheck::Status s = pagecheck::gpu::launch_split(v, ws, kPartitionTokens, static_cast<cudaStream_t>(stream));
  return s.ok() ? 0 : fail(s.error().describe());
}

pagecheck_kernel_entry make_entry(const char* name, const char* description,
                                  int (*launch)(const pagecheck_case_desc*, const pagecheck_buffers*, void*, void*),
                                  std::uint64_t (*workspace)(const pagecheck_case_desc*)) {
  pagecheck_kernel_entry e{};
  e.name = name;
  e.description = description;
  e.supports = supports;
  e.workspace_bytes = workspace;
  e.launch = launch;
  e.last_error = last_error;
  return e;
}

const pagecheck_kernel_entry kEntries[] = {
    make_entry("pagecheck_direct", "pagecheck's direct decode (decode_direct.cu) through the ABI", launch_direct_entry,
               nullptr),
    make_entry("pagecheck_split", "pagecheck's split-KV decode, 256-token partitions, workspace from the ABI",
               launch_split_entry, split_workspace_bytes),
};

const pagecheck_kernel_table kTable = {PAGECHECK_ABI_MAJOR, PAGECHECK_ABI_MINOR, sizeof(pagecheck_kernel_entry),
                                       sizeof(kEntries) / sizeof(kEntries[0]), kEntries};

}  // namespace

extern "C" PAGECHECK_EXPORT const pagecheck_kernel_table* pagecheck_kernels_v1(void) { return &kTable; }
