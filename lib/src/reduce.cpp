#include "pagecheck/reduce.hpp"

#include <cstring>
#include <map>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace pagecheck {

Tensor select_elements(const Tensor& t, const std::vector<std::vector<std::int64_t>>& indices) {
  const std::size_t rank = t.shape.size();
  const std::size_t element = dtype_size(t.dtype);
  std::vector<std::vector<std::int64_t>> keep(rank);
  std::size_t last_selected = 0;
  bool any_selected = false;
  for (std::size_t a = 0; a < rank; ++a) {
    if (a < indices.size() && !indices[a].empty()) {
      for (auto i : indices[a])
        if (i < 0 || i >= t.shape[a])
          throw std::out_of_range(fmt::format("select_elements: index {} outside axis {} of {}", i, a, t.describe()));
      keep[a] = indices[a];
      last_selected = a;
      any_selected = true;
    } else {
      keep[a].resize(static_cast<std::size_t>(t.shape[a]));
      std::iota(keep[a].begin(), keep[a].end(), std::int64_t{0});
    }
  }
  if (!any_selected) return t;
  // Element strides; the axes after the last selected one are one contiguous run.
  std::vector<std::int64_t> stride(rank, 1);
  for (std::size_t a = rank; a-- > 1;) stride[a - 1] = stride[a] * t.shape[a];
  const std::size_t run = static_cast<std::size_t>(stride[last_selected]) * element;
  std::vector<std::int64_t> shape(rank);
  std::size_t total = 1;
  for (std::size_t a = 0; a < rank; ++a) {
    shape[a] = static_cast<std::int64_t>(keep[a].size());
    total *= keep[a].size();
  }
  std::vector<std::byte> bytes(total * element);
  if (total == 0) return Tensor::from_vector<std::byte>(t.dtype, std::move(shape), std::move(bytes));
  std::vector<std::size_t> at(last_selected + 1, 0);  // odometer over axes 0..last_selected
  std::size_t written = 0;
  while (true) {
    std::int64_t offset = 0;
    for (std::size_t a = 0; a <= last_selected; ++a) offset += keep[a][at[a]] * stride[a];
    std::memcpy(bytes.data() + written, t.data + static_cast<std::size_t>(offset) * element, run);
    written += run;
    std::size_t a = last_selected + 1;
    while (a-- > 0) {
      if (++at[a] < keep[a].size()) break;
      at[a] = 0;
    }
    if (a == static_cast<std::size_t>(-1)) break;
  }
  return Tensor::from_vector<std::byte>(t.dtype, std::move(shape), std::move(bytes));
}

namespace {

std::int64_t pages_needed(const Case& c, std::int64_t seq) {
  return (static_cast<std::int64_t>(c.seq_lens[seq]) + c.block_size() - 1) / c.block_size();
}

// Rebuilds query_start_loc from per-sequence query lengths.
std::vector<std::int32_t> starts_of(const std::vector<std::int64_t>& q_lens) {
  std::vector<std::int32_t> starts{0};
  for (auto q : q_lens) starts.push_back(static_cast<std::int32_t>(starts.back() + q));
  return starts;
}

// A decode case written without query_start_loc stays so only while every
// sequence has one token.
void settle_query_start_loc(Case& c, bool was_given) {
  bool identity = true;
  for (std::size_t s = 0; s < c.query_start_loc.size(); ++s)
    identity = identity && c.query_start_loc[s] == static_cast<std::int32_t>(s);
  c.query_start_loc_given = was_given || !identity;
}

}  // namespace

Case keep_sequences(const Case& c, const std::vector<std::int64_t>& seqs) {
  Case out = c;
  std::vector<std::int64_t> tokens, q_lens;
  out.seq_lens.clear();
  out.table.page_indices.clear();
  out.table.page_indptr = {0};
  for (auto s : seqs) {
    if (s < 0 || s >= c.num_seqs()) throw std::out_of_range(fmt::format("keep_sequences: no sequence {}", s));
    for (std::int64_t t = c.query_start_loc[s]; t < c.query_start_loc[s + 1]; ++t) tokens.push_back(t);
    q_lens.push_back(c.q_len(s));
    out.seq_lens.push_back(c.seq_lens[s]);
    for (auto e = c.table.page_indptr[s]; e < c.table.page_indptr[s + 1]; ++e)
      out.table.page_indices.push_back(c.table.page_indices[static_cast<std::size_t>(e)]);
    out.table.page_indptr.push_back(static_cast<std::int64_t>(out.table.page_indices.size()));
  }
  out.query_start_loc = starts_of(q_lens);
  settle_query_start_loc(out, c.query_start_loc_given);
  out.query = select_elements(c.query, {tokens});
  if (c.recorded_output) out.recorded_output = select_elements(*c.recorded_output, {tokens});
  if (c.recorded_lse) out.recorded_lse = select_elements(*c.recorded_lse, {tokens});
  return out;
}

Case keep_heads(const Case& c, const std::vector<std::int64_t>& kv_heads,
                const std::vector<std::int64_t>& group_members) {
  const std::int64_t group = c.q_heads() / c.kv_heads();
  std::vector<std::int64_t> q_heads;
  for (auto kv : kv_heads) {
    if (kv < 0 || kv >= c.kv_heads()) throw std::out_of_range(fmt::format("keep_heads: no KV head {}", kv));
    for (auto m : group_members) {
      if (m < 0 || m >= group) throw std::out_of_range(fmt::format("keep_heads: no group member {}", m));
      q_heads.push_back(kv * group + m);
    }
  }
  Case out = c;
  out.query = select_elements(c.query, {{}, q_heads});
  const std::size_t head_axis = c.params.layout == KvLayout::NHD ? 2 : 1;
  std::vector<std::vector<std::int64_t>> cache_index(head_axis + 1);
  cache_index[head_axis] = kv_heads;
  out.key_cache = select_elements(c.key_cache, cache_index);
  out.value_cache = c.has_latent() ? out.key_cache : select_elements(c.value_cache, cache_index);
  if (c.recorded_output) out.recorded_output = select_elements(*c.recorded_output, {{}, q_heads});
  if (c.recorded_lse) out.recorded_lse = select_elements(*c.recorded_lse, {{}, q_heads});
  const auto per_head = [&](const std::vector<float>& values) {
    std::vector<float> kept;
    if (!values.empty())
      for (auto h : q_heads) kept.push_back(values.at(static_cast<std::size_t>(h)));
    return kept;
  };
  out.sinks = per_head(c.sinks);
  out.alibi_slopes = per_head(c.alibi_slopes);
  return out;
}

bool cut_keeps_answers(const Case& c, std::int64_t seq, const SequenceCut& cut) {
  const std::int64_t old_len = c.seq_lens[seq], old_q = c.q_len(seq);
  // ALiBi's bias depends on the positions too (key minus query position).
  const bool position_matters = c.params.causal || c.params.sliding_window > 0 || c.has_alibi();
  if (position_matters && cut.seq_len - cut.q_len != old_len - old_q + cut.first_token) return false;
  if (!c.params.causal && cut.seq_len != old_len) return false;
  return true;
}

Case cut_sequence(const Case& c, std::int64_t seq, const SequenceCut& cut) {
  if (seq < 0 || seq >= c.num_seqs()) throw std::out_of_range(fmt::format("cut_sequence: no sequence {}", seq));
  if (cut.q_len < 1 || cut.q_len > cut.seq_len || cut.seq_len > c.seq_lens[seq] || cut.first_token < 0 ||
      cut.first_token + cut.q_len > c.q_len(seq))
    throw std::out_of_range(fmt::format("cut_sequence: cut (seq_len {}, tokens {}+{}) does not fit sequence {} "
                                        "(seq_len {}, q_len {})",
                                        cut.seq_len, cut.first_token, cut.q_len, seq, c.seq_lens[seq], c.q_len(seq)));
  const bool keeps_answers = cut_keeps_answers(c, seq, cut);
  Case out = c;
  std::vector<std::int64_t> tokens, q_lens;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    const std::int64_t begin = c.query_start_loc[s] + (s == seq ? cut.first_token : 0);
    const std::int64_t count = s == seq ? cut.q_len : c.q_len(s);
    for (std::int64_t t = begin; t < begin + count; ++t) tokens.push_back(t);
    q_lens.push_back(count);
  }
  out.seq_lens[static_cast<std::size_t>(seq)] = static_cast<std::int32_t>(cut.seq_len);
  if (c.table.form == TableForm::Csr) {
    // CSR derives the length from its pages: exactly the needed ones stay.
    const std::int64_t keep = (cut.seq_len + c.block_size() - 1) / c.block_size();
    const std::int64_t drop = (c.table.page_indptr[seq + 1] - c.table.page_indptr[seq]) - keep;
    out.table.page_indices.erase(out.table.page_indices.begin() + c.table.page_indptr[seq] + keep,
                                 out.table.page_indices.begin() + c.table.page_indptr[seq + 1]);
    for (std::int64_t s = seq + 1; s <= c.num_seqs(); ++s) out.table.page_indptr[static_cast<std::size_t>(s)] -= drop;
  }
  out.query_start_loc = starts_of(q_lens);
  settle_query_start_loc(out, c.query_start_loc_given);
  out.query = select_elements(c.query, {tokens});
  out.recorded_output.reset();
  out.recorded_lse.reset();
  if (keeps_answers) {
    if (c.recorded_output) out.recorded_output = select_elements(*c.recorded_output, {tokens});
    if (c.recorded_lse) out.recorded_lse = select_elements(*c.recorded_lse, {tokens});
  }
  return out;
}

std::int64_t referenced_pages(const Case& c) {
  std::map<std::int32_t, bool> seen;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s)
    for (std::int64_t j = 0; j < pages_needed(c, s); ++j)
      seen[c.table.page_indices[static_cast<std::size_t>(c.table.page_indptr[s] + j)]] = true;
  return static_cast<std::int64_t>(seen.size());
}

Case compact_pages(const Case& c) {
  std::map<std::int32_t, std::int32_t> renumbered;  // old page -> new page
  std::vector<std::int64_t> kept;                   // old pages in new order
  std::int64_t widest = 1;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    widest = std::max(widest, pages_needed(c, s));
    for (std::int64_t j = 0; j < pages_needed(c, s); ++j) {
      const std::int32_t page = c.table.page_indices[static_cast<std::size_t>(c.table.page_indptr[s] + j)];
      if (renumbered.emplace(page, static_cast<std::int32_t>(kept.size())).second) kept.push_back(page);
    }
  }
  Case out = c;
  out.key_cache = select_elements(c.key_cache, {kept});
  out.value_cache = c.has_latent() ? out.key_cache : select_elements(c.value_cache, {kept});
  out.table.page_indices.clear();
  out.table.page_indptr = {0};
  if (c.table.form == TableForm::Dense) out.table.max_blocks_per_seq = widest;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    const std::int64_t needed = pages_needed(c, s);
    for (std::int64_t j = 0; j < needed; ++j)
      out.table.page_indices.push_back(
          renumbered.at(c.table.page_indices[static_cast<std::size_t>(c.table.page_indptr[s] + j)]));
    if (c.table.form == TableForm::Dense)
      for (std::int64_t j = needed; j < widest; ++j) out.table.page_indices.push_back(0);
    out.table.page_indptr.push_back(static_cast<std::int64_t>(out.table.page_indices.size()));
  }
  return out;
}

}  // namespace pagecheck

namespace pagecheck {

namespace {

// `t` with every element converted to `dtype` (rounded to nearest).
Tensor converted(const Tensor& t, DType dtype) {
  Tensor out = Tensor::zeros(dtype, t.shape);
  const auto n = static_cast<std::size_t>(t.numel());
  for (std::size_t i = 0; i < n; ++i) store_element(dtype, out.mutable_data(), i, t.at(i));
  return out;
}

// An HND cache [blocks, heads, block, dim] as NHD [blocks, block, heads, dim].
Tensor hnd_to_nhd(const Tensor& t) {
  const std::int64_t blocks = t.dim(0), heads = t.dim(1), slots = t.dim(2), dim = t.dim(3);
  Tensor out = Tensor::zeros(t.dtype, {blocks, slots, heads, dim});
  const std::size_t row = static_cast<std::size_t>(dim) * dtype_size(t.dtype);
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t s = 0; s < slots; ++s)
        std::memcpy(out.mutable_data() + static_cast<std::size_t>((b * slots + s) * heads + h) * row,
                    t.data + static_cast<std::size_t>((b * heads + h) * slots + s) * row, row);
  return out;
}

bool small_caches(const Case& c) {
  return c.key_cache.numel() <= kSimplifyMaxElements && c.value_cache.numel() <= kSimplifyMaxElements;
}

void drop_recorded(Case& c) {
  c.recorded_output.reset();
  c.recorded_lse.reset();
}

}  // namespace

std::string describe_simplification(const Case& c, Simplification s) {
  switch (s) {
    case Simplification::Softcap: return "softcap off";
    case Simplification::Window: return "sliding window off";
    case Simplification::Sinks: return "sinks dropped";
    case Simplification::Alibi: return "ALiBi dropped";
    case Simplification::Causal: return "causal mask on";
    case Simplification::KvDtype: return fmt::format("KV cache {} -> BF16", dtype_name(c.key_cache.dtype));
    case Simplification::QueryDtype: return fmt::format("query {} -> BF16", dtype_name(c.query.dtype));
    case Simplification::Layout: return "layout HND -> NHD";
    case Simplification::Table: return "CSR table -> dense";
  }
  return "?";
}

std::optional<Case> simplify(const Case& c, Simplification s) {
  if (!c.caches_held()) return std::nullopt;
  Case out = c;
  switch (s) {
    case Simplification::Softcap:
      if (c.params.softcap == 0) return std::nullopt;
      out.params.softcap = 0;
      break;
    case Simplification::Window:
      if (c.params.sliding_window == 0) return std::nullopt;
      out.params.sliding_window = 0;
      break;
    case Simplification::Sinks:
      if (!c.has_sinks()) return std::nullopt;
      out.sinks.clear();
      break;
    case Simplification::Alibi:
      if (!c.has_alibi()) return std::nullopt;
      out.alibi_slopes.clear();
      break;
    case Simplification::Causal:
      if (c.params.causal) return std::nullopt;
      out.params.causal = true;
      break;
    case Simplification::KvDtype:
      if (c.key_cache.dtype == DType::BF16 || !small_caches(c)) return std::nullopt;
      out.key_cache = converted(c.key_cache, DType::BF16);
      if (!c.value_cache.empty()) out.value_cache = converted(c.value_cache, DType::BF16);
      break;
    case Simplification::QueryDtype:
      if (c.query.dtype == DType::BF16) return std::nullopt;
      out.query = converted(c.query, DType::BF16);
      break;
    case Simplification::Layout:
      if (c.params.layout != KvLayout::HND || c.has_latent() || !small_caches(c)) return std::nullopt;
      out.key_cache = hnd_to_nhd(c.key_cache);
      if (!c.value_cache.empty()) out.value_cache = hnd_to_nhd(c.value_cache);
      out.params.layout = KvLayout::NHD;
      break;
    case Simplification::Table: {
      if (c.table.form != TableForm::Csr) return std::nullopt;
      std::int64_t width = 0;
      for (std::int64_t q = 0; q < c.num_seqs(); ++q)
        width = std::max(width, c.table.page_indptr[q + 1] - c.table.page_indptr[q]);
      out.table = BlockTable{};
      out.table.form = TableForm::Dense;
      out.table.max_blocks_per_seq = width;
      out.table.page_indptr = {0};
      for (std::int64_t q = 0; q < c.num_seqs(); ++q) {
        const auto begin = c.table.page_indices.begin() + c.table.page_indptr[q];
        const auto end = c.table.page_indices.begin() + c.table.page_indptr[q + 1];
        out.table.page_indices.insert(out.table.page_indices.end(), begin, end);
        out.table.page_indices.resize(static_cast<std::size_t>((q + 1) * width), 0);
        out.table.page_indptr.push_back((q + 1) * width);
      }
      break;
    }
  }
  drop_recorded(out);
  return out;
}

}  // namespace pagecheck
