// Validation before anything runs. Passes, each only when the ones before
// found the case sound enough to look at:
//   1. structure: ranks, dtypes, byte sizes, table vector lengths (so the
//      later passes never index out of range, whatever the Case holds);
//   2. geometry and parameters: GQA ratio, head dims, scales, window;
//   3. per sequence: lengths, query_start_loc, the table's needed entries;
//   4. memory: what the reference and the harness will allocate, against the
//      host's memory (limits.hpp): an error above it;
//   5. values: NaN or Inf in the query or in a K/V slot a sequence uses
//      (slots below its seq_len through the table): a warning with where.
//      Unreferenced pages and slots past seq_len may hold anything (the
//      generator poisons them with NaN) and are not read.
// The runtime module's checks map as follows: "another KV block size" is the
// recorded block_size against the cache's (and CSR last-page lengths beyond
// it); "capacity overflow" is the checked table capacity; "cannot hold its
// declared tokens" and "exceeds prepared capacity" are a row (or CSR range)
// too short for its seq_len; "missing physical page" is an entry outside
// [0, num_blocks).
#include "pagecheck/validate.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <thread>
#include <unordered_map>

#include "pagecheck/limits.hpp"
#include "pagecheck/threads.hpp"

namespace pagecheck {

namespace {

// Messages are capped per kind: the first kMaxPerKind are kept, the rest
// counted, so a table full of garbage gives a readable report.
constexpr int kMaxPerKind = 20;

class Findings {
 public:
  explicit Findings(std::vector<std::string>& out) : out_(out) {}
  template <class MakeMessage>
  void add(const char* kind, MakeMessage&& make_message) {
    Count& count = counts_[kind];
    ++total_;
    if (count.shown < kMaxPerKind) {
      out_.push_back(make_message());
      ++count.shown;
    } else {
      ++count.hidden;
    }
  }
  void finish() {
    for (const auto& [kind, count] : counts_)
      if (count.hidden > 0)
        out_.push_back(fmt::format("... and {} more of the kind '{}' (first {} shown)", count.hidden, kind, kMaxPerKind));
  }
  // Findings so far, the hidden ones included.
  std::int64_t total() const { return total_; }

 private:
  struct Count {
    int shown = 0;
    std::int64_t hidden = 0;
  };
  std::vector<std::string>& out_;
  std::map<std::string, Count> counts_;
  std::int64_t total_ = 0;
};

const char* layout_name(KvLayout layout) { return layout == KvLayout::NHD ? "NHD" : "HND"; }

bool dtype_in(DType d, const std::vector<DType>& allowed) {
  for (DType a : allowed)
    if (a == d) return true;
  return false;
}

// Pass 1. Returns false when later passes cannot safely run.
bool check_structure(const Case& c, Findings& errors, bool caches_may_be_unfilled) {
  const std::int64_t before = errors.total();
  const auto check_tensor = [&](const char* name, const Tensor& t, std::int64_t rank, const char* shape,
                                const std::vector<DType>& dtypes, bool may_be_unfilled = false) {
    if (t.rank() != rank) {
      errors.add("structure",
                 [&] { return fmt::format("{} has shape {} but must have rank {}: {}", name, t.describe(), rank, shape); });
      return;
    }
    if (!dtype_in(t.dtype, dtypes)) {
      std::string list;
      for (DType d : dtypes) list += (list.empty() ? "" : ", ") + std::string(dtype_name(d));
      errors.add("structure",
                 [&] { return fmt::format("{} is {} but must be one of: {}", name, dtype_name(t.dtype), list); });
    }
    std::uint64_t elements = 1;
    bool bad = false;
    for (auto d : t.shape) bad |= d < 0 || __builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements);
    std::uint64_t bytes = 0;
    bad |= __builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_size(t.dtype)), &bytes);
    if (bad || bytes != t.nbytes || (t.nbytes > 0 && t.data == nullptr && !may_be_unfilled))
      errors.add("structure", [&] {
        return fmt::format("{} {} holds {} bytes of data{}", name, t.describe(), t.nbytes,
                           bad ? " (its shape is negative or overflows)" : fmt::format(", expected {}", bytes));
      });
  };
  const std::vector<DType> kFloat = {DType::F32, DType::F16, DType::BF16};
  const std::vector<DType> kCache = {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2};
  const char* cache_shape = c.params.layout == KvLayout::NHD ? "[num_blocks, block_size, kv_heads, dim] (NHD)"
                                                              : "[num_blocks, kv_heads, block_size, dim] (HND)";
  check_tensor("query", c.query, 3, "[num_tokens, q_heads, head_dim]", kFloat);
  check_tensor("key_cache", c.key_cache, 4, cache_shape, kCache, caches_may_be_unfilled);
  check_tensor("value_cache", c.value_cache, 4, cache_shape, kCache, caches_may_be_unfilled);
  if (errors.total() != before) return false;

  if (c.q_heads() < 1) errors.add("structure", [&] { return fmt::format("query {} has no heads", c.query.describe()); });
  if (c.head_dim() < 1)
    errors.add("structure", [&] { return fmt::format("query {} has head_dim 0", c.query.describe()); });
  if (c.block_size() < 1)
    errors.add("structure", [&] { return fmt::format("key_cache {} has block_size 0", c.key_cache.describe()); });
  if (c.kv_heads() < 1)
    errors.add("structure", [&] { return fmt::format("key_cache {} has no KV heads", c.key_cache.describe()); });
  if (c.key_head_dim() < 1 || c.v_head_dim() < 1)
    errors.add("structure", [&] {
      return fmt::format("key_cache {} and value_cache {} need head dims >= 1", c.key_cache.describe(),
                         c.value_cache.describe());
    });
  // The shared view (paged_kv.hpp) holds these as 32-bit integers.
  constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
  if (c.block_size() > kInt32Max || c.kv_heads() > kInt32Max || c.key_head_dim() > kInt32Max ||
      c.v_head_dim() > kInt32Max)
    errors.add("structure", [&] {
      return fmt::format("key_cache {} / value_cache {}: block_size, kv_heads and head dims must fit 32 bits",
                         c.key_cache.describe(), c.value_cache.describe());
    });
  const std::size_t slot_axis = c.params.layout == KvLayout::NHD ? 1 : 2;
  const std::size_t head_axis = c.params.layout == KvLayout::NHD ? 2 : 1;
  for (const auto& item : {std::pair<std::size_t, const char*>{0, "num_blocks"}, {slot_axis, "block_size"},
                            {head_axis, "kv_heads"}}) {
    // Not a structured binding: clang 14 cannot capture one in the lambda.
    const std::size_t axis = item.first;
    const char* what = item.second;
    if (c.key_cache.dim(axis) != c.value_cache.dim(axis))
      errors.add("structure", [&] {
        return fmt::format("key_cache {} and value_cache {} disagree on {} ({} vs {}, layout {})", c.key_cache.describe(),
                           c.value_cache.describe(), what, c.key_cache.dim(axis), c.value_cache.dim(axis),
                           layout_name(c.params.layout));
      });
  }

  const auto num_seqs = static_cast<std::int64_t>(c.seq_lens.size());
  if (static_cast<std::int64_t>(c.table.page_indptr.size()) != num_seqs + 1)
    errors.add("structure", [&] {
      return fmt::format("the table's page_indptr has {} entries but there are {} sequences (seq_lens); it needs {}",
                         c.table.page_indptr.size(), num_seqs, num_seqs + 1);
    });
  if (static_cast<std::int64_t>(c.query_start_loc.size()) != num_seqs + 1)
    errors.add("structure", [&] {
      return fmt::format("query_start_loc has {} entries but there are {} sequences; it needs {}",
                         c.query_start_loc.size(), num_seqs, num_seqs + 1);
    });
  if (c.table.form == TableForm::Dense && errors.total() == before) {
    std::int64_t entries = 0;
    if (c.table.max_blocks_per_seq < 0 || __builtin_mul_overflow(num_seqs, c.table.max_blocks_per_seq, &entries) ||
        entries != static_cast<std::int64_t>(c.table.page_indices.size())) {
      errors.add("structure", [&] {
        return fmt::format("block_table holds {} entries but {} sequences x max_blocks_per_seq {} need {}",
                           c.table.page_indices.size(), num_seqs, c.table.max_blocks_per_seq, entries);
      });
    } else {
      for (std::int64_t s = 0; s <= num_seqs; ++s)
        if (c.table.page_indptr[s] != s * c.table.max_blocks_per_seq) {
          errors.add("structure", [&] {
            return fmt::format("dense table: page_indptr[{}] = {} but row {} starts at {} (x max_blocks_per_seq {})", s,
                               c.table.page_indptr[s], s, s * c.table.max_blocks_per_seq, c.table.max_blocks_per_seq);
          });
          break;
        }
    }
  }

  if (c.recorded_output) {
    const Tensor& out = *c.recorded_output;
    check_tensor("output", out, 3, "[num_tokens, q_heads, v_head_dim]", kFloat);
    if (out.rank() == 3 && (out.dim(0) != c.num_tokens() || out.dim(1) != c.q_heads() || out.dim(2) != c.v_head_dim()))
      errors.add("structure", [&] {
        return fmt::format("output has shape {} but must be [num_tokens, q_heads, v_head_dim] = [{}, {}, {}]",
                           out.describe(), c.num_tokens(), c.q_heads(), c.v_head_dim());
      });
  }
  if (c.recorded_lse) {
    const Tensor& lse = *c.recorded_lse;
    check_tensor("lse", lse, 2, "[num_tokens, q_heads]", {DType::F32});
    if (lse.rank() == 2 && (lse.dim(0) != c.num_tokens() || lse.dim(1) != c.q_heads()))
      errors.add("structure", [&] {
        return fmt::format("lse has shape {} but must be [num_tokens, q_heads] = [{}, {}]", lse.describe(),
                           c.num_tokens(), c.q_heads());
      });
  }
  return errors.total() == before;
}

// A per-query-head vector of the case (sinks, alibi_slopes): empty, or [q_heads] finite
// values.
void check_per_head(const Case& c, const std::vector<float>& values, const char* name, const char* what,
                    Findings& errors) {
  if (values.empty()) return;
  if (static_cast<std::int64_t>(values.size()) != c.q_heads()) {
    errors.add("parameter", [&] {
      return fmt::format("{} has {} entries but must be [q_heads] = [{}]: one {} per query head", name, values.size(),
                         c.q_heads(), what);
    });
    return;
  }
  for (std::size_t h = 0; h < values.size(); ++h)
    if (!std::isfinite(values[h]))
      errors.add("parameter", [&, h] { return fmt::format("{}[{}] = {} must be finite", name, h, values[h]); });
}

// Pass 2.
void check_geometry_and_params(const Case& c, Findings& errors) {
  if (c.num_seqs() < 1) errors.add("geometry", [] { return std::string("the case has no sequences"); });
  if (c.q_heads() % c.kv_heads() != 0)
    errors.add("geometry", [&] {
      return fmt::format("q_heads {} is not a multiple of kv_heads {} (query {}, key_cache {})", c.q_heads(),
                         c.kv_heads(), c.query.describe(), c.key_cache.describe());
    });
  if (c.head_dim() != c.key_head_dim())
    errors.add("geometry", [&] {
      return fmt::format("query head_dim {} differs from key_cache head dim {} (query {}, key_cache {})", c.head_dim(),
                         c.key_head_dim(), c.query.describe(), c.key_cache.describe());
    });
  const CaseParams& p = c.params;
  if (p.table_block_size && *p.table_block_size != c.block_size())
    errors.add("geometry", [&] {
      return fmt::format("the block table was built for block_size {} (metadata) but the cache's block size is {}",
                         *p.table_block_size, c.block_size());
    });
  if (p.scale && !(std::isfinite(*p.scale) && *p.scale >= 0))
    errors.add("parameter", [&] { return fmt::format("scale = {} must be a finite number >= 0", *p.scale); });
  if (p.sliding_window < 0)
    errors.add("parameter",
               [&] { return fmt::format("sliding_window = {} must be >= 0 (0: no window)", p.sliding_window); });
  if (!(std::isfinite(p.softcap) && p.softcap >= 0))
    errors.add("parameter", [&] { return fmt::format("softcap = {} must be a finite number >= 0 (0: none)", p.softcap); });
  if (!(std::isfinite(p.k_scale) && p.k_scale > 0))
    errors.add("parameter", [&] { return fmt::format("k_scale = {} must be a finite number > 0", p.k_scale); });
  if (!(std::isfinite(p.v_scale) && p.v_scale > 0))
    errors.add("parameter", [&] { return fmt::format("v_scale = {} must be a finite number > 0", p.v_scale); });
  check_per_head(c, c.sinks, "sinks", "sink logit", errors);
  check_per_head(c, c.alibi_slopes, "alibi_slopes", "ALiBi slope", errors);
  if (c.has_latent()) {
    // MLA: one KV head whose rows are the latent (V) and the rope part.
    if (c.kv_heads() != 1 || c.params.layout != KvLayout::NHD || c.value_cache.data != c.key_cache.data)
      errors.add("geometry", [&] {
        return fmt::format("a latent (MLA) cache has one KV head in NHD with V inside K; key_cache is {} ({})",
                           c.key_cache.describe(), c.params.layout == KvLayout::NHD ? "NHD" : "HND");
      });
    if (*p.kv_lora_rank < 1 || *p.kv_lora_rank > c.key_head_dim())
      errors.add("geometry", [&] {
        return fmt::format("kv_lora_rank {} must be in 1..{} (the latent cache's row width)", *p.kv_lora_rank,
                           c.key_head_dim());
      });
    if (!p.scale)
      errors.add("parameter", [] {
        return std::string("a latent (MLA) case needs an explicit scale (metadata 'scale'): MLA's is 1/sqrt of the "
                           "query-key head dim before absorption (DeepSeek-V3: 1/sqrt(192), times YaRN's mscale^2), "
                           "never 1/sqrt of the latent row's width");
      });
  }
}

// Pass 3.
void check_sequences(const Case& c, Findings& errors, Findings& warnings) {
  const std::int64_t num_seqs = c.num_seqs();
  const std::int64_t num_tokens = c.num_tokens();
  const std::int64_t block_size = c.block_size();
  const std::int64_t num_blocks = c.num_blocks();
  const bool dense = c.table.form == TableForm::Dense;
  const auto& indptr = c.table.page_indptr;
  const auto& indices = c.table.page_indices;
  const auto table_entries = static_cast<std::int64_t>(indices.size());

  // The runtime's "capacity overflow": entries x block_size must fit 64 bits.
  std::int64_t capacity = 0;
  if (__builtin_mul_overflow(table_entries, block_size, &capacity))
    errors.add("capacity", [&] {
      return fmt::format("table capacity overflows: {} entries x block_size {}", table_entries, block_size);
    });

  // query_start_loc: starts at 0, never decreases, ends at num_tokens.
  const auto& qsl = c.query_start_loc;
  if (qsl[0] != 0)
    errors.add("query_start_loc", [&] { return fmt::format("query_start_loc[0] = {} but must be 0", qsl[0]); });
  if (qsl[num_seqs] != num_tokens)
    errors.add("query_start_loc", [&] {
      return fmt::format("query_start_loc[{}] = {} but query has {} tokens", num_seqs, qsl[num_seqs], num_tokens);
    });

  const auto entry_name = [&](std::int64_t s, std::int64_t page) {
    if (dense) return fmt::format("block_table[{}][{}]", s, page);
    return fmt::format("kv_indices[{}] (sequence {}, page {})", indptr[s] + page, s, page);
  };

  std::unordered_map<std::int32_t, std::int64_t> first_use;  // page -> index within the sequence
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int64_t seq_len = c.seq_lens[s];

    // Query tokens of this sequence.
    const std::int64_t q_len = static_cast<std::int64_t>(qsl[s + 1]) - qsl[s];
    if (q_len < 0)
      errors.add("query_start_loc", [&] {
        return fmt::format("query_start_loc decreases at sequence {}: query_start_loc[{}] = {} > query_start_loc[{}] = {}",
                           s, s, qsl[s], s + 1, qsl[s + 1]);
      });
    else if (q_len == 0)
      errors.add("q_len", [&] {
        return fmt::format("sequence {} has no query tokens (query_start_loc[{}] = query_start_loc[{}] = {}); q_len must "
                           "be >= 1",
                           s, s, s + 1, qsl[s]);
      });
    else if (q_len > seq_len && seq_len >= 1)
      errors.add("q_len", [&] {
        return fmt::format("sequence {}: q_len {} > seq_len {} (the new tokens' keys are in the cache, so q_len <= "
                           "seq_len)",
                           s, q_len, seq_len);
      });

    // The sequence's pages: [indptr[s], indptr[s] + usable) in page_indices.
    std::int64_t usable = 0;   // entries the table gives this sequence
    std::int64_t needed = 0;   // entries its seq_len needs
    if (dense) {
      if (seq_len < 1) {
        errors.add("seq_len", [&] { return fmt::format("seq_lens[{}] = {} but must be >= 1", s, seq_len); });
        continue;
      }
      usable = c.table.max_blocks_per_seq;
      needed = seq_len / block_size + (seq_len % block_size != 0 ? 1 : 0);
      if (needed > usable)
        errors.add("capacity", [&] {
          return fmt::format("sequence {}: seq_len {} needs {} pages of {} tokens but block_table row {} has only {} "
                             "(capacity {} tokens)",
                             s, seq_len, needed, block_size, s, usable, usable * block_size);
        });
    } else {
      const std::int64_t begin = indptr[s];
      const std::int64_t end = indptr[s + 1];
      if (begin < 0) {
        errors.add("kv_indptr", [&] { return fmt::format("kv_indptr[{}] = {} is negative", s, begin); });
        continue;
      }
      if (end < begin) {
        errors.add("kv_indptr", [&] {
          return fmt::format("kv_indptr decreases at sequence {}: kv_indptr[{}] = {} > kv_indptr[{}] = {}", s, s, begin,
                             s + 1, end);
        });
        continue;
      }
      if (end > table_entries) {
        errors.add("kv_indptr", [&] {
          return fmt::format("kv_indptr[{}] = {} is beyond the {} entries of kv_indices", s + 1, end, table_entries);
        });
        continue;
      }
      if (end == begin) {
        errors.add("kv_indptr", [&] {
          return fmt::format("sequence {} has no pages (kv_indptr[{}] = kv_indptr[{}] = {}); each sequence needs at "
                             "least one",
                             s, s, s + 1, begin);
        });
        continue;
      }
      usable = end - begin;
      needed = usable;
      std::int64_t full_pages_tokens = 0;
      if (__builtin_mul_overflow(usable - 1, block_size, &full_pages_tokens)) {
        errors.add("kv_last_page_len", [&] {
          return fmt::format("sequence {}: {} pages of {} tokens are more than seq_len {} can fill", s, usable,
                             block_size, seq_len);
        });
        continue;
      }
      const std::int64_t last_page_len = seq_len - full_pages_tokens;
      if (last_page_len < 1 || last_page_len > block_size) {
        errors.add("kv_last_page_len", [&] {
          return fmt::format("kv_last_page_len[{}] = {} must be in [1, block_size = {}]{}", s, last_page_len, block_size,
                             last_page_len > block_size ? " (was the table built for another block size?)" : "");
        });
        continue;
      }
    }

    // Needed entries name existing pages; a page twice in one sequence is
    // legal but suspicious. Entries past `needed` are padding.
    first_use.clear();
    const std::int64_t checked = std::min(needed, usable);
    for (std::int64_t j = 0; j < checked; ++j) {
      const std::int32_t page = indices[indptr[s] + j];
      if (page < 0) {
        errors.add("page", [&] {
          return fmt::format("{} = {} is negative (sequence {} needs {} pages for seq_len {})", entry_name(s, j), page, s,
                             needed, seq_len);
        });
        continue;
      }
      if (page >= num_blocks) {
        errors.add("page", [&] {
          return fmt::format("{} = {} but the cache has {} blocks", entry_name(s, j), page, num_blocks);
        });
        continue;
      }
      const auto emplaced = first_use.emplace(page, j);  // not a structured binding: the lambda captures it
      if (!emplaced.second) {
        const std::int64_t first = emplaced.first->second;
        warnings.add("duplicate page", [&] {
          return fmt::format("sequence {} uses page {} twice: {} and {}", s, page, entry_name(s, first),
                             entry_name(s, j));
        });
      }
    }
  }
}

// Pass 4.
void check_memory(const Case& c, Findings& errors) {
  const auto limit = host_memory_limit();
  if (!limit) {
    errors.add("memory", [&] { return limit.error().message; });
    return;
  }
  const MemoryEstimate estimate = estimate_memory(c);
  if (estimate.host_bytes() <= *limit) return;
  errors.add("memory", [&] {
    return fmt::format(
        "running this case needs about {} of host memory (the reference: {}, float64 K/V of the longest sequence, "
        "{} long, and its logits per worker thread; outputs: {}{}) but the limit is {} ({}); set "
        "PAGECHECK_MEMORY_LIMIT to allow more",
        format_bytes(estimate.host_bytes()), format_bytes(estimate.reference_bytes), c.max_seq_len(),
        format_bytes(estimate.harness_bytes),
        estimate.case_bytes ? fmt::format("; the KV cache converted from {}: {}", cache_form_name(c.cache_form),
                                          format_bytes(estimate.case_bytes))
                            : std::string(),
        format_bytes(*limit),
        std::getenv("PAGECHECK_MEMORY_LIMIT") != nullptr ? "PAGECHECK_MEMORY_LIMIT" : "the machine's memory");
  });
}

// Pass 5. A non-finite element of one row of `count` elements of dtype
// `dtype` at byte `data`: its index, or -1. Bit tests, no conversion:
// exponent all ones (F32, F16, BF16, E5M2), the NaN codes 0x7F/0xFF (E4M3).
std::int64_t first_nonfinite(DType dtype, const std::byte* data, std::int64_t offset, std::int64_t count) {
  switch (dtype) {
    case DType::F32:
      for (std::int64_t k = 0; k < count; ++k) {
        std::uint32_t bits;
        std::memcpy(&bits, data + (offset + k) * 4, 4);
        if ((bits & 0x7F800000u) == 0x7F800000u) return k;
      }
      return -1;
    case DType::F16:
    case DType::BF16: {
      // Count first, in a loop without an exit that the compiler vectorises;
      // look for the index only in a row that has one.
      const std::uint16_t mask = dtype == DType::F16 ? 0x7C00 : 0x7F80;
      const auto bits_at = [&](std::int64_t k) {
        std::uint16_t bits;
        std::memcpy(&bits, data + (offset + k) * 2, 2);
        return bits;
      };
      int found = 0;
      for (std::int64_t k = 0; k < count; ++k) found |= (bits_at(k) & mask) == mask;
      if (!found) return -1;
      for (std::int64_t k = 0; k < count; ++k)
        if ((bits_at(k) & mask) == mask) return k;
      return -1;
    }
    case DType::F8_E4M3:
      for (std::int64_t k = 0; k < count; ++k)
        if ((static_cast<std::uint8_t>(data[offset + k]) & 0x7F) == 0x7F) return k;
      return -1;
    case DType::F8_E5M2:
      for (std::int64_t k = 0; k < count; ++k)
        if ((static_cast<std::uint8_t>(data[offset + k]) & 0x7C) == 0x7C) return k;
      return -1;
    default:
      for (std::int64_t k = 0; k < count; ++k)
        if (!std::isfinite(load_element(dtype, data, static_cast<std::size_t>(offset + k)))) return k;
      return -1;
  }
}

// What one sequence's scan found in one tensor: how many rows hold a
// non-finite element, and the first of them.
struct NonFinite {
  std::int64_t rows = 0;
  std::int64_t token = -1, head = -1, dim = -1;
  double value = 0;
  void add(std::int64_t t, std::int64_t h, std::int64_t d, double v) {
    if (rows++ == 0) token = t, head = h, dim = d, value = v;
  }
};

// Runs body(s) for s in [0, count) on up to all cores.
template <class Body>
void for_each_parallel(std::int64_t count, const Body& body) {
  const std::int64_t workers =
      std::clamp<std::int64_t>(static_cast<std::int64_t>(std::thread::hardware_concurrency()), 1, std::max<std::int64_t>(count, 1));
  std::atomic<std::int64_t> next{0};
  auto work = [&] {
    for (std::int64_t s = next++; s < count; s = next++) body(s);
  };
  run_on_threads(workers, work);
}

void check_values(const Case& c, Findings& warnings) {
  const std::int64_t num_seqs = c.num_seqs(), q_heads = c.q_heads(), dk = c.head_dim();
  const PagedKvView kv = c.host_view();
  const auto key_bytes = static_cast<const std::byte*>(kv.key_data);
  const auto value_bytes = static_cast<const std::byte*>(kv.value_data);
  std::vector<NonFinite> query(num_seqs), key(num_seqs), value(num_seqs);
  for_each_parallel(num_seqs, [&](std::int64_t s) {
    for (std::int64_t t = c.query_start_loc[s]; t < c.query_start_loc[s + 1]; ++t)
      for (std::int64_t h = 0; h < q_heads; ++h) {
        const std::int64_t offset = (t * q_heads + h) * dk;
        if (const auto d = first_nonfinite(c.query.dtype, c.query.data, offset, dk); d >= 0)
          query[s].add(t - c.query_start_loc[s], h, d, c.query.at(static_cast<std::size_t>(offset + d)));
      }
    // Caches made on demand (a generated case's cache_source) hold finite
    // values in every referenced slot by construction: not scanned.
    if (!c.caches_held()) return;
    for (std::int64_t j = 0; j < kv.seq_len(s); ++j)
      for (std::int64_t h = 0; h < kv.kv_heads; ++h) {
        const std::int64_t k_offset = kv.key_offset(s, j, h), v_offset = kv.value_offset(s, j, h);
        if (const auto d = first_nonfinite(c.key_cache.dtype, key_bytes, k_offset, kv.head_dim); d >= 0)
          key[s].add(j, h, d, load_element(c.key_cache.dtype, key_bytes, static_cast<std::size_t>(k_offset + d)));
        if (const auto d = first_nonfinite(c.value_cache.dtype, value_bytes, v_offset, kv.v_head_dim); d >= 0)
          value[s].add(j, h, d, load_element(c.value_cache.dtype, value_bytes, static_cast<std::size_t>(v_offset + d)));
      }
  });
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    if (query[s].rows > 0)
      warnings.add("non-finite query", [&] {
        const NonFinite& q = query[s];
        return fmt::format("query of sequence {} holds NaN/Inf in {} (token, head) row{}; first at token {}, head {}, "
                           "dim {}: {}; the outputs of those rows are meaningless",
                           s, q.rows, q.rows == 1 ? "" : "s", q.token, q.head, q.dim, q.value);
      });
    // Plain variables, not structured bindings: clang 14 cannot capture those
    // in the lambda.
    for (const auto& item : {std::pair{&key[s], "key_cache"}, {&value[s], "value_cache"}}) {
      const NonFinite* found = item.first;
      const char* name = item.second;
      if (found->rows == 0) continue;
      warnings.add(name == std::string_view("key_cache") ? "non-finite key" : "non-finite value", [&] {
        const std::int64_t page = kv.page(s, found->token);
        return fmt::format("{} holds NaN/Inf in {} slot row{} that sequence {} reads; first at token {} (page {}, "
                           "slot {}), kv head {}, dim {}: {}",
                           name, found->rows, found->rows == 1 ? "" : "s", s, found->token, page,
                           found->token % kv.block_size, found->head, found->dim, found->value);
      });
    }
  }
}

}  // namespace

ValidationReport validate_case(const Case& c, ValueScan values) {
  ValidationReport report;
  Findings errors(report.errors);
  Findings warnings(report.warnings);
  if (check_structure(c, errors, values == ValueScan::Skip || !c.caches_held())) {
    check_geometry_and_params(c, errors);
    if (c.num_seqs() >= 1) check_sequences(c, errors, warnings);
    if (errors.total() == 0) check_memory(c, errors);
    if (errors.total() == 0 && values == ValueScan::Scan) check_values(c, warnings);
  }
  errors.finish();
  warnings.finish();
  return report;
}

Status validation_status(const ValidationReport& report, std::string where) {
  if (report.ok()) return {};
  std::string message = report.errors.size() == 1 ? "invalid case: " : "invalid case:";
  if (report.errors.size() == 1) {
    message += report.errors.front();
  } else {
    for (const auto& e : report.errors) message += "\n  " + e;
  }
  return invalid_input(std::move(message), std::move(where));
}

}  // namespace pagecheck
