// What a path's timed repeats come to: the median the table shows, the
// extremes, and the quartiles whose distance (the interquartile range) is the
// run's measured spread, which `compare` weighs a change of the median
// against (docs/cli.md "compare").
#pragma once

#include <optional>
#include <vector>

namespace pagecheck {

struct TimingSummary {
  double median = 0, min = 0, max = 0;
  // First and third quartile (linear interpolation between the sorted
  // samples, the "type 7" rule of R and NumPy); absent for fewer than two
  // samples, where there is no spread to measure.
  std::optional<double> q1, q3;
};

// Of the samples in any order; all zero for none.
TimingSummary summarize_times(std::vector<double> samples);

// The p-quantile (0 <= p <= 1) of sorted samples, interpolated linearly.
double sorted_quantile(const std::vector<double>& sorted, double p);

}  // namespace pagecheck
