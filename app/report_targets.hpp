// The report files of a command (--json, --csv, --junit, --html): checked
// before anything runs, written at the end.
#pragma once

#include <string>
#include <vector>

#include "config.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::app {

struct ReportTarget {
  std::string option;  // --json, --csv, --junit, --html
  std::string path;
  Status (*write)(const std::string&, const RunReport&);
};

// The reports `out` asks for, in that order.
std::vector<ReportTarget> report_targets(const OutputOptions& out);

// Usage (two reports on stdout) and the paths, before anything runs. Prints
// the error; returns its exit code, 0 when all is well.
int check_report_targets(const std::vector<ReportTarget>& targets);

// Whether one of them is stdout ("-"): the table then goes to stderr.
bool any_report_on_stdout(const std::vector<ReportTarget>& targets);

// Writes every report; returns `code` raised to 4 when one fails.
int write_reports(const std::vector<ReportTarget>& targets, const RunReport& report, int code);

// The same for the report files of `out` (at most one on stdout; folders
// made; exit 2 or 4 with the message printed, 0 when all is well).
int check_report_files(const OutputOptions& out);
int write_report_files(const OutputOptions& out, const RunReport& report, int code);

// For a command that cannot run at all (bench or tune without a GPU): says
// why on stderr, still writes the requested reports with the reason (so CI
// finds one), and returns exit 4.
int report_not_run(const OutputOptions& out, const Invocation& invocation, const std::string& reason);

// Before anything runs: makes the parent folders of an output file and
// refuses a folder or a place that cannot be written (exit 4), naming the
// path. "-" (stdout) passes.
Status prepare_output_file(const std::string& path);

}  // namespace pagecheck::app
