// SIGINT and SIGTERM (docs/cli.md "Interrupts"): the first stops the run and
// writes its reports with the cases that finished, the second ends the
// process at once.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace pagecheck::app {

// In main, before any other thread starts: blocks SIGINT and SIGTERM in every
// thread and waits for them in a thread of its own. A signal that was ignored
// when pagecheck started (a background job's SIGINT) stays ignored. Without
// an InterruptScope, the first signal ends the process with
// interrupted_exit_code.
void watch_interrupts();

// 128 + the signal: 130 for SIGINT, 143 for SIGTERM (what a shell reports
// for a process the signal killed).
int interrupted_exit_code(int signo);

// "SIGINT", "SIGTERM".
std::string signal_label(int signo);

// While one lives, the first signal calls `on_signal(signo)` on the
// watcher's thread (a second signal during it ends the process at once). It
// returns the exit code to end with, or nullopt to let the program finish by
// itself (its reports already being written). The state it reads must
// outlive the scope.
class InterruptScope {
 public:
  explicit InterruptScope(std::function<std::optional<int>(int)> on_signal);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// The signal seen so far, 0 when none: loops stop starting new work.
int interrupt_signal();

}  // namespace pagecheck::app
