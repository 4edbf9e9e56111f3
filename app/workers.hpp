// Sweeps spread over processes on one host: --device all (one worker per
// GPU) and --workers N, and the printing of a merged report that they share
// with `pagecheck merge` (docs/cli.md "Sharding").
#pragma once

#include <string>
#include <vector>

#include "config.hpp"
#include "pagecheck/report.hpp"

namespace pagecheck::app {

// --device all or --workers N was given.
bool wants_workers(const ExecOptions& exec);

// Starts this binary (/proc/self/exe) once per worker with the user's
// arguments plus --shard i/N (and, for --device all, CUDA_VISIBLE_DEVICES set
// to the worker's GPU and --device 0), each writing a JSON report into a
// temporary folder; waits for all, merges their reports as `merge` does,
// prints the table and writes the requested reports. Returns the exit code a
// single run would have (raised by a worker that failed to run). --device all
// without a GPU: exit 4, saying so, with the reports written with the reason.
int run_workers(const ExecOptions& exec, const OutputOptions& out, const Invocation& invocation);

// Prints the warnings (stderr), the table of a merged report (as a run prints
// it: stdout, or stderr when a report goes to stdout; -q: the summary line,
// failures on stderr) and writes the reports of `out`. Returns
// max(code, the report's exit code), raised to 4 when a report cannot be written.
int emit_merged(const RunReport& report, const std::vector<std::string>& warnings, const OutputOptions& out, int code);

}  // namespace pagecheck::app
