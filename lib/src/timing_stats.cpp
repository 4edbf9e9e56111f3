// Summaries of timed repeats (pagecheck/timing_stats.hpp).
#include "pagecheck/timing_stats.hpp"

#include <algorithm>
#include <cmath>

namespace pagecheck {

double sorted_quantile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double position = std::clamp(p, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

TimingSummary summarize_times(std::vector<double> samples) {
  TimingSummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.min = samples.front();
  s.max = samples.back();
  s.median = sorted_quantile(samples, 0.5);
  if (samples.size() >= 2) {
    s.q1 = sorted_quantile(samples, 0.25);
    s.q3 = sorted_quantile(samples, 0.75);
  }
  return s;
}

}  // namespace pagecheck
