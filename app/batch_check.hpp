// --check-batch-invariance (on in soak): one path's result for a case
// compared bit for bit with the same path's results for each sequence alone
// and for the batch permuted and padded to another size
// (pagecheck/batch_invariance.hpp). evaluate_case calls it for each path
// that passed.
#pragma once

#include <string>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/report.hpp"

namespace pagecheck::app {

// Whether a path's arithmetic may follow the batch by design: split and
// auto under the default or tuned plan, which chooses from the batch size.
// Their non-invariance is reported (a note), not a failure; with an explicit
// --plan (or --plan invariant) it is a failure like any other path's.
bool plan_follows_batch(const std::string& path, const RunOptions& options);

// Runs the variants through `path` (nullptr: the reference, with `threads`
// threads), without the repeat and graph checks and untimed, and records
// the outcome in `row`: notes["batch_invariance"] ("invariant over N
// batches", or the first sequence, token and head that differ), and a
// failure (status fail, reason "not batch-invariant: ...") unless
// plan_follows_batch. `output`/`lse` are the path's result for the full case.
void check_row_batch_invariance(const Case& c, Path* path, int threads, const RunOptions& options,
                                const std::vector<float>& output, const std::vector<float>& lse, PathReport& row);

}  // namespace pagecheck::app
