// Runs cases through the selected paths and reports: the common flow of
// `run`, `replay` and `bench` (validate, reference, each path, compare,
// report, bundles of failing cases).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config.hpp"
#include "pagecheck/case.hpp"
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

// Runs every source and writes the outputs; returns the exit code.
int run_cases(const std::vector<CaseSource>& sources, const ExecOptions& exec, const OutputOptions& out,
              const Invocation& invocation);

// "label: message", unless the message already starts with the label.
std::string with_label(const std::string& label, const std::string& message);

// Shell-quotes one argument (single quotes where needed).
std::string shell_quote(const std::string& arg);

// Terminal checks: a progress line only on a terminal, color only on one.
bool stderr_is_terminal();
bool stdout_wants_color(bool no_color);

}  // namespace pagecheck::app
