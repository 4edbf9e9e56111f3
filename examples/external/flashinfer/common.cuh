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
#include <exception>
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

// An entry with what both share: the built dtypes and head dims
// (dispatch.cuh), NHD and HND, dense and CSR tables, last_error.
pagecheck_kernel_entry built_entry(const char* name, const char* description, std::uint32_t features);

// The ABI functions of an entry over one FlashInfer kernel family. Family
// provides (decode.cu, prefill.cu):
//   kName, kPlanner, kKernel                  names for entries and messages
//   bool supports(desc, reason, size)         its refusals beyond common_supports
//   cudaError_t layout(desc, Layout&)         the workspace its planner needs
//   cudaError_t plan(desc, layout, pages, workspace, staging, stream)
//                                             FlashInfer's planner; keeps its plan info
//   cudaError_t run(desc, buffers, layout, workspace, stream)
//                                             FlashInfer's kernel with that plan info
// Around them: the page plan and its copy in plan; the table compaction
// before and the epilogue after the kernel in launch; FlashInfer's
// exceptions and CUDA errors turned into a non-zero return with the message.
template <class Family>
struct Entry {
  static inline Layout planned;  // between plan and the next launch (one host thread at a time)
  static inline PagePlan pages;

  static int supports(const pagecheck_case_desc* d, char* reason, size_t size) {
    return common_supports(*d, Family::kName, reason, size) && Family::supports(*d, reason, size) ? 1 : 0;
  }

  static std::uint64_t workspace_bytes(const pagecheck_case_desc* d) {
    Layout l;
    return Family::layout(*d, l) == cudaSuccess ? l.total : 0;  // 0: plan then says why
  }

  static std::uint64_t plan_bytes(const pagecheck_case_desc* d) {
    Layout l;
    return Family::layout(*d, l) == cudaSuccess ? l.plan_bytes : 0;
  }

  static int plan(const pagecheck_case_desc* d, const pagecheck_plan_inputs* host, const pagecheck_buffers*,
                  void* workspace, void* staging, void* stream) {
    try {
      const auto s = static_cast<cudaStream_t>(stream);
      Layout l;
      if (const cudaError_t err = Family::layout(*d, l); err != cudaSuccess) return fail_cuda("workspace layout", err);
      plan_pages(*d, *host, pages);
      if (const cudaError_t err = Family::plan(*d, l, pages, workspace, staging, s); err != cudaSuccess)
        return fail_cuda(Family::kPlanner, err);
      if (const cudaError_t err = copy_page_plan(l, pages, workspace, staging, s); err != cudaSuccess)
        return fail_cuda("copy of the page plan", err);
      planned = l;
      return 0;
    } catch (const std::exception& e) {
      return fail(std::string(Family::kPlanner) + ": " + e.what());
    }
  }

  static int launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* workspace, void* stream) {
    try {
      const auto s = static_cast<cudaStream_t>(stream);
      if (const cudaError_t err = launch_compact_table(*d, *b, planned, workspace, s); err != cudaSuccess)
        return fail_cuda("table compaction", err);
      if (const cudaError_t err = Family::run(*d, *b, planned, workspace, s); err != cudaSuccess)
        return fail_cuda(Family::kKernel, err);
      if (const cudaError_t err = launch_epilogue(*d, *b, s); err != cudaSuccess) return fail_cuda("epilogue", err);
      return 0;
    } catch (const std::exception& e) {
      return fail(std::string(Family::kKernel) + ": " + e.what());
    }
  }

  static pagecheck_kernel_entry make(const char* description, std::uint32_t features) {
    pagecheck_kernel_entry e = built_entry(Family::kName, description, features);
    e.supports = supports;
    e.workspace_bytes = workspace_bytes;
    e.launch = launch;
    e.plan = plan;
    e.plan_workspace_bytes = plan_bytes;
    e.host_staging_bytes = plan_bytes;
    return e;
  }
};

// The ABI entries (decode.cu, prefill.cu).
pagecheck_kernel_entry decode_entry();
pagecheck_kernel_entry prefill_entry();

}  // namespace fi_adapter
