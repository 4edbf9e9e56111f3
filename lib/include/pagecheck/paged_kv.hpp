// The one definition of where key j of sequence s lives. Shared by the
// reference, the kernels and the tests: plain data, 64-bit offsets, no CUDA
// headers (PC_HD expands to __host__ __device__ only under nvcc).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PC_HD __host__ __device__ __forceinline__
#else
#define PC_HD inline
#endif

namespace pagecheck {

enum class KvLayout : std::uint8_t {
  NHD,  // [num_blocks, block_size, kv_heads, dim]
  HND,  // [num_blocks, kv_heads, block_size, dim]
};

// Element strides of one cache tensor (the dim stride is 1).
struct CacheStrides {
  std::int64_t block = 0;
  std::int64_t slot = 0;
  std::int64_t head = 0;
};

PC_HD CacheStrides cache_strides(KvLayout layout, std::int64_t block_size, std::int64_t kv_heads,
                                 std::int64_t dim) {
  if (layout == KvLayout::NHD) return {block_size * kv_heads * dim, kv_heads * dim, dim};
  return {kv_heads * block_size * dim, dim, block_size * dim};
}

// A paged KV cache and its block table, in the CSR form both table forms
// reduce to: the pages of sequence s are page_indices[page_indptr[s] ...],
// the first ceil(seq_lens[s] / block_size) of them are used. (A dense
// vLLM table has page_indptr[s] = s * max_blocks_per_seq.)
struct PagedKvView {
  const void* key_data = nullptr;       // key_cache, element type per case
  const void* value_data = nullptr;     // value_cache
  const std::int32_t* page_indices = nullptr;  // [total table entries]
  const std::int64_t* page_indptr = nullptr;   // [num_seqs + 1]
  const std::int32_t* seq_lens = nullptr;      // [num_seqs]
  std::int64_t num_seqs = 0;
  std::int64_t num_blocks = 0;
  std::int32_t block_size = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;    // key head dim
  std::int32_t v_head_dim = 0;  // value head dim
  CacheStrides key_strides;
  CacheStrides value_strides;

  PC_HD std::int32_t seq_len(std::int64_t seq) const { return seq_lens[seq]; }
  PC_HD std::int64_t num_pages(std::int64_t seq) const {
    return (static_cast<std::int64_t>(seq_lens[seq]) + block_size - 1) / block_size;
  }
  // Physical page holding token `token` of sequence `seq`.
  PC_HD std::int64_t page(std::int64_t seq, std::int64_t token) const {
    return page_indices[page_indptr[seq] + token / block_size];
  }
  // Element offset of key[seq][token][kv_head][0] in key_data.
  PC_HD std::int64_t key_offset(std::int64_t seq, std::int64_t token, std::int64_t kv_head) const {
    return page(seq, token) * key_strides.block + (token % block_size) * key_strides.slot +
           kv_head * key_strides.head;
  }
  PC_HD std::int64_t value_offset(std::int64_t seq, std::int64_t token, std::int64_t kv_head) const {
    return page(seq, token) * value_strides.block + (token % block_size) * value_strides.slot +
           kv_head * value_strides.head;
  }
};

// Masking rule shared by everyone: query at absolute position `pos` sees key
// `key` when causal (key <= pos) and inside a window of `window` keys
// (key > pos - window) when window > 0.
PC_HD bool key_visible(std::int64_t key, std::int64_t pos, bool causal, std::int64_t window) {
  if (causal && key > pos) return false;
  if (window > 0 && key <= pos - window) return false;
  return true;
}

}  // namespace pagecheck
