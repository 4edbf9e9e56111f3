// Error of a path's output against the reference. docs/tolerances.md explains
// the default tolerances.
#include "pagecheck/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pagecheck {
namespace {

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

}  // namespace

Tolerance default_tolerance(DType query_dtype, DType kv_dtype) {
  const Tolerance q = tolerance_for(query_dtype), kv = tolerance_for(kv_dtype);
  return {std::max(q.atol, kv.atol), std::max(q.rtol, kv.rtol), kToleranceRowScale};
}

Tolerance default_lse_tolerance(DType query_dtype, DType kv_dtype) {
  const Tolerance out = default_tolerance(query_dtype, kv_dtype);
  return {std::max(out.atol, 1e-4), std::max(out.rtol, 1e-5), 0.0};
}

ErrorStats compare(const Case& c, std::span<const float> out, std::span<const double> ref, std::int64_t width,
                   Tolerance tolerance) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  ErrorStats stats;
  const std::size_t n = std::min(out.size(), ref.size());
  stats.elements = static_cast<std::int64_t>(std::max(out.size(), ref.size()));
  stats.mismatches = static_cast<std::int64_t>(std::max(out.size(), ref.size()) - n);

  double diff_sq = 0, ref_sq = 0;
  bool worst_is_nonfinite = false;
  double worst_abs = -1;
  std::int64_t worst_index = -1;
  const auto row_width = static_cast<std::size_t>(std::max<std::int64_t>(width, 1));
  double row_atol = tolerance.atol;
  for (std::size_t i = 0; i < n; ++i) {
    if (tolerance.row_scale > 0 && i % row_width == 0) {  // this row's atol, from the finite ref values
      double sum_sq = 0;
      const std::size_t row_end = std::min(n, i + row_width);
      for (std::size_t k = i; k < row_end; ++k)
        if (std::isfinite(ref[k])) sum_sq += ref[k] * ref[k];
      const double rms = std::sqrt(sum_sq / static_cast<double>(row_end - i));
      row_atol = tolerance.atol * std::min(1.0, rms / tolerance.row_scale);
    }
    const double o = out[i], r = ref[i];
    if (std::isnan(r)) {  // the inputs of this element are not finite: nothing to judge
      ++stats.unjudged;
      continue;
    }
    if (!std::isfinite(o) || !std::isfinite(r)) {
      if (o == r) continue;  // the same infinity: agreement (an LSE of -inf)
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
    if (abs_err > row_atol + tolerance.rtol * std::fabs(r)) ++stats.mismatches;
    if (!worst_is_nonfinite && abs_err > worst_abs) {
      worst_abs = abs_err;
      worst_index = static_cast<std::int64_t>(i);
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
  return stats;
}

}  // namespace pagecheck
