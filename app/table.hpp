// The terminal table's stream: the per-case rows, the summary and the
// failures a run prints (the rows themselves are pagecheck/report.hpp's).
#pragma once

#include <cstdio>
#include <exception>

namespace pagecheck::app {

// When the table's reader goes away (EPIPE: main ignores SIGPIPE) the table
// stops and the run goes on to write its reports.
class Table {
 public:
  explicit Table(std::FILE* out) : out_(out) {}
  template <typename Print>
  void print(Print&& print) {
    if (gone_) return;
    try {
      print(out_);
      std::fflush(out_);
    } catch (const std::exception&) {
      gone_ = true;  // fmt throws when a write fails
    }
    if (std::ferror(out_)) gone_ = true;
  }

 private:
  std::FILE* out_;
  bool gone_ = false;
};

// Color only on a terminal (and not with --no-color, NO_COLOR or TERM=dumb).
bool stream_wants_color(std::FILE* stream, bool no_color);

}  // namespace pagecheck::app
