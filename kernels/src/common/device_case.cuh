// The case as the kernels see it: device pointers and scalars, one flat
// struct that every launcher takes. Built by the GPU core (upload of a Case);
// read by every kernel family. Pointers are device memory.
#pragma once

#include <cstdint>

#include "pagecheck/dtype.hpp"
#include "pagecheck/paged_kv.hpp"

namespace pagecheck::gpu {

struct DeviceCaseView {
  PagedKvView kv;                       // cache + table, device pointers, 64-bit strides
  DType kv_dtype = DType::BF16;         // element type of key and value caches
  const void* query = nullptr;          // [num_tokens, q_heads, head_dim], query_dtype
  DType query_dtype = DType::BF16;
  const std::int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  void* output = nullptr;               // [num_tokens, q_heads, v_head_dim], output_dtype
  DType output_dtype = DType::BF16;     // = query_dtype
  float* lse = nullptr;                 // [num_tokens, q_heads], natural log; may be null
  std::int64_t num_tokens = 0;
  std::int32_t q_heads = 0;
  std::int32_t max_q_len = 0;
  std::int32_t max_seq_len = 0;         // the largest seq_len at upload (capacity for graphs)
  float scale = 1.0f;                   // logit scale
  float softcap = 0.0f;                 // 0: none
  float k_scale = 1.0f, v_scale = 1.0f; // stored x means x * scale
  std::int64_t window = 0;              // sliding window in keys, 0: none
  bool causal = true;
  // Issue 23's logit features (null: the case has none). The decode paths
  // take both; prefill and fmha are n/a for them (features.cpp) and ignore them.
  const float* sinks = nullptr;         // [q_heads] sink logits, natural units
  const float* alibi_slopes = nullptr;  // [q_heads] ALiBi slopes: logit += slope * (key pos - query pos)
};

}  // namespace pagecheck::gpu
