// Bundles of failing cases (--save-failing DIR): the case, the paths'
// outputs, its report and the command that replays it.
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "config.hpp"
#include "evaluate.hpp"
#include "pagecheck/case.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::app {

// A case name made safe as a folder name ("case" when nothing is left).
std::string safe_dir_name(const std::string& name);

// safe_dir_name(case_name), with "-2", "-3"... when `taken` has it; the
// name returned is added to `taken`.
std::string unique_bundle_name(const std::string& case_name, std::set<std::string>& taken);

// Writes ROOT/DIR_NAME/: case.safetensors, outputs.safetensors, report.json,
// command.txt and replay.sh; returns the folder.
Expected<std::filesystem::path> save_bundle(const std::filesystem::path& root, const std::string& dir_name,
                                            const Case& c, const CaseOutcome& outcome,
                                            const std::vector<std::string>& paths, const ExecOptions& exec,
                                            const Invocation& invocation, const RunReport& run);

// The command line that replays `case_file` on `paths` with the same
// tolerances, plan, tuning file, kernel libraries, device, checks and timing
// options (what a bundle's command.txt holds), shell-quoted.
std::string replay_command(const std::string& case_file, const std::vector<std::string>& paths, const ExecOptions& exec,
                           const Invocation& invocation);

// Shell-quotes one argument (single quotes where needed).
std::string shell_quote(const std::string& arg);

}  // namespace pagecheck::app
