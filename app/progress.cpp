#include "progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include <fmt/format.h>

namespace pagecheck::app {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

Progress::Progress(Mode mode, std::chrono::duration<double> interval)
    : mode_(mode), interval_(interval), last_(std::chrono::steady_clock::now()) {
  if (mode_ == Mode::Periodic && interval_.count() > 0) {
    try {
      ticker_ = std::thread([this] { tick(); });
    } catch (const std::system_error&) {
      // No thread to be had: lines only at the steps.
    }
  }
}

Progress::~Progress() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  clear();
}

void Progress::update(std::size_t index, std::size_t total, const std::string& name, std::string_view step) {
  if (listener_) listener_(step);
  if (mode_ == Mode::Periodic) {
    std::lock_guard lock(mutex_);
    line_ = fmt::format("pagecheck: case {}/{} ({}) {}", index + 1, total, name, step);
    step_start_ = std::chrono::steady_clock::now();
    if (!ticker_.joinable()) {  // interval 0, or no ticker: at every step that is due
      if (step_start_ - last_ < interval_) return;
      last_ = step_start_;
      fmt::print(stderr, "{}\n", line_);
      std::fflush(stderr);
    }
    return;
  }
  if (mode_ != Mode::Terminal) return;
  std::string text = fmt::format("[{}/{}] {}: {}", index + 1, total, name, step);
  if (text.size() > 100) text.resize(100);
  fmt::print(stderr, "\r\x1b[K{}", text);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (mode_ == Mode::Periodic) {
    std::lock_guard lock(mutex_);
    line_.clear();
  }
  if (!shown_) return;
  fmt::print(stderr, "\r\x1b[K");
  std::fflush(stderr);
  shown_ = false;
}

void Progress::tick() {
  std::unique_lock lock(mutex_);
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval_);
  auto next = std::chrono::steady_clock::now() + period;
  while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
    next += period;
    if (line_.empty()) continue;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count();
    fmt::print(stderr, "{} ({:.0f} s in this step)\n", line_, seconds);
    std::fflush(stderr);
  }
}

Expected<double> progress_interval() {
  const char* text = std::getenv("PAGECHECK_PROGRESS_SECONDS");
  if (text == nullptr || *text == '\0') return 10.0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds >= 0) || !std::isfinite(seconds))
    return usage_error(fmt::format("PAGECHECK_PROGRESS_SECONDS='{}' is not a number of seconds >= 0", text));
  return seconds;
}

}  // namespace pagecheck::app
