// The case model: one batch of sequences over a paged KV cache, as loaded
// from a case file or made by the generator. docs/case-format.md is the
// user-facing contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagecheck/paged_kv.hpp"
#include "pagecheck/tensor.hpp"

namespace pagecheck {

enum class TableForm : std::uint8_t {
  Dense,  // vLLM: block_table [num_seqs, max_blocks_per_seq] + seq_lens
  Csr,    // FlashInfer: kv_indptr, kv_indices, kv_last_page_len
};

// How a case file gave the KV cache (docs/case-format.md, "Cache forms"). The
// case always holds separate key_cache and value_cache tensors in
// params.layout; the reader converts the other forms, and files are always
// written in the separate form.
enum class CacheForm : std::uint8_t {
  Separate,         // key_cache + value_cache, NHD or HND (kv_layout)
  VllmCombined,     // kv_cache [2, num_blocks, block_size, kv_heads, head_dim]: NHD halves, viewed in place
  FlashInferPaged,  // paged_kv_cache [num_pages, 2, ...] NHD or HND: copied apart at read time
  VllmClassic,      // key_cache [num_blocks, kv_heads, head_dim/x, block_size, x] + value_cache
                    // [num_blocks, kv_heads, head_dim, block_size]: copied to HND at read time
  VllmLatent,       // MLA: kv_c_and_k_pe_cache [num_blocks, block_size, head_dim] (or FlashMLA's
                    // [.., 1, head_dim]): viewed in place as key_cache [num_blocks, block_size, 1, head_dim]
  FlashInferLatent, // MLA: ckv_cache [num_pages, page_size, kv_lora_rank] + kpe_cache
                    // [num_pages, page_size, rope_dim]: copied into one latent cache at read time
};

// "key_cache + value_cache", "kv_cache (vLLM)", "paged_kv_cache (FlashInfer)",
// "key_cache + value_cache (vLLM classic)".
const char* cache_form_name(CacheForm form);
// True for the forms whose K and V the reader copies into memory of the case
// (FlashInferPaged, VllmClassic): memory that estimate_memory counts.
inline bool cache_form_copies(CacheForm form) {
  return form == CacheForm::FlashInferPaged || form == CacheForm::VllmClassic || form == CacheForm::FlashInferLatent;
}

struct CaseParams {
  KvLayout layout = KvLayout::NHD;
  bool causal = true;
  std::optional<double> scale;    // default 1/sqrt(head_dim)
  std::int64_t sliding_window = 0;  // 0: none
  double softcap = 0.0;             // 0: none
  double k_scale = 1.0;
  double v_scale = 1.0;
  // The block size the table was built for, when the recording runtime says
  // (__metadata__ "block_size"); validation checks it equals the cache's.
  std::optional<std::int64_t> table_block_size;
  // Set: the case's cache is a latent (MLA) cache (__metadata__
  // "kv_lora_rank", vLLM's name): one KV head whose rows hold the latent (the
  // first kv_lora_rank columns, which are also V) and the rope part; V is a
  // column prefix of K, so v_head_dim = kv_lora_rank and value_cache is the
  // key_cache tensor itself (docs/case-format.md, "Latent (MLA) caches").
  std::optional<std::int64_t> kv_lora_rank;
  std::string description;
  // Everything else found in / to be written to __metadata__ (seed, generator
  // settings, tool version). Known keys above are not duplicated here.
  std::map<std::string, std::string> extra_metadata;

  double effective_scale(std::int64_t head_dim) const;
};

// Both table forms reduced to CSR; `form` and `max_blocks_per_seq` remember
// how it was given so that it is written back the same way.
struct BlockTable {
  TableForm form = TableForm::Dense;
  std::int64_t max_blocks_per_seq = 0;     // Dense only
  std::vector<std::int64_t> page_indptr;   // [num_seqs + 1]
  std::vector<std::int32_t> page_indices;  // Dense: num_seqs * max_blocks_per_seq entries
};

// Makes the bytes of a case's KV caches on demand, for a case that does not
// hold them (a generated case: generate_case_sourced). Whoever reads the
// caches asks for the blocks it needs: the reference a few sequences' pages
// at a time, the GPU upload and the file writer the pool in chunks. Each
// block's bytes depend only on the block, so any range can be made on any
// thread, as often as needed, with the same bytes.
class CacheSource {
 public:
  virtual ~CacheSource() = default;
  // Physical blocks [begin, end) of key_cache and value_cache into `key` and
  // `value`, which hold (end - begin) blocks each at the caches' block
  // strides: the bytes the held caches would have there; `value` may be null
  // (only the keys). Safe to call from several threads at once.
  virtual void fill_blocks(std::int64_t begin, std::int64_t end, std::byte* key, std::byte* value) const = 0;
};

struct Case {
  std::string name;  // file stem or generator label
  CaseParams params;

  Tensor query;        // [num_tokens, q_heads, head_dim]  F32/F16/BF16
  Tensor key_cache;    // NHD or HND, see params.layout
  Tensor value_cache;  // same layout, its own dim
  CacheForm cache_form = CacheForm::Separate;  // how the file gave them (written back as Separate)
  BlockTable table;
  std::vector<std::int32_t> seq_lens;         // [num_seqs] (derived for CSR)
  std::vector<std::int32_t> query_start_loc;  // [num_seqs + 1] (derived when absent)
  bool query_start_loc_given = false;

  // Set: key_cache and value_cache have their dtype, shape and nbytes but no
  // data, and their bytes come from here (read them with fill_cache_blocks).
  std::shared_ptr<const CacheSource> cache_source;

  // Attention sinks (gpt-oss): one logit per query head, [q_heads]; empty:
  // none. Each softmax denominator gains exp(sink - max), the LSE includes
  // it, nothing else changes (docs/case-format.md, "Attention sinks").
  std::vector<float> sinks;
  // ALiBi (BLOOM, MPT): one slope per query head, [q_heads]; empty: none.
  // Logit += slope * (key position - query position), absolute positions.
  std::vector<float> alibi_slopes;

  std::optional<Tensor> recorded_output;  // [num_tokens, q_heads, v_head_dim]
  std::optional<Tensor> recorded_lse;     // [num_tokens, q_heads] F32

  // Geometry, read off the tensors (valid once the shapes have been checked).
  std::int64_t num_seqs() const { return static_cast<std::int64_t>(seq_lens.size()); }
  std::int64_t num_tokens() const { return query.dim(0); }
  std::int64_t q_heads() const { return query.dim(1); }
  std::int64_t head_dim() const { return query.dim(2); }
  std::int64_t num_blocks() const { return key_cache.dim(0); }
  std::int64_t block_size() const { return key_cache.dim(params.layout == KvLayout::NHD ? 1 : 2); }
  std::int64_t kv_heads() const { return key_cache.dim(params.layout == KvLayout::NHD ? 2 : 1); }
  std::int64_t key_head_dim() const { return key_cache.dim(3); }
  std::int64_t v_head_dim() const { return params.kv_lora_rank ? *params.kv_lora_rank : value_cache.dim(3); }
  bool has_latent() const { return params.kv_lora_rank.has_value(); }
  std::int64_t q_len(std::int64_t seq) const { return query_start_loc[seq + 1] - query_start_loc[seq]; }
  std::int64_t max_seq_len() const;
  std::int64_t max_q_len() const;
  bool is_decode() const { return max_q_len() == 1; }
  bool has_sinks() const { return !sinks.empty(); }
  bool has_alibi() const { return !alibi_slopes.empty(); }
  double scale() const { return params.effective_scale(head_dim()); }

  // False when the caches come from cache_source rather than memory.
  bool caches_held() const { return cache_source == nullptr; }
  // Bytes of one block of key_cache / value_cache.
  std::int64_t key_block_bytes() const;
  std::int64_t value_block_bytes() const;

  // The cache and table as the shared view, pointing into this case's host
  // memory (pointers stay valid while the case lives and is not modified).
  // With a cache_source the view's key_data and value_data are null.
  PagedKvView host_view() const;
};

// Physical blocks [begin, end) of the case's caches into `key` and `value`
// ((end - begin) blocks each): copied from memory, or made by cache_source.
// `value` may be null: only the keys (a latent cache's value_cache is the
// key_cache).
void fill_cache_blocks(const Case& c, std::int64_t begin, std::int64_t end, std::byte* key, std::byte* value);

}  // namespace pagecheck
