// Isolation (docs/cli.md "Isolation"): the cases run in a worker process,
// this binary again, that a supervisor restarts when a path crashes it,
// hangs past --path-timeout or leaves the CUDA context unusable. The path is
// recorded as an error with the reason, the run goes on with a fresh worker
// (and a fresh context), and a path that ended the worker twice is skipped
// for the rest of the run.
//
// The worker (hidden option --isolation-worker DIR) reads DIR/state.json
// (where to start, the rows already decided) and appends to
// DIR/journal.jsonl one JSON object a line: {"start": report header},
// {"step": {"case", "name", "step"}} before each step, {"case": {"report":
// that case's report, "maps": the --html error maps of its rows}},
// {"bundle": {...}}, {"lost": {"case", "path", "reason"}} when
// the context is lost, {"fatal": {"error", "code"}}, {"done": true}.
#pragma once

#include "case_sources.hpp"
#include "config.hpp"
#include "exec_setup.hpp"
#include "run_record.hpp"

namespace pagecheck::app {

// --isolation on, or auto when a GPU or external path is selected and a
// CUDA device is present.
bool use_isolation(const ExecOptions& exec, bool wants_gpu);

// The supervisor: runs `plan` through workers, each finished case into
// `record`, and finishes it; returns the exit code.
int supervise_isolated(const RunPlan& plan, ExecSetup& setup, const ExecOptions& exec, const OutputOptions& out,
                       const Invocation& invocation, RunRecord& record);

// The worker: runs `plan` from the state in exec.isolation_worker, writing
// the journal; returns 0 when every case ran, 75 when the context was lost,
// else the code of what stopped it (said in the journal).
int run_isolated_worker(const RunPlan& plan, ExecSetup& setup, const ExecOptions& exec, const OutputOptions& out,
                        const Invocation& invocation);

}  // namespace pagecheck::app
