// Case evaluation: one case through the selected paths (validation, the
// reference, each GPU or external path, the tolerances), into its report row.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "config.hpp"
#include "exec_setup.hpp"
#include "gpu_setup.hpp"
#include "progress.hpp"
#include "pagecheck/case.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/report.hpp"

namespace pagecheck::app {

// One path's result kept for a --save-failing bundle.
struct PathOutput {
  std::string path;
  std::vector<float> output;
  std::vector<float> lse;
};

struct CaseOutcome {
  CaseReport report;
  std::vector<PathOutput> outputs;  // filled when bundles are wanted
  bool failing = false;
  // An isolated worker's case: the path that left the CUDA context unusable
  // and why. The case stopped there; the worker must not run another.
  std::string context_lost_path;
  std::string context_lost;
};

// What an isolated worker (isolation.hpp) adds to a case: rows its
// supervisor decided before the case ran, and the check of the context after
// each GPU path. Empty in a run in one process.
struct CaseControls {
  std::map<std::string, std::string> errors;   // path -> why it is an error (it crashed the worker on this case)
  std::map<std::string, std::string> skipped;  // path -> why it is skipped (it crashed the worker twice)
  bool check_context = false;                  // after each GPU path: cuda_context_error
};

// Runs `c` through `paths` (the reference first when it is needed), judging
// each against the reference and the case's recorded output. `keep_outputs`
// fills outcome.outputs for a bundle, `keep_error_maps` the error maps for
// --html; `progress` is told each step of case `index` of `total`.
CaseOutcome evaluate_case(const Case& c, const std::vector<std::string>& paths, PathRegistry& registry,
                          const GpuSetup& gpu, const ExecOptions& exec, const RunOptions& run_options, bool keep_outputs,
                          bool keep_error_maps, Progress& progress, std::size_t index, std::size_t total,
                          const CaseControls& controls = {});

// One case through setup.paths exactly as run_cases judges each of its cases
// (validation, reference, each path, tolerances, recorded output), without
// progress or outputs kept. `registry` holds the GPU and external paths.
CaseReport evaluate_one_case(const Case& c, const ExecSetup& setup, PathRegistry& registry, const GpuSetup& gpu,
                             const ExecOptions& exec);

}  // namespace pagecheck::app
