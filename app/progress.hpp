// Progress of a run on stderr: which case and which step is in progress.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "pagecheck/status.hpp"

namespace pagecheck::app {

// On a terminal: one line rewritten in place at every step. Elsewhere (a CI
// log): a plain line every interval, from a thread of its own, naming the
// case and step in progress and how long that step has taken, so that one
// long step (a reference over a large batch) shows the run is alive too; the
// first comes after one interval, so short runs print none. Interval 0: a
// line at every step instead.
class Progress {
 public:
  enum class Mode { Off, Terminal, Periodic };
  Progress(Mode mode, std::chrono::duration<double> interval);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(std::size_t index, std::size_t total, const std::string& name, std::string_view step);
  // Between cases and after the last: no step in progress, no line.
  void clear();
  // Told the step at every update, whatever the mode (what is in flight, for
  // an interrupted report or an isolated worker's journal).
  void set_listener(std::function<void(std::string_view step)> listener) { listener_ = std::move(listener); }

 private:
  void tick();

  Mode mode_ = Mode::Off;
  std::function<void(std::string_view)> listener_;
  std::chrono::duration<double> interval_;
  std::chrono::steady_clock::time_point last_{};  // the last line at a step (no ticker)
  bool shown_ = false;
  // Periodic: the step in progress, guarded by mutex_, and the ticker.
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string line_;
  std::chrono::steady_clock::time_point step_start_{};
  std::thread ticker_;
};

// The seconds between progress lines off a terminal: 10, or
// PAGECHECK_PROGRESS_SECONDS (docs/cli.md "Environment").
Expected<double> progress_interval();

// Whether stderr is a terminal (the progress line's mode).
bool stderr_is_terminal();

}  // namespace pagecheck::app
