// Batch invariance: a case's sequences re-batched, and the bitwise comparison.
#include "pagecheck/batch_invariance.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "pagecheck/reduce.hpp"

namespace pagecheck {

std::string BatchDifference::describe() const {
  const std::string where = dim >= 0 ? fmt::format("seq {} token {} head {} dim {}", seq, token, head, dim)
                                     : fmt::format("seq {} token {} head {} (LSE)", seq, token, head);
  return fmt::format("{} ({}): {:.9g} in the full batch, {:.9g}", where, variant, full, other);
}

std::vector<BatchVariant> batch_variants(const Case& c) {
  std::vector<BatchVariant> out;
  const std::int64_t n = c.num_seqs();
  if (n >= 2) {
    // Each sequence alone; past kInvarianceMaxAlone sequences, the first, the
    // last, the longest and the shortest (a path runs once per variant).
    std::vector<std::int64_t> alone;
    if (n <= kInvarianceMaxAlone) {
      for (std::int64_t s = 0; s < n; ++s) alone.push_back(s);
    } else {
      const auto longest = std::max_element(c.seq_lens.begin(), c.seq_lens.end()) - c.seq_lens.begin();
      const auto shortest = std::min_element(c.seq_lens.begin(), c.seq_lens.end()) - c.seq_lens.begin();
      alone = {0, n - 1, longest, shortest};
      std::sort(alone.begin(), alone.end());
      alone.erase(std::unique(alone.begin(), alone.end()), alone.end());
    }
    for (const std::int64_t s : alone) out.push_back({fmt::format("alone {}", s), {s}});
  }
  const std::int64_t padded = std::clamp<std::int64_t>(
      (kInvariancePaddedCtas + c.kv_heads() - 1) / std::max<std::int64_t>(1, c.kv_heads()), n + 1,
      std::max(n + 1, kInvarianceMaxPadded));
  BatchVariant permuted;
  permuted.name = fmt::format("permuted and padded to {}", padded);
  // Reverse order, a filler before each sequence, the rest fillers after.
  for (std::int64_t s = n; s-- > 0;) {
    if (static_cast<std::int64_t>(permuted.source.size()) + s + 1 < padded) permuted.source.push_back(-1);
    permuted.source.push_back(s);
  }
  while (static_cast<std::int64_t>(permuted.source.size()) < padded) permuted.source.push_back(-1);
  out.push_back(std::move(permuted));
  return out;
}

Case batch_case(const Case& c, const BatchVariant& variant) {
  Case out = c;
  out.recorded_output.reset();
  out.recorded_lse.reset();
  out.seq_lens.clear();
  out.table.page_indices.clear();
  out.table.page_indptr = {0};
  std::vector<std::int64_t> tokens;
  std::vector<std::int32_t> starts{0};
  for (const std::int64_t s : variant.source) {
    const std::int64_t from = s < 0 ? 0 : s;
    const auto row_begin = c.table.page_indices.begin() + c.table.page_indptr[from];
    if (s < 0) {
      // One key (the first of sequence 0), one query token.
      out.seq_lens.push_back(1);
      tokens.push_back(c.query_start_loc[0]);
      if (c.table.form == TableForm::Dense) {
        out.table.page_indices.insert(out.table.page_indices.end(), row_begin,
                                      row_begin + c.table.max_blocks_per_seq);
      } else {
        out.table.page_indices.push_back(*row_begin);
      }
    } else {
      out.seq_lens.push_back(c.seq_lens[s]);
      for (std::int64_t t = c.query_start_loc[s]; t < c.query_start_loc[s + 1]; ++t) tokens.push_back(t);
      out.table.page_indices.insert(out.table.page_indices.end(), row_begin,
                                    c.table.page_indices.begin() + c.table.page_indptr[s + 1]);
    }
    out.table.page_indptr.push_back(static_cast<std::int64_t>(out.table.page_indices.size()));
    starts.push_back(static_cast<std::int32_t>(tokens.size()));
  }
  out.query_start_loc = std::move(starts);
  bool identity = true;
  for (std::size_t i = 0; i < out.query_start_loc.size(); ++i)
    identity = identity && out.query_start_loc[i] == static_cast<std::int32_t>(i);
  out.query_start_loc_given = c.query_start_loc_given || !identity;
  out.query = select_elements(c.query, {tokens});
  return out;
}

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

}  // namespace

std::optional<BatchDifference> first_batch_difference(const Case& c, const BatchOutput& full, const BatchVariant& variant,
                                                      const BatchOutput& result) {
  const std::int64_t heads = c.q_heads(), width = c.v_head_dim();
  std::int64_t variant_token = 0;  // first token of the variant's sequence i
  for (std::size_t i = 0; i < variant.source.size(); ++i) {
    const std::int64_t s = variant.source[i];
    if (s < 0) {
      variant_token += 1;
      continue;
    }
    for (std::int64_t t = 0; t < c.q_len(s); ++t) {
      const std::int64_t full_row = c.query_start_loc[s] + t, row = variant_token + t;
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t k = 0; k < width; ++k) {
          const auto a = static_cast<std::size_t>((full_row * heads + h) * width + k);
          const auto b = static_cast<std::size_t>((row * heads + h) * width + k);
          const float x = full.output.at(a), y = result.output.at(b);
          if (!same_bits(x, y)) return BatchDifference{variant.name, s, t, h, k, x, y};
        }
        if (!full.lse.empty() && !result.lse.empty()) {
          const float x = full.lse.at(static_cast<std::size_t>(full_row * heads + h));
          const float y = result.lse.at(static_cast<std::size_t>(row * heads + h));
          if (!same_bits(x, y)) return BatchDifference{variant.name, s, t, h, -1, x, y};
        }
      }
    }
    variant_token += c.q_len(s);
  }
  return std::nullopt;
}

Expected<BatchInvariance> check_batch_invariance(const Case& c, const BatchOutput& full, const BatchRun& run) {
  BatchInvariance out;
  for (const BatchVariant& variant : batch_variants(c)) {
    const Case batch = batch_case(c, variant);
    std::string why;
    auto result = run(batch, why);
    if (!result.ok()) return result.error();
    if (!*result) {
      out.variants_skipped.push_back(fmt::format("{}: {}", variant.name, why));
      continue;
    }
    ++out.variants_run;
    const std::size_t tokens = static_cast<std::size_t>(batch.num_tokens());
    const std::size_t expected = tokens * static_cast<std::size_t>(c.q_heads() * c.v_head_dim());
    if ((*result)->output.size() != expected)
      return runtime_error(fmt::format("batch invariance: the path returned {} output elements for {} ({} expected)",
                                       (*result)->output.size(), variant.name, expected));
    if (auto difference = first_batch_difference(c, full, variant, **result)) {
      out.invariant = false;
      out.first = std::move(difference);
      return out;
    }
  }
  return out;
}

}  // namespace pagecheck
