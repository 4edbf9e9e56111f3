// The FlashInfer adapter (docs/external-kernels.md, "FlashInfer through
// --kernel"): what its two entries share. No FlashInfer header here: the
// table compaction, the epilogue and the page plan are the adapter's own.
//
// Workspace of one case (bytes; every part 256-aligned):
//   [0, int_bytes)                 FlashInfer's int workspace: plan's work
//                                  partition (plan-owned)
//   kv_indptr, last_page_len       FlashInfer's int32 page CSR of the call:
//                                  [num_seqs + 1], [num_seqs] (plan-owned)
//   float_offset .. + float_bytes  FlashInfer's float workspace: the split-KV
//                                  partial outputs and LSEs (launch)
//   indices .. + 4 * table_entries the table compacted to FlashInfer's CSR:
//                                  the first ceil(len / block_size) entries of
//                                  each sequence, back to back (launch)
// The host staging buffer mirrors the plan-owned part.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pagecheck/external.h"

namespace fi_adapter {

struct Layout {
  std::uint64_t int_bytes = 0;
  std::uint64_t kv_indptr = 0, last_page_len = 0;
  std::uint64_t plan_bytes = 0;  // the plan-owned part: int workspace and page CSR
  std::uint64_t float_offset = 0, float_bytes = 0;
  std::uint64_t indices = 0;
  std::uint64_t total = 0;
};
Layout make_layout(const pagecheck_case_desc& d, std::uint64_t int_bytes, std::uint64_t float_bytes);

constexpr std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

// FlashInfer's page CSR from the host lengths: pages = ceil(len / block_size)
// per sequence (kv_indptr [n + 1]) and the tokens in the last one
// (last_page_len [n]; 0 for an empty sequence), written into the plan-owned
// workspace through the staging buffer. kv_indptr stays on the host for
// FlashInfer's planners.
struct PagePlan {
  std::vector<std::int32_t> kv_indptr, last_page_len, qo_indptr;
};
void plan_pages(const pagecheck_case_desc& d, const pagecheck_plan_inputs& host, PagePlan& out);
cudaError_t copy_page_plan(const Layout& l, const PagePlan& pages, void* workspace, void* staging, cudaStream_t stream);

// Device work of every launch, grids from the description only:
//   compact_table: indices[kv_indptr[s] + e] = page_indices[page_indptr[s] + e]
//     for e < kv_indptr[s + 1] - kv_indptr[s];
//   epilogue: FlashInfer's LSE is log2 of the normaliser, pagecheck's is ln:
//     lse *= ln 2; and the output times v_scale when v_scale != 1.
cudaError_t launch_compact_table(const pagecheck_case_desc& d, const pagecheck_buffers& b, const Layout& l,
                                 void* workspace, cudaStream_t stream);
cudaError_t launch_epilogue(const pagecheck_case_desc& d, const pagecheck_buffers& b, cudaStream_t stream);

// The refusals both entries share (index ranges, strides, dims); false with
// the reason written.
bool common_supports(const pagecheck_case_desc& d, const char* entry, char* reason, std::size_t size);

// FlashInfer's window_left from pagecheck's window: position p sees key j
// when j > p - window (pagecheck) and when j >= p - window_left (FlashInfer).
inline std::int32_t window_left(const pagecheck_case_desc& d) {
  return d.window > 0 ? static_cast<std::int32_t>(d.window - 1) : -1;
}

// FlashInfer's cache strides {page, dim 1, dim 2} as paged_kv_t reads them.
void kv_strides(const pagecheck_case_desc& d, std::int64_t out[3]);

// The last failure, for last_error().
int fail(std::string message);
int fail_cuda(const char* what, cudaError_t err);
const char* last_error();

// The ABI entries (decode.cu, prefill.cu).
pagecheck_kernel_entry decode_entry();
pagecheck_kernel_entry prefill_entry();

}  // namespace fi_adapter
