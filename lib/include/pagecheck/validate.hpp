// Validation before anything runs: every check of the runtime module plus
// the rest a user needs. Each message names the sequence, entry and values.
#pragma once

#include <string>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

struct ValidationReport {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;  // e.g. a page used twice inside one sequence
  bool ok() const { return errors.empty(); }
};

ValidationReport validate_case(const Case& c);

// OK when the report has no errors; else InvalidInput whose message lists
// every error (warnings are not included).
Status validation_status(const ValidationReport& report, std::string where = {});

}  // namespace pagecheck
