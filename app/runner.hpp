// Runs cases through the selected paths and reports: the common flow of
// `run`, `replay` and `bench` (validate, reference, each path, compare,
// report, bundles of failing cases).
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config.hpp"
#include "gpu_setup.hpp"
#include "pagecheck/case.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::app {

// One case to run, loaded only when its turn comes (cases can be large).
struct CaseSource {
  std::string label;  // file path or generator name, for messages
  std::function<Expected<Case>()> load;
};

// Every known path name, reference first: reference, direct, split, auto,
// prefill, fmha.
std::vector<std::string> known_path_names();

// Checks --paths against the known names (usage error naming the unknown
// one); empty selects `defaults`. Returned in canonical order.
Expected<std::vector<std::string>> resolve_paths(const std::vector<std::string>& requested,
                                                 const std::vector<std::string>& defaults);

// Runs every source and writes the outputs; returns the exit code. The
// report paths are checked (and their folders made) before the first case
// runs; a reader of the table that goes away does not stop the run.
int run_cases(const std::vector<CaseSource>& sources, const ExecOptions& exec, const OutputOptions& out,
              const Invocation& invocation);

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

// One case through setup.paths exactly as run_cases judges each of its cases
// (validation, reference, each path, tolerances, recorded output), without
// progress or outputs kept. `registry` holds the GPU and external paths.
CaseReport evaluate_one_case(const Case& c, const ExecSetup& setup, PathRegistry& registry, const GpuSetup& gpu,
                             const ExecOptions& exec);

// The command line that replays `case_file` on `paths` with the same
// tolerances, plan, tuning file, kernel libraries, device, checks and timing
// options (what a bundle's command.txt holds), shell-quoted.
std::string replay_command(const std::string& case_file, const std::vector<std::string>& paths, const ExecOptions& exec,
                           const Invocation& invocation);

// For a command that cannot run at all (bench or tune without a GPU): says
// why on stderr, still writes the requested reports with the reason (so CI
// finds one), and returns exit 4. `json` etc. as in OutputOptions.
int report_not_run(const OutputOptions& out, const Invocation& invocation, const std::string& reason);

// The report files of `out` (--json, --csv, --junit): checked before a run
// (at most one on stdout; folders made; exit 2 or 4 with the message printed,
// 0 when all is well), and written (the code raised to 4 when one fails).
int check_report_files(const OutputOptions& out);
int write_report_files(const OutputOptions& out, const RunReport& report, int code);

// Before anything runs: makes the parent folders of an output file and
// refuses a folder or a place that cannot be written (exit 4), naming the
// path. "-" (stdout) passes.
Status prepare_output_file(const std::string& path);

// A path given as a case file that is not one: "no such file", "is a
// directory, not a case file" (invalid input, exit 3), the same for replay
// and inspect.
Status check_case_path(const std::string& file);

// "label: message", unless the message already starts with the label.
std::string with_label(const std::string& label, const std::string& message);

// Shell-quotes one argument (single quotes where needed).
std::string shell_quote(const std::string& arg);

// Terminal checks: color only on a terminal (and not with --no-color,
// NO_COLOR or TERM=dumb).
bool stderr_is_terminal();
bool stream_wants_color(std::FILE* stream, bool no_color);

}  // namespace pagecheck::app
