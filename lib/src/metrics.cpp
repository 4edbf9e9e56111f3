// Error of a path's output against the reference. docs/tolerances.md explains
// the default tolerances.
#include "pagecheck/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

namespace pagecheck {
namespace {

// Tolerance::row_floor of an output dtype (metrics.hpp says why): F16's
// smallest normal value; for F32 and BF16, which share an exponent range,
// 2^24 times FLT_MIN.
double row_floor_for(DType dtype) { return dtype == DType::F16 ? 6.103515625e-05 : 0x1p-102; }

// The tolerance one precision needs on the attention output.
Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::F64:
    case DType::F32: return {1e-5, 1e-4};
    case DType::F16: return {1e-3, 2e-3};
    case DType::BF16: return {1e-2, 1e-2};
    case DType::F8_E4M3:
    case DType::F8_E5M2: return {2e-2, 2e-2};
    default: return {1e-2, 1e-2};
  }
}

// Maps a flat element index of [num_tokens, q_heads, width] to (seq, token
// within the sequence, head, dim).
ElementLocation locate(const Case& c, std::int64_t index, std::int64_t width) {
  ElementLocation where;
  const std::int64_t q_heads = c.query.rank() >= 2 ? std::max<std::int64_t>(c.q_heads(), 1) : 1;
  width = std::max<std::int64_t>(width, 1);
  where.dim = index % width;
  const std::int64_t row = index / width;
  where.head = row % q_heads;
  const std::int64_t token = row / q_heads;
  const auto& starts = c.query_start_loc;
  // The sequence whose [start, next start) holds the token.
  const auto after = std::upper_bound(starts.begin(), starts.end(), token);
  if (after == starts.begin() || after == starts.end()) {
    where.token = token;  // no usable query_start_loc: the global token index
    return where;
  }
  where.seq = (after - starts.begin()) - 1;
  where.token = token - starts[where.seq];
  return where;
}

// Fills an ErrorMap during compare(), one row (one token and head) at a
// time: the row's largest ratio and flags are folded into its cells when the
// next row starts, so the per-element cost is a division and a compare.
class ErrorMapBuilder {
 public:
  ErrorMapBuilder(const Case& c, std::size_t elements, std::int64_t width)
      : starts_(c.query_start_loc),
        q_heads_(c.query.rank() >= 2 ? std::max<std::int64_t>(c.q_heads(), 1) : 1),
        width_(std::max<std::int64_t>(width, 1)) {
    const auto rows = (static_cast<std::int64_t>(elements) + width_ - 1) / width_;
    const std::int64_t tokens = (rows + q_heads_ - 1) / q_heads_;
    num_seqs_ = starts_.size() >= 2 ? static_cast<std::int64_t>(starts_.size()) - 1 : 0;
    auto map = std::make_shared<ErrorMap>();
    if (num_seqs_ > 0) make_grid(map->by_seq_head, ErrorAxis::binned(num_seqs_), ErrorAxis::binned(q_heads_));
    make_grid(map->by_token, ErrorAxis::binned(1), ErrorAxis::binned(tokens));
    map_ = std::move(map);
  }

  void start_row(std::size_t element) {
    flush();
    const auto row = static_cast<std::int64_t>(element) / width_;
    head_ = row % q_heads_;
    token_ = row / q_heads_;
    // The sequence whose [start, next start) holds the token, as locate().
    while (seq_ + 1 < num_seqs_ && starts_[static_cast<std::size_t>(seq_ + 1)] <= token_) ++seq_;
    in_range_ = seq_ >= 0 && token_ >= starts_.front() && token_ < starts_.back();
  }
  void judged(double ratio, std::size_t element) {
    row_flags_ |= kCellJudged;
    if (ratio > row_ratio_) row_ratio_ = ratio;
    if (ratio > 0) consider(ratio, element);
  }
  void agreed() { row_flags_ |= kCellJudged; }
  void nonfinite(std::size_t element) {
    row_flags_ |= kCellNonFinite;
    consider(std::numeric_limits<double>::infinity(), element);
  }
  void unjudged() { row_flags_ |= kCellUnjudged; }

  std::shared_ptr<const ErrorMap> finish(const Case& c, std::span<const float> out, std::span<const double> ref) {
    flush();
    std::stable_sort(worst_.begin(), worst_.end(), [](const Candidate& a, const Candidate& b) { return a.ratio > b.ratio; });
    for (const Candidate& k : worst_) {
      WorstElement w;
      const ElementLocation where = locate(c, static_cast<std::int64_t>(k.element), width_);
      w.seq = where.seq, w.token = where.token, w.head = where.head, w.dim = where.dim;
      w.value = out[k.element];
      w.reference = ref[k.element];
      w.abs_err = std::fabs(w.value - w.reference);
      w.ratio = k.ratio;
      map_->worst.push_back(w);
    }
    return std::move(map_);
  }

 private:
  struct Candidate {
    double ratio;
    std::size_t element;
  };

  static void make_grid(ErrorGrid& grid, ErrorAxis rows, ErrorAxis cols) {
    grid.rows = rows;
    grid.cols = cols;
    const auto cells = static_cast<std::size_t>(rows.bins() * cols.bins());
    grid.ratio.assign(cells, 0.0f);
    grid.flags.assign(cells, 0);
  }
  static void fold(ErrorGrid& grid, std::int64_t row, std::int64_t col, double ratio, std::uint8_t flags) {
    const std::size_t i = grid.index(grid.rows.bin_of(row), grid.cols.bin_of(col));
    grid.ratio[i] = std::max(grid.ratio[i], static_cast<float>(ratio));
    grid.flags[i] |= flags;
  }
  void flush() {
    if (row_flags_ != 0) {
      if (in_range_ && !map_->by_seq_head.empty()) fold(map_->by_seq_head, seq_, head_, row_ratio_, row_flags_);
      fold(map_->by_token, 0, token_, row_ratio_, row_flags_);
    }
    row_ratio_ = 0;
    row_flags_ = 0;
  }
  // Keeps the kErrorMapWorst largest ratios; the earlier element wins a tie.
  void consider(double ratio, std::size_t element) {
    if (worst_.size() == kErrorMapWorst && !(ratio > floor_)) return;
    if (worst_.size() < kErrorMapWorst) {
      worst_.push_back({ratio, element});
    } else {
      auto smallest = std::min_element(worst_.begin(), worst_.end(), [](const Candidate& a, const Candidate& b) {
        return a.ratio < b.ratio || (a.ratio == b.ratio && a.element > b.element);
      });
      *smallest = {ratio, element};
    }
    if (worst_.size() == kErrorMapWorst)
      floor_ = std::min_element(worst_.begin(), worst_.end(),
                                [](const Candidate& a, const Candidate& b) { return a.ratio < b.ratio; })
                   ->ratio;
  }

  const std::vector<std::int32_t>& starts_;
  std::int64_t q_heads_, width_, num_seqs_ = 0;
  std::shared_ptr<ErrorMap> map_;
  std::int64_t seq_ = -1, token_ = 0, head_ = 0;
  bool in_range_ = false;
  double row_ratio_ = 0;
  std::uint8_t row_flags_ = 0;
  std::vector<Candidate> worst_;
  double floor_ = 0;
};

}  // namespace

std::string row_scaling_text(const Tolerance& t) {
  if (t.row_scale <= 0) return "";
  if (t.row_unit <= 0) return fmt::format(" (scaled down in rows of RMS < {:g})", t.row_scale);
  return fmt::format(" (scaled down in rows of RMS < {:g}, up in rows of RMS > {:g})", t.row_scale, t.row_unit);
}

Tolerance default_tolerance(DType query_dtype, DType kv_dtype) {
  const Tolerance q = tolerance_for(query_dtype), kv = tolerance_for(kv_dtype);
  Tolerance t;
  t.atol = std::max(q.atol, kv.atol);
  t.rtol = std::max(q.rtol, kv.rtol);
  t.row_scale = kToleranceRowScale;
  t.row_unit = kToleranceRowUnit;
  t.row_floor = row_floor_for(query_dtype);
  t.logit_eps = kToleranceLogitEps;
  return t;
}

Tolerance default_lse_tolerance(DType query_dtype, DType kv_dtype) {
  const Tolerance out = default_tolerance(query_dtype, kv_dtype);
  return {std::max(out.atol, 1e-4), std::max(out.rtol, 1e-5), 0.0};
}

ErrorStats compare(const Case& c, std::span<const float> out, std::span<const double> ref, std::int64_t width,
                   Tolerance tolerance, bool keep_map, std::span<const double> row_lse) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  ErrorStats stats;
  const std::size_t n = std::min(out.size(), ref.size());
  stats.elements = static_cast<std::int64_t>(std::max(out.size(), ref.size()));
  stats.mismatches = static_cast<std::int64_t>(std::max(out.size(), ref.size()) - n);

  double diff_sq = 0, ref_sq = 0;
  bool worst_is_nonfinite = false;
  bool worst_is_mismatch = false;
  double worst_abs = -1, worst_ratio = -1;
  std::int64_t worst_index = -1;
  const auto row_width = static_cast<std::size_t>(std::max<std::int64_t>(width, 1));
  double row_atol = tolerance.atol;
  std::optional<ErrorMapBuilder> map;
  if (keep_map) map.emplace(c, n, width);
  for (std::size_t i = 0; i < n; ++i) {
    if (map && i % row_width == 0) map->start_row(i);
    if (tolerance.row_scale > 0 && i % row_width == 0) {  // this row's atol, from the finite ref values
      double sum_sq = 0;
      const std::size_t row_end = std::min(n, i + row_width);
      for (std::size_t k = i; k < row_end; ++k)
        if (std::isfinite(ref[k])) sum_sq += ref[k] * ref[k];
      const double rms = std::sqrt(sum_sq / static_cast<double>(row_end - i));
      double row_factor = std::min(1.0, rms / tolerance.row_scale);
      if (tolerance.row_unit > 0 && rms > tolerance.row_unit) row_factor = rms / tolerance.row_unit;
      row_atol = std::max(tolerance.atol * row_factor, tolerance.row_floor);
      const std::size_t row = i / row_width;
      // Not under an atol of 0 (--atol 0: exactness asked for).
      if (tolerance.logit_eps > 0 && tolerance.atol > 0 && row < row_lse.size() && std::isfinite(row_lse[row]))
        row_atol += tolerance.logit_eps * std::fabs(row_lse[row]) * rms;
    }
    const double o = out[i], r = ref[i];
    if (std::isnan(r)) {  // the inputs of this element are not finite: nothing to judge
      ++stats.unjudged;
      if (map) map->unjudged();
      continue;
    }
    if (!std::isfinite(o) || !std::isfinite(r)) {
      if (o == r) {  // the same infinity: agreement (an LSE of -inf)
        if (map) map->agreed();
        continue;
      }
      if (map) map->nonfinite(i);
      ++stats.mismatches;
      if (!std::isfinite(o)) ++stats.nonfinite;
      if (!worst_is_nonfinite) {
        worst_is_nonfinite = true;
        worst_index = static_cast<std::int64_t>(i);
      }
      continue;
    }
    const double abs_err = std::fabs(o - r);
    stats.max_abs_err = std::max(stats.max_abs_err, abs_err);
    stats.max_rel_err = std::max(stats.max_rel_err, abs_err / std::max(std::fabs(r), kRelErrFloor));
    diff_sq += abs_err * abs_err;
    ref_sq += r * r;
    const double allowed = row_atol + tolerance.rtol * std::fabs(r);
    const bool mismatch = abs_err > allowed;
    const double ratio = allowed > 0 ? abs_err / allowed : (abs_err > 0 ? kInf : 0.0);
    if (mismatch) ++stats.mismatches;
    if (map) map->judged(ratio, i);
    if (!worst_is_nonfinite) {
      // A mismatch outranks every element within tolerance; among
      // mismatches the one furthest beyond it, among the rest the largest.
      const bool worse = mismatch ? (!worst_is_mismatch || ratio > worst_ratio)
                                  : (!worst_is_mismatch && abs_err > worst_abs);
      if (worse) {
        worst_is_mismatch = mismatch;
        worst_abs = abs_err;
        worst_ratio = ratio;
        worst_index = static_cast<std::int64_t>(i);
      }
    }
  }

  if (worst_is_nonfinite) {
    stats.max_abs_err = stats.max_rel_err = stats.rel_l2_err = kInf;
  } else if (ref_sq > 0) {
    stats.rel_l2_err = std::sqrt(diff_sq) / std::sqrt(ref_sq);
  } else {
    stats.rel_l2_err = diff_sq > 0 ? kInf : 0.0;  // a zero reference: exact or infinitely wrong
  }
  if (worst_index >= 0) {
    stats.worst = locate(c, worst_index, width);
    stats.worst_value = out[static_cast<std::size_t>(worst_index)];
    stats.worst_reference = ref[static_cast<std::size_t>(worst_index)];
  }
  if (map) stats.map = map->finish(c, out, ref);
  return stats;
}

}  // namespace pagecheck
