#include "pagecheck/reducer.hpp"

#include <algorithm>
#include <numeric>
#include <string_view>

#include <fmt/format.h>

namespace pagecheck {

std::string failure_kind(const PathReport& row) {
  if (row.status == PathStatus::Error) return "error";
  const std::string& r = row.reason;
  const auto starts = [&](std::string_view prefix) { return r.rfind(prefix, 0) == 0; };
  const auto with_nan = [](std::string kind, const std::optional<ErrorStats>& e) {
    return e && e->nonfinite > 0 ? kind + " NaN/Inf" : kind + " beyond tolerance";
  };
  if (starts("output:")) return with_nan("output", row.error);
  if (starts("LSE:")) return with_nan("LSE", row.lse_error);
  if (starts("differs from the recorded output")) return with_nan("recorded output", row.recorded);
  if (starts("differs from the recorded LSE")) return with_nan("recorded LSE", row.recorded_lse);
  if (starts("returned ")) return "output size";
  if (r.find("unwritten") != std::string::npos) return "unwritten";
  if (r.find("repeatable") != std::string::npos) return "repeatability";
  if (r.find("graph") != std::string::npos || r.find("changing the table") != std::string::npos ||
      r.find("changed lengths") != std::string::npos)
    return "graph replay";
  if (r.find("batch-invariant") != std::string::npos) return "batch invariance";
  return "check: " + r.substr(0, r.find(':'));
}

namespace {

std::vector<std::int64_t> all(std::int64_t count) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(count));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return v;
}

}  // namespace

Reducer::Reducer(bool sound_only, int max_tests, ReduceRun run, ReduceProgress progress)
    : sound_only_(sound_only), max_tests_(max_tests), run_(std::move(run)), progress_(std::move(progress)) {}

std::optional<PathReport> Reducer::start(const Case& c) {
  ++tests_;
  auto row = run_(c);
  if (row && (row->status == PathStatus::Fail || row->status == PathStatus::Error)) {
    status_ = row->status;
    kind_ = failure_kind(*row);
  }
  return row;
}

Case Reducer::reduce(Case c) {
  cut_rounds(c);
  if (simplify_features(c)) cut_rounds(c);
  return c;
}

void Reducer::cut_rounds(Case& c) {
  for (bool changed = true; changed && !out_of_budget();) {
    changed = false;
    changed |= drop_sequences(c);
    changed |= drop_heads(c);
    for (std::int64_t s = 0; s < c.num_seqs() && !out_of_budget(); ++s) changed |= shorten_sequence(c, s);
    changed |= compact(c);
  }
}

// Each simplification once, on the case the cuts left (small: each test is
// cheap); a kept one stays.
bool Reducer::simplify_features(Case& c) {
  if (sound_only_) return false;
  bool changed = false;
  for (const Simplification s : kSimplifications) {
    if (out_of_budget()) break;
    auto candidate = simplify(c, s);
    if (!candidate) continue;
    const std::string what = describe_simplification(c, s);
    if (!fails_same_way(*candidate)) continue;
    c = std::move(*candidate);
    simplified_.push_back(what);
    accepted(c, what);
    changed = true;
  }
  return changed;
}

bool Reducer::fails_same_way(const Case& candidate) {
  if (out_of_budget()) return false;
  ++tests_;
  const auto row = run_(candidate);
  return row && row->status == status_ && failure_kind(*row) == kind_;
}

void Reducer::accepted(const Case& c, const std::string& what) {
  if (progress_) progress_(c, tests_, what);
}

// Zeller's ddmin over `items`: a subset that still fails, from which no
// chunk at the finest granularity tried can be removed.
std::vector<std::int64_t> Reducer::ddmin(std::vector<std::int64_t> items,
                                         const std::function<bool(const std::vector<std::int64_t>&)>& fails) {
  std::size_t n = 2;
  while (items.size() >= 2 && !out_of_budget()) {
    const std::size_t chunk = (items.size() + n - 1) / n;
    std::vector<std::vector<std::int64_t>> parts;
    for (std::size_t i = 0; i < items.size(); i += chunk)
      parts.emplace_back(items.begin() + static_cast<std::ptrdiff_t>(i),
                         items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + chunk)));
    bool reduced = false;
    for (const auto& part : parts) {
      if (fails(part)) {
        items = part;
        n = 2;
        reduced = true;
        break;
      }
    }
    if (!reduced && parts.size() > 2) {
      for (std::size_t p = 0; p < parts.size() && !reduced; ++p) {
        std::vector<std::int64_t> rest;
        for (std::size_t q = 0; q < parts.size(); ++q)
          if (q != p) rest.insert(rest.end(), parts[q].begin(), parts[q].end());
        if (fails(rest)) {
          items = rest;
          n = std::max<std::size_t>(parts.size() - 1, 2);
          reduced = true;
        }
      }
    }
    if (reduced) continue;
    if (n >= items.size()) break;
    n = std::min(items.size(), n * 2);
  }
  return items;
}

bool Reducer::drop_sequences(Case& c) {
  if (c.num_seqs() < 2) return false;
  // ddmin's subsets index the case as it was when it started.
  const Case base = c;
  ddmin(all(base.num_seqs()), [&](const std::vector<std::int64_t>& seqs) {
    Case candidate = keep_sequences(base, seqs);
    if (!fails_same_way(candidate)) return false;
    const std::int64_t was = c.num_seqs();
    c = std::move(candidate);
    accepted(c, fmt::format("sequences {} -> {}", was, c.num_seqs()));
    return true;
  });
  return c.num_seqs() < base.num_seqs();
}

// KV heads with all their query heads, then the query heads of each group.
bool Reducer::drop_heads(Case& c) {
  bool changed = false;
  if (c.kv_heads() >= 2) {
    const std::int64_t group = c.q_heads() / c.kv_heads();
    const Case base = c;
    ddmin(all(base.kv_heads()), [&](const std::vector<std::int64_t>& kv) {
      Case candidate = keep_heads(base, kv, all(group));
      if (!fails_same_way(candidate)) return false;
      const std::int64_t was = c.kv_heads();
      c = std::move(candidate);
      accepted(c, fmt::format("KV heads {} -> {}", was, c.kv_heads()));
      changed = true;
      return true;
    });
  }
  if (c.q_heads() / c.kv_heads() >= 2) {
    const std::int64_t group = c.q_heads() / c.kv_heads();
    const Case base = c;
    ddmin(all(group), [&](const std::vector<std::int64_t>& members) {
      Case candidate = keep_heads(base, all(base.kv_heads()), members);
      if (!fails_same_way(candidate)) return false;
      const std::int64_t was = c.q_heads();
      c = std::move(candidate);
      accepted(c, fmt::format("query heads {} -> {} (GQA group {} -> {})", was, c.q_heads(), was / c.kv_heads(),
                              c.q_heads() / c.kv_heads()));
      changed = true;
      return true;
    });
  }
  return changed;
}

// Lowers `value` towards `minimum` while `fails(candidate)` holds: try the
// largest step, halve it on a miss.
bool Reducer::shrink(std::int64_t value, std::int64_t minimum, const std::function<bool(std::int64_t)>& fails) {
  bool changed = false;
  for (std::int64_t step = value - minimum; step > 0 && !out_of_budget();) {
    if (fails(value - step)) {
      value -= step;
      changed = true;
      step = std::min(step, value - minimum);
    } else {
      step /= 2;
    }
  }
  return changed;
}

bool Reducer::try_cut(Case& c, std::int64_t s, const SequenceCut& cut, const std::string& what) {
  if (sound_only_ && !cut_keeps_answers(c, s, cut)) return false;
  Case candidate = cut_sequence(c, s, cut);
  if (!fails_same_way(candidate)) return false;
  c = std::move(candidate);
  accepted(c, fmt::format("sequence {}: {}", s, what));
  return true;
}

// Drops query tokens from the end (the context ends after the last kept
// token when the mask is causal, so the kept tokens keep their positions),
// then from the front; then, on a path whose reference is recomputed,
// shortens the context under the kept tokens.
bool Reducer::shorten_sequence(Case& c, std::int64_t s) {
  bool changed = false;
  changed |= shrink(c.q_len(s), 1, [&](std::int64_t q) {
    const std::int64_t len = c.params.causal ? c.seq_lens[s] - c.q_len(s) + q : c.seq_lens[s];
    return try_cut(c, s, {len, 0, q}, fmt::format("last query tokens dropped: q_len {}, seq_len {}", q, len));
  });
  changed |= shrink(c.q_len(s), 1, [&](std::int64_t q) {
    return try_cut(c, s, {c.seq_lens[s], c.q_len(s) - q, q}, fmt::format("first query tokens dropped: q_len {}", q));
  });
  if (!sound_only_)
    changed |= shrink(c.seq_lens[s], c.q_len(s), [&](std::int64_t len) {
      return try_cut(c, s, {len, 0, c.q_len(s)}, fmt::format("context shortened: seq_len {}", len));
    });
  return changed;
}

bool Reducer::compact(Case& c) {
  Case candidate = compact_pages(c);
  const bool same = candidate.num_blocks() == c.num_blocks() && candidate.table.page_indices == c.table.page_indices &&
                    candidate.table.max_blocks_per_seq == c.table.max_blocks_per_seq;
  if (same || !fails_same_way(candidate)) return false;
  const std::int64_t was = c.num_blocks();
  c = std::move(candidate);
  accepted(c, fmt::format("pool {} -> {} pages (only the referenced ones, renumbered)", was, c.num_blocks()));
  return true;
}

std::optional<ReducedFailure> reduce_failure(const Case& c, int max_tests, const ReduceRun& run) {
  Reducer reducer(false, max_tests, run);
  const auto first = reducer.start(c);
  if (!first || (first->status != PathStatus::Fail && first->status != PathStatus::Error)) return std::nullopt;
  ReducedFailure out{reducer.reduce(c), reducer.kind(), *first, 0, {}};
  out.tests = reducer.tests();
  out.simplified = reducer.simplified();
  return out;
}

}  // namespace pagecheck
