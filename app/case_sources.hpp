// What a command runs: its cases, loaded one at a time, and the messages
// that name them.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "progress.hpp"
#include "pagecheck/report.hpp"

#include "pagecheck/case.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::app {

// One case to run, loaded only when its turn comes (cases can be large).
struct CaseSource {
  std::string label;  // file path or generator name, for messages
  std::function<Expected<Case>()> load;
};

// What a run runs: its sources, the positions of those this run (or shard)
// selects, and how its progress shows.
struct RunPlan {
  const std::vector<CaseSource>* sources = nullptr;
  std::vector<std::size_t> selected;  // indexes into *sources, in order
  bool wants_gpu = false;             // a GPU or external path is selected
  Progress::Mode progress_mode = Progress::Mode::Off;
  std::chrono::duration<double> progress_interval{0};
};

// source.load(), an exception from it turned into a runtime error.
Expected<Case> load_case(const CaseSource& source);

// The report row of a case that could not be loaded (said on stderr).
CaseReport load_failure(const CaseSource& source, std::size_t index, const Error& error);

// An invalid case's errors, said on stderr ("label: invalid case: ...").
void say_invalid(const CaseSource& source, const CaseReport& report);

// A path given as a case file that is not one: "no such file", "is a
// directory, not a case file" (invalid input, exit 3), the same for replay
// and inspect.
Status check_case_path(const std::string& file);

// "label: message", unless the message already starts with the label.
std::string with_label(const std::string& label, const std::string& message);

}  // namespace pagecheck::app
