// What a run sets up once from its options before the first case: the
// selected paths and the run options.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::app {

// Every known path name, reference first: reference, direct, split, auto,
// prefill, fmha.
std::vector<std::string> known_path_names();

// Checks --paths against the known names (usage error naming the unknown
// one); empty selects `defaults`. Returned in canonical order.
Expected<std::vector<std::string>> resolve_paths(const std::vector<std::string>& requested,
                                                 const std::vector<std::string>& defaults);

// What run_cases sets up once from the options before the first case (and
// `reduce` before its many runs of one case): the paths (--paths resolved,
// the --kernel libraries' paths last), the run options (--plan parsed,
// --tuning read). Errors name the option; their code is the exit code's.
struct ExecSetup {
  std::vector<std::string> paths;
  RunOptions run_options;
  std::vector<std::unique_ptr<Path>> external;  // the --kernel paths, for the registry
};
Expected<ExecSetup> prepare_exec(const ExecOptions& exec);

}  // namespace pagecheck::app
