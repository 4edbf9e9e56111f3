#include "pagecheck/case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pagecheck {

const char* cache_form_name(CacheForm form) {
  switch (form) {
    case CacheForm::Separate: return "key_cache + value_cache";
    case CacheForm::VllmCombined: return "kv_cache (vLLM)";
    case CacheForm::FlashInferPaged: return "paged_kv_cache (FlashInfer)";
    case CacheForm::VllmClassic: return "key_cache + value_cache (vLLM classic)";
    case CacheForm::VllmLatent: return "kv_c_and_k_pe_cache (vLLM MLA)";
    case CacheForm::FlashInferLatent: return "ckv_cache + kpe_cache (FlashInfer MLA)";
  }
  return "unknown";
}

double CaseParams::effective_scale(std::int64_t head_dim) const {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

std::int64_t Case::max_seq_len() const {
  std::int64_t m = 0;
  for (auto len : seq_lens) m = std::max<std::int64_t>(m, len);
  return m;
}

std::int64_t Case::max_q_len() const {
  std::int64_t m = 0;
  for (std::int64_t s = 0; s + 1 < static_cast<std::int64_t>(query_start_loc.size()); ++s) m = std::max(m, q_len(s));
  return m;
}

namespace {
std::int64_t block_bytes(const Tensor& cache) {
  std::int64_t n = static_cast<std::int64_t>(dtype_size(cache.dtype));
  for (std::size_t i = 1; i < cache.shape.size(); ++i) n *= cache.shape[i];
  return n;
}
}  // namespace

std::int64_t Case::key_block_bytes() const { return block_bytes(key_cache); }
std::int64_t Case::value_block_bytes() const { return block_bytes(value_cache); }

void fill_cache_blocks(const Case& c, std::int64_t begin, std::int64_t end, std::byte* key, std::byte* value) {
  if (end <= begin) return;
  if (c.cache_source) {
    c.cache_source->fill_blocks(begin, end, key, value);
    return;
  }
  const std::int64_t kb = c.key_block_bytes(), vb = c.value_block_bytes();
  std::memcpy(key, c.key_cache.data + begin * kb, static_cast<std::size_t>((end - begin) * kb));
  if (value != nullptr) std::memcpy(value, c.value_cache.data + begin * vb, static_cast<std::size_t>((end - begin) * vb));
}

PagedKvView Case::host_view() const {
  PagedKvView v;
  v.key_data = key_cache.data;
  v.value_data = value_cache.data;
  v.page_indices = table.page_indices.data();
  v.page_indptr = table.page_indptr.data();
  v.seq_lens = seq_lens.data();
  v.num_seqs = num_seqs();
  v.num_blocks = num_blocks();
  v.block_size = static_cast<std::int32_t>(block_size());
  v.kv_heads = static_cast<std::int32_t>(kv_heads());
  v.head_dim = static_cast<std::int32_t>(key_head_dim());
  v.v_head_dim = static_cast<std::int32_t>(v_head_dim());
  v.key_strides = cache_strides(params.layout, block_size(), kv_heads(), key_head_dim());
  // A latent cache's V is the column prefix of each key row: the key's strides.
  v.value_strides = has_latent() ? v.key_strides : cache_strides(params.layout, block_size(), kv_heads(), v_head_dim());
  return v;
}

}  // namespace pagecheck
