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

// Skip: no pass 5 (the values), and key_cache/value_cache may hold no data.
// A case whose caches come from its cache_source (generate_case_sourced,
// finite by construction) has only its query scanned in pass 5.
enum class ValueScan { Scan, Skip };
ValidationReport validate_case(const Case& c, ValueScan values = ValueScan::Scan);

// OK when the report has no errors; else InvalidInput whose message lists
// every error (warnings are not included).
Status validation_status(const ValidationReport& report, std::string where = {});

}  // namespace pagecheck
