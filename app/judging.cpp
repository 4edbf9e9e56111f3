#include "judging.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pagecheck::app {

Judging tolerances_for(const Case& c, const ExecOptions& exec) {
  Judging j;
  j.output = default_tolerance(c.query.dtype, c.key_cache.dtype);
  j.lse = default_lse_tolerance(c.query.dtype, c.key_cache.dtype);
  j.recorded = j.output;
  if (c.recorded_output) {
    // A recorded output is only as precise as its own dtype.
    const Tolerance rec = default_tolerance(c.recorded_output->dtype, c.recorded_output->dtype);
    j.recorded = {std::max(j.recorded.atol, rec.atol), std::max(j.recorded.rtol, rec.rtol)};
  }
  for (Tolerance* t : {&j.output, &j.lse, &j.recorded}) {
    if (exec.atol) t->atol = *exec.atol;
    if (exec.rtol) t->rtol = *exec.rtol;
  }
  return j;
}

std::vector<double> widen(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.at(i);
  return out;
}

namespace {

std::string location(const ElementLocation& w) {
  return fmt::format("(seq {}, token {}, head {}, dim {})", w.seq, w.token, w.head, w.dim);
}

// The recorded values are what is judged, so they go in as compare()'s
// output and the path's as its reference: compare() leaves elements whose
// reference is NaN unjudged (their inputs were not finite), and a NaN the
// runtime's kernel recorded must be a mismatch, not unjudged.
ErrorStats judge_recorded(const Case& c, const std::vector<double>& recorded, const std::vector<float>& path_values,
                          std::int64_t width, Tolerance tolerance, bool error_map) {
  const std::vector<float> judged(recorded.begin(), recorded.end());
  const std::vector<double> against(path_values.begin(), path_values.end());
  return compare(c, judged, against, width, tolerance, error_map);
}

}  // namespace

std::string mismatch_reason(std::string_view what, const ErrorStats& e, Tolerance t, std::string_view against) {
  std::string out = fmt::format("{}: {} of {} elements beyond atol {:g}{} + rtol {:g}·|{}|", what, e.mismatches,
                                e.elements, t.atol,
                                row_scaling_text(t),
                                t.rtol, against);
  if (e.nonfinite > 0) out += fmt::format(" ({} NaN/Inf)", e.nonfinite);
  if (e.worst.seq >= 0 || e.worst.token >= 0)
    out += fmt::format("; worst at {}: {:g} vs {:g}", location(e.worst), e.worst_value, e.worst_reference);
  return out;
}

Tolerance recorded_lse_tolerance(const Judging& tol) {
  Tolerance t = tol.lse;
  t.atol = std::max(t.atol, tol.recorded.atol);
  t.rtol = std::max(t.rtol, tol.recorded.rtol);
  return t;
}

void compare_recorded(const Case& c, const std::vector<float>& output, const std::vector<float>& lse,
                      const std::vector<double>& recorded_output, const std::vector<double>& recorded_lse,
                      const Judging& tol, PathReport& row) {
  if (c.recorded_output) row.recorded = judge_recorded(c, recorded_output, output, c.v_head_dim(), tol.recorded, tol.error_maps);
  if (c.recorded_lse && !lse.empty())
    row.recorded_lse = judge_recorded(c, recorded_lse, lse, 1, recorded_lse_tolerance(tol), tol.error_maps);
}

}  // namespace pagecheck::app
