#include "batch_check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pagecheck/batch_invariance.hpp"
#include "pagecheck/reference.hpp"

namespace pagecheck::app {

bool plan_follows_batch(const std::string& path, const RunOptions& options) {
  return (path == "split" || path == "auto") && !options.plan;
}

void check_row_batch_invariance(const Case& c, Path* path, int threads, const RunOptions& options,
                                const std::vector<float>& output, const std::vector<float>& lse, PathReport& row) {
  RunOptions quick = options;
  quick.checks = false;
  quick.measure = false;
  const BatchRun run = [&](const Case& batch, std::string& why) -> Expected<std::optional<BatchOutput>> {
    if (path == nullptr) {
      auto ref = reference_attention(batch, threads);
      if (!ref.ok()) return ref.error();
      return std::optional<BatchOutput>(BatchOutput{std::vector<float>(ref->output.begin(), ref->output.end()),
                                                    std::vector<float>(ref->lse.begin(), ref->lse.end())});
    }
    if (const Applicability a = path->applies(batch); !a.applies) {
      why = "n/a: " + a.reason;
      return std::optional<BatchOutput>();
    }
    auto r = path->run(batch, quick);
    if (!r.ok()) return r.error();
    return std::optional<BatchOutput>(BatchOutput{std::move(r->output), std::move(r->lse)});
  };
  Expected<BatchInvariance> result = runtime_error("not run");
  try {
    result = check_batch_invariance(c, BatchOutput{output, lse}, run);
  } catch (const std::exception& e) {
    result = runtime_error(fmt::format("threw: {}", e.what()));
  }
  if (!result.ok()) {
    row.status = PathStatus::Error;
    row.reason = "batch invariance: " + result.error().describe();
    return;
  }
  const std::string skipped =
      result->variants_skipped.empty() ? "" : fmt::format("; skipped {}", fmt::join(result->variants_skipped, ", "));
  if (result->invariant) {
    row.notes["batch_invariance"] = fmt::format("invariant over {} batches{}", result->variants_run, skipped);
    return;
  }
  const std::string where = result->first->describe();
  if (plan_follows_batch(row.path, options)) {
    row.notes["batch_invariance"] =
        fmt::format("not invariant (the plan follows the batch; --plan invariant fixes it): {}", where);
    return;
  }
  row.notes["batch_invariance"] = "not invariant: " + where;
  row.check_failures.push_back("not batch-invariant: " + where);
  if (row.status == PathStatus::Pass) {
    row.status = PathStatus::Fail;
    row.reason = row.check_failures.back();
  }
}

}  // namespace pagecheck::app
