// Case evaluation: one case through the selected paths (validation, the
// reference, each GPU or external path, the tolerances), into its report row.
#pragma once

#include <cstddef>
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
};

// Runs `c` through `paths` (the reference first when it is needed), judging
// each against the reference and the case's recorded output. `keep_outputs`
// fills outcome.outputs for a bundle, `keep_error_maps` the error maps for
// --html; `progress` is told each step of case `index` of `total`.
CaseOutcome evaluate_case(const Case& c, const std::vector<std::string>& paths, PathRegistry& registry,
                          const GpuSetup& gpu, const ExecOptions& exec, const RunOptions& run_options, bool keep_outputs,
                          bool keep_error_maps, Progress& progress, std::size_t index, std::size_t total);

// One case through setup.paths exactly as run_cases judges each of its cases
// (validation, reference, each path, tolerances, recorded output), without
// progress or outputs kept. `registry` holds the GPU and external paths.
CaseReport evaluate_one_case(const Case& c, const ExecSetup& setup, PathRegistry& registry, const GpuSetup& gpu,
                             const ExecOptions& exec);

}  // namespace pagecheck::app
