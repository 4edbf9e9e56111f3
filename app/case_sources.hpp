// What a command runs: its cases, loaded one at a time, and the messages
// that name them.
#pragma once

#include <functional>
#include <string>

#include "pagecheck/case.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::app {

// One case to run, loaded only when its turn comes (cases can be large).
struct CaseSource {
  std::string label;  // file path or generator name, for messages
  std::function<Expected<Case>()> load;
};

// A path given as a case file that is not one: "no such file", "is a
// directory, not a case file" (invalid input, exit 3), the same for replay
// and inspect.
Status check_case_path(const std::string& file);

// "label: message", unless the message already starts with the label.
std::string with_label(const std::string& label, const std::string& message);

}  // namespace pagecheck::app
