// The run loop: the common flow of `run`, `replay` and `bench` over their
// cases (each case evaluated, printed, bundled when failing; the reports
// written at the end). What each step does lives beside it: evaluate.hpp
// (one case), judging.hpp (tolerances), bundles.hpp, report_targets.hpp,
// progress.hpp, table.hpp.
#pragma once

#include <vector>

#include "case_sources.hpp"
#include "config.hpp"

namespace pagecheck::app {

// Runs every source and writes the outputs; returns the exit code. The
// report paths are checked (and their folders made) before the first case
// runs; a reader of the table that goes away does not stop the run.
int run_cases(const std::vector<CaseSource>& sources, const ExecOptions& exec, const OutputOptions& out,
              const Invocation& invocation);

}  // namespace pagecheck::app
