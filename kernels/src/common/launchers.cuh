// The contract between the GPU core (harness, paths, graphs, timing) and the
// kernel families. Each family implements its declarations in its own file:
//   decode_direct.cu, decode_split.cu   direct, split, auto (issue 3)
//   prefill.cu                          prefill (issue 4)
//   fmha.cu                             gather + fmha (issue 4)
// Rules every launcher follows:
// - It reads every length and table entry from device memory at run time
//   (view.kv.seq_lens, view.kv.page_indptr/page_indices, view.query_start_loc):
//   the core captures launches into a CUDA graph once, at the case's capacity,
//   then changes tables and context lengths in place (never above the capacity
//   fields of the view: max_seq_len, num_blocks; query lengths stay fixed) and
//   replays. Grid sizes may depend only on capacity fields.
// - It writes every output element (and LSE when view.lse is set) it is
//   responsible for; the core poisons outputs with NaN first and counts any
//   left unwritten.
// - No host synchronisation, no allocation, no host-side reads of device data:
//   everything must be capturable into a graph on `stream`.
// - Returns a Status naming an unsupported value ("head_dim 96 is not built;
//   built: 64, 128, 192/128, 256") or a launch error (CUDA_TRY).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/device_case.cuh"
#include "pagecheck/case.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

// ---- decode (decode_direct.cu / decode_split.cu) ----------------------------
// Both decode paths take cases whose every sequence has q_len == 1.
Applicability decode_applies(const Case& c);

// One pass; one CTA (or cluster) per (sequence, kv head): a GQA group shares
// every K/V load. No workspace.
Status launch_direct(const DeviceCaseView& view, cudaStream_t stream);

// The direct launch's grid as the planner sizes it (PlanRequest): the latent
// (MLA) kernel on Hopper takes 64 query heads a CTA, one CTA a
// multiprocessor; every other kernel leaves both at 0 (the planner's GQA
// model: sequences x KV heads, several CTAs a multiprocessor).
struct DecodeGrid {
  std::int64_t direct_ctas = 0;
  bool one_cta_per_multiprocessor = false;
};
DecodeGrid decode_direct_grid(const DeviceCaseView& view);

// Split-KV workspace: partial outputs and float32 statistics per partition.
struct SplitWorkspace {
  float* partial_out = nullptr;  // [num_seqs, q_heads, max_partitions, v_head_dim]
  float* partial_max = nullptr;  // [num_seqs, q_heads, max_partitions]
  float* partial_sum = nullptr;  // [num_seqs, q_heads, max_partitions]
  std::int64_t max_partitions = 0;  // ceil(view.max_seq_len / partition_tokens)
};
// Floats needed by each of the three arrays for a view at its capacity.
std::size_t split_partial_out_floats(const DeviceCaseView& view, std::int64_t partition_tokens);
std::size_t split_stat_floats(const DeviceCaseView& view, std::int64_t partition_tokens);
// Partition kernel + merge kernel. Empty partitions (past the context, or left
// empty by the sliding window) and contexts shorter than one partition merge
// to the right answer, never NaN.
Status launch_split(const DeviceCaseView& view, const SplitWorkspace& workspace,
                    std::int64_t partition_tokens, cudaStream_t stream);
// What the plan chooses, per sequence: seq_len > threshold_tokens is split,
// the rest attended whole, in the same partition launch (the first CTA of a
// short sequence runs the direct path's code); the merge kernel then takes
// the split sequences. No merge when the capacity is at most the threshold.
Status launch_auto(const DeviceCaseView& view, const SplitWorkspace& workspace,
                   std::int64_t partition_tokens, std::int64_t threshold_tokens, cudaStream_t stream);

// ---- prefill (prefill.cu) ---------------------------------------------------
Applicability prefill_applies(const Case& c);
Status launch_prefill(const DeviceCaseView& view, cudaStream_t stream);
// The kernel launch_prefill runs for this view on the current device:
// "wgmma (sm_90a)" (Hopper, head dim 128, 16-bit or FP8 K/V), "mma.sync", or
// "f32 (CUDA cores)". PAGECHECK_ATTN_KERNEL=mma forces "mma.sync".
const char* prefill_kernel_name(const DeviceCaseView& view);

// ---- gather + FMHA (fmha.cu) ------------------------------------------------
// BF16 K/V with head dim 128 for both K and V, like the runtime module.
Applicability fmha_applies(const Case& c);
// Contiguous K/V the gather writes and the FMHA reads: sequence s occupies
// tokens [s * capacity_tokens, s * capacity_tokens + seq_len[s]) of each
// buffer, each token [kv_heads, 128] BF16.
struct FmhaWorkspace {
  void* key = nullptr;
  void* value = nullptr;
  std::int64_t capacity_tokens = 0;  // = view.max_seq_len
};
std::size_t fmha_workspace_bytes_each(const DeviceCaseView& view);  // bytes of key (= of value)
Status launch_gather(const DeviceCaseView& view, const FmhaWorkspace& workspace, cudaStream_t stream);
Status launch_fmha(const DeviceCaseView& view, const FmhaWorkspace& workspace, cudaStream_t stream);
const char* fmha_kernel_name(const DeviceCaseView& view);  // as prefill_kernel_name

}  // namespace pagecheck::gpu
