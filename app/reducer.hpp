// The reduction of `pagecheck reduce` (app/reduce.cpp) for other commands:
// soak reduces each failure it meets before it saves it.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "pagecheck/case.hpp"
#include "pagecheck/report.hpp"

namespace pagecheck::app {

// The kind of a failing row's first failure (its reason): "output beyond
// tolerance", "LSE NaN/Inf", "unwritten", "repeatability", "graph replay",
// "batch invariance", "error", ...; "the same way" means the same status and
// this kind.
std::string failure_kind(const PathReport& row);

struct ReducedFailure {
  Case reduced;       // the smallest case found that fails the same way
  std::string kind;   // failure_kind of the original
  PathReport first;   // the original's row
  int tests = 0;      // runs of the path, the original's included
};

// Reduces `c` (its caches held: generate_case, a loaded file) as `reduce`
// does on a GPU path (every cut allowed), with `run` giving the path's row
// of a candidate (nullopt: it did not run). nullopt when `c` does not fail.
std::optional<ReducedFailure> reduce_failure(const Case& c, int max_tests,
                                             const std::function<std::optional<PathReport>(const Case&)>& run);

}  // namespace pagecheck::app
