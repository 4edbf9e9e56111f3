// A Case on the device: owned buffers and the DeviceCaseView the kernels
// take. Sizes are 64-bit throughout (a cache may hold more than 2^31
// elements). The table and lengths are also kept on the host, since the
// graph check changes them in place and restores them afterwards.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/cuda_resources.cuh"
#include "common/device_case.cuh"
#include "pagecheck/case.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

struct DeviceCase {
  DeviceBuffer query;            // [num_tokens, q_heads, head_dim] query dtype
  DeviceBuffer key_cache;        // [num_blocks (+ spare), ...] KV dtype, layout per case
  DeviceBuffer value_cache;
  DeviceBuffer page_indices;     // int32 [table entries]
  DeviceBuffer page_indptr;      // int64 [num_seqs + 1]
  DeviceBuffer seq_lens;         // int32 [num_seqs]
  DeviceBuffer query_start_loc;  // int32 [num_seqs + 1]
  DeviceBuffer output;           // [num_tokens, q_heads, v_head_dim] query dtype
  DeviceBuffer lse;              // F32 [num_tokens, q_heads]
  // Issue 23's logit features, for --kernel libraries (ABI 1.2) and, through
  // view.sinks / view.alibi_slopes, the built-in decode paths (features.hpp).
  DeviceBuffer sinks;            // F32 [q_heads] sink logits; empty when the case has none
  DeviceBuffer alibi_slopes;     // F32 [q_heads]; empty when the case has none
  DeviceCaseView view;

  // What the table and lengths hold at upload (the reference belongs to these).
  std::vector<std::int32_t> host_page_indices;
  std::vector<std::int64_t> host_page_indptr;
  std::vector<std::int32_t> host_seq_lens;
  std::vector<std::int32_t> host_query_start_loc;
  // A page no table entry references, for the graph check's page swap: an
  // unreferenced page of the pool, else one appended to the cache.
  std::int64_t spare_page = -1;

  std::int64_t output_elements() const { return view.num_tokens * view.q_heads * view.kv.v_head_dim; }
  std::int64_t lse_elements() const { return view.num_tokens * view.q_heads; }
  std::size_t key_page_bytes() const;    // bytes of one page of the key cache
  std::size_t value_page_bytes() const;
  std::int64_t q_len(std::int64_t seq) const { return host_query_start_loc[seq + 1] - host_query_start_loc[seq]; }

  // Copies the host table and lengths (as they are now) to the device.
  Status upload_table(cudaStream_t stream) const;
};

// Uploads `c` (its shapes validated). The view's max_seq_len is the capacity:
// the largest seq_len of the case.
Expected<std::unique_ptr<DeviceCase>> upload_case(const Case& c);

// A case made on the device, for tuning and benchmarks: random values
// (uniform in [-1, 1]) in a BF16 cache of shuffled pages, every sequence
// `context` tokens long, one query token each unless q_len > 1.
struct DeviceGeometry {
  std::int64_t num_seqs = 1;
  std::int64_t context = 1024;
  std::int64_t q_len = 1;
  std::int64_t q_heads = 32, kv_heads = 8, head_dim = 128, v_head_dim = 128;
  std::int64_t block_size = 16;
  std::uint64_t seed = 1;
};
Expected<std::unique_ptr<DeviceCase>> synthesize_device_case(const DeviceGeometry& g);

// Fills `count` elements of `dtype` at `data` with uniform values in [-1, 1]
// derived from `seed` (a hash of the index: no state, any size).
Status fill_random(void* data, DType dtype, std::int64_t count, std::uint64_t seed, cudaStream_t stream);

// Fills `count` 32-bit (16-bit) words at `data` with `pattern`.
Status fill_pattern_u32(void* data, std::int64_t count, std::uint32_t pattern, cudaStream_t stream);
Status fill_pattern_u16(void* data, std::int64_t count, std::uint16_t pattern, cudaStream_t stream);

// The output (and LSE) widened to float.
std::vector<float> widen(DType dtype, const std::vector<std::byte>& raw, std::int64_t count);

}  // namespace pagecheck::gpu
