// Tolerance judging: which tolerances a case is judged with, and the
// messages that say why a comparison failed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "pagecheck/case.hpp"
#include "pagecheck/metrics.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/tensor.hpp"

namespace pagecheck::app {

struct Judging {
  Tolerance output;
  Tolerance lse;
  Tolerance recorded;  // against the case's recorded output
  bool error_maps = false;  // keep where the error lies (ErrorStats::map), for --html
};

// The dtype defaults of the case, --atol/--rtol on top.
Judging tolerances_for(const Case& c, const ExecOptions& exec);

// A tensor's values as doubles (a recorded output, to be judged).
std::vector<double> widen(const Tensor& t);

// "output: 12 of 4096 elements beyond atol ... ; worst at (seq 1, ...)".
std::string mismatch_reason(std::string_view what, const ErrorStats& e, Tolerance t, std::string_view against);

// The recorded LSE is judged with the looser of the LSE tolerance and the
// recording's own; the failure message must quote the one used.
Tolerance recorded_lse_tolerance(const Judging& tol);

// Compares the case's recorded output/LSE, when it has them, with `output`
// and `lse` into row.recorded and row.recorded_lse.
void compare_recorded(const Case& c, const std::vector<float>& output, const std::vector<float>& lse,
                      const std::vector<double>& recorded_output, const std::vector<double>& recorded_lse,
                      const Judging& tol, PathReport& row);

}  // namespace pagecheck::app
