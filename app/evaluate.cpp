#include "evaluate.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "batch_check.hpp"
#include "judging.hpp"
#include "specs.hpp"
#include "test_faults.hpp"
#include "pagecheck/content_hash.hpp"
#include "pagecheck/limits.hpp"
#include "pagecheck/metrics.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/validate.hpp"

namespace pagecheck::app {

CaseOutcome evaluate_case(const Case& c, const std::vector<std::string>& paths, PathRegistry& registry,
                          const GpuSetup& gpu, const ExecOptions& exec, const RunOptions& run_options, bool keep_outputs,
                          bool keep_error_maps, Progress& progress, std::size_t index, std::size_t total,
                          const CaseControls& controls) {
  CaseOutcome outcome;
  CaseReport& cr = outcome.report;
  cr.name = c.name;
  cr.description = c.params.description;
  cr.geometry = describe_geometry(c);

  const ValidationReport validation = validate_case(c);
  cr.warnings = validation.warnings;
  if (!validation.ok()) {
    cr.errors = validation.errors;
    return outcome;
  }
  // Hashed once the case validates: a hostile geometry's sizes overflow
  // (an invalid case has no hash; compare pairs it by name).
  cr.content_hash = case_content_hash(c);

  Judging tol = tolerances_for(c, exec);
  tol.error_maps = keep_error_maps;
  const std::int64_t width = c.v_head_dim();
  const std::size_t expected_elements = static_cast<std::size_t>(c.num_tokens() * c.q_heads() * width);
  const std::size_t expected_lse = static_cast<std::size_t>(c.num_tokens() * c.q_heads());

  std::vector<double> recorded_output, recorded_lse;
  if (c.recorded_output) {
    if (static_cast<std::size_t>(c.recorded_output->numel()) == expected_elements) {
      recorded_output = widen(*c.recorded_output);
    } else {
      cr.warnings.push_back(fmt::format("recorded output has shape {} but the case's output has {} elements; "
                                        "not compared",
                                        c.recorded_output->describe(), expected_elements));
    }
  }
  if (c.recorded_lse && static_cast<std::size_t>(c.recorded_lse->numel()) == expected_lse)
    recorded_lse = widen(*c.recorded_lse);
  // A file may record the LSE without the output; it is judged all the same.
  const bool have_recorded = !recorded_output.empty() || !recorded_lse.empty();

  // Which GPU paths will actually run: the reference is needed for them.
  const bool reference_selected = std::find(paths.begin(), paths.end(), "reference") != paths.end();
  bool any_gpu_runs = false;
  for (const auto& name : paths) {
    if (name == "reference" || !gpu.unavailable.empty()) continue;
    if (Path* p = registry.find(name); p != nullptr && p->applies(c).applies) any_gpu_runs = true;
  }
  const bool need_reference = reference_selected || (exec.compare_reference && any_gpu_runs);

  std::optional<ReferenceResult> reference;
  std::string reference_failure;
  if (need_reference) {
    progress.update(index, total, c.name, "reference");
    PathReport row;
    row.path = "reference";
    row.tolerance = tol.recorded;
    const auto start = std::chrono::steady_clock::now();
    Expected<ReferenceResult> ref = runtime_error("not run");
    if (const auto decided = controls.errors.find("reference"); decided != controls.errors.end()) {
      ref = runtime_error(decided->second, "reference");
    } else if (inject_test_fault(c.name, "reference") && controls.check_context) {
      // The test hook's lost context, on the one path a CPU-only build runs.
      outcome.context_lost_path = "reference";
      outcome.context_lost = "test fault (PAGECHECK_TEST_FAULT): the context is lost";
      return outcome;
    } else {
      try {
        ref = reference_attention(c, exec.threads);
      } catch (const std::exception& e) {
        ref = runtime_error(fmt::format("the reference threw: {}", e.what()), "reference");
      }
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!ref.ok()) {
      reference_failure = ref.error().describe();
      row.status = PathStatus::Error;
      row.reason = reference_failure;
    } else {
      reference = std::move(*ref);
      // Caches made on demand: "total" is the reference's own time, and the
      // note "caches_ms" the time it spent having their pages made.
      StageTiming t;
      t.stage = "total";
      t.median_ms = t.min_ms = t.max_ms = ms - reference->cache_ms;
      t.repeats = 1;
      row.timings.push_back(t);
      if (!c.caches_held()) row.notes["caches_ms"] = fmt::format("{:.3f}", reference->cache_ms);
      std::vector<float> out_f(reference->output.begin(), reference->output.end());
      std::vector<float> lse_f(reference->lse.begin(), reference->lse.end());
      row.output_digest = values_digest(out_f);
      row.lse_digest = values_digest(lse_f);
      if (have_recorded) {
        // The reference is the judge of the recorded output: when they
        // disagree, the recorded output (or the reference) is wrong.
        compare_recorded(c, out_f, lse_f, recorded_output, recorded_lse, tol, row);
        std::vector<std::string> failures;
        if (row.recorded && row.recorded->mismatches > 0)
          failures.push_back(mismatch_reason("differs from the recorded output", *row.recorded, tol.recorded, "recorded"));
        if (row.recorded_lse && row.recorded_lse->mismatches > 0)
          failures.push_back(mismatch_reason("differs from the recorded LSE", *row.recorded_lse, recorded_lse_tolerance(tol),
                                             "recorded"));
        if (!failures.empty()) {
          row.status = PathStatus::Fail;
          row.reason = failures.front();
          for (std::size_t i = 1; i < failures.size(); ++i) row.check_failures.push_back(failures[i]);
        }
      }
      if (exec.check_batch_invariance && reference_selected && row.status == PathStatus::Pass) {
        progress.update(index, total, c.name, "reference: batch invariance");
        check_row_batch_invariance(c, nullptr, exec.threads, run_options, out_f, lse_f, row);
      }
      if (keep_outputs) outcome.outputs.push_back({"reference", std::move(out_f), std::move(lse_f)});
    }
    // The reference row is shown when selected, or when it failed (a failure
    // must never be hidden).
    if (reference_selected || row.status == PathStatus::Error) cr.paths.push_back(std::move(row));
  }

  std::optional<std::uint64_t> device_bytes;  // estimate_memory(c).device_bytes, once a GPU path runs
  for (const auto& name : paths) {
    if (name == "reference") continue;
    PathReport row;
    row.path = name;
    row.tolerance = tol.output;
    Path* path = registry.find(name);
    // Without a device only the external paths are registered; they answer
    // applicability there too (their supports()): n/a rather than skipped.
    if (!gpu.unavailable.empty() && path != nullptr) {
      if (const Applicability a = path->applies(c); !a.applies) {
        row.status = PathStatus::NotApplicable;
        row.reason = a.reason;
        cr.paths.push_back(std::move(row));
        continue;
      }
    }
    if (!gpu.unavailable.empty()) {
      row.status = PathStatus::Skipped;
      row.reason = gpu.unavailable;
      cr.paths.push_back(std::move(row));
      continue;
    }
    if (path == nullptr) {
      row.status = PathStatus::Skipped;
      row.reason = "not built into this binary";
      cr.paths.push_back(std::move(row));
      continue;
    }
    const Applicability applicability = path->applies(c);
    if (!applicability.applies) {
      row.status = PathStatus::NotApplicable;
      row.reason = applicability.reason;
      cr.paths.push_back(std::move(row));
      continue;
    }
    // A path that ended the worker on this very case is that case's error,
    // also when that was its second crash and it is skipped from now on
    // (the case runs again in a fresh worker with both decided).
    if (const auto decided = controls.errors.find(name); decided != controls.errors.end()) {
      row.status = PathStatus::Error;
      row.reason = decided->second;
      cr.paths.push_back(std::move(row));
      continue;
    }
    if (const auto skip = controls.skipped.find(name); skip != controls.skipped.end()) {
      row.status = PathStatus::Skipped;
      row.reason = skip->second;
      cr.paths.push_back(std::move(row));
      continue;
    }
    if (exec.compare_reference && !reference) {
      row.status = PathStatus::Skipped;
      row.reason = "not run: the reference failed (" + reference_failure + ")";
      cr.paths.push_back(std::move(row));
      continue;
    }

    // A case that cannot fit on the device is an error that says so, before
    // any allocation (the estimate is what the GPU paths would hold at most).
    // PAGECHECK_DEVICE_MEMORY_LIMIT caps the free figure (main has refused
    // an unparsable value, exit 2).
    if (path->needs_gpu()) {
      if (!device_bytes) device_bytes = estimate_memory(c).device_bytes;
      const auto limit = device_memory_limit();
      if (auto shortfall = device_memory_shortfall(*device_bytes, run_options.device, cuda_free_bytes(run_options.device),
                                                   limit.ok() ? *limit : std::nullopt)) {
        row.status = PathStatus::Error;
        row.reason = std::move(*shortfall);
        cr.paths.push_back(std::move(row));
        continue;
      }
    }
    progress.update(index, total, c.name, name);
    Expected<PathRun> run = runtime_error("not run");
    std::optional<std::string> context_error;
    if (inject_test_fault(c.name, name)) {
      run = runtime_error("test fault (PAGECHECK_TEST_FAULT): the path left the context unusable", name);
      context_error = "test fault: a lost context, as after an illegal address";
    } else {
      try {
        run = path->run(c, run_options);
      } catch (const std::exception& e) {
        run = runtime_error(fmt::format("threw: {}", e.what()), name);
      }
      if (controls.check_context && path->needs_gpu()) context_error = cuda_context_error(run_options.device);
    }
    if (context_error && controls.check_context) {
      // Nothing more can run in this process: the case stops at this path,
      // which is an error whatever it returned.
      row.status = PathStatus::Error;
      row.reason = run.ok() ? fmt::format("the CUDA context is lost after this path ({})", *context_error)
                            : fmt::format("{}; the CUDA context is lost ({})", run.error().describe(), *context_error);
      cr.paths.push_back(std::move(row));
      outcome.context_lost_path = name;
      outcome.context_lost = cr.paths.back().reason;
      outcome.failing = true;
      return outcome;
    }
    if (!run.ok()) {
      row.status = PathStatus::Error;
      row.reason = run.error().describe();
      cr.paths.push_back(std::move(row));
      continue;
    }
    PathRun& r = *run;
    row.unwritten = r.unwritten;
    row.check_failures = r.check_failures;
    row.timings = r.timings;
    row.plan = r.plan;
    row.notes = r.notes;
    row.output_digest = values_digest(r.output);
    if (!r.lse.empty()) row.lse_digest = values_digest(r.lse);

    std::vector<std::string> failures;
    if (r.output.size() != expected_elements)
      failures.push_back(fmt::format("returned {} output elements, expected {}", r.output.size(), expected_elements));
    if (!r.lse.empty() && r.lse.size() != expected_lse)
      failures.push_back(fmt::format("returned {} LSE elements, expected {}", r.lse.size(), expected_lse));
    if (reference) {
      row.error = compare(c, r.output, reference->output, width, tol.output, tol.error_maps, reference->lse);
      if (row.error->mismatches > 0) failures.push_back(mismatch_reason("output", *row.error, tol.output, "ref"));
      if (!r.lse.empty()) {
        row.lse_error = compare(c, r.lse, reference->lse, 1, tol.lse, tol.error_maps);
        if (row.lse_error->mismatches > 0) failures.push_back(mismatch_reason("LSE", *row.lse_error, tol.lse, "ref"));
      }
    }
    if (have_recorded) compare_recorded(c, r.output, r.lse, recorded_output, recorded_lse, tol, row);
    if (r.unwritten > 0) failures.push_back(fmt::format("{} output elements left unwritten", r.unwritten));
    if (!failures.empty() || !r.check_failures.empty()) {
      row.status = PathStatus::Fail;
      row.reason = failures.empty() ? r.check_failures.front() : failures.front();
      for (std::size_t i = 1; i < failures.size(); ++i) row.check_failures.insert(row.check_failures.begin(), failures[i]);
    }
    if (exec.check_batch_invariance && row.status == PathStatus::Pass) {
      progress.update(index, total, c.name, name + ": batch invariance");
      check_row_batch_invariance(c, path, exec.threads, run_options, r.output, r.lse, row);
    }
    if (keep_outputs) outcome.outputs.push_back({name, std::move(r.output), std::move(r.lse)});
    cr.paths.push_back(std::move(row));
  }

  for (const auto& row : cr.paths)
    if (row.status == PathStatus::Fail || row.status == PathStatus::Error) outcome.failing = true;
  return outcome;
}

CaseReport evaluate_one_case(const Case& c, const ExecSetup& setup, PathRegistry& registry, const GpuSetup& gpu,
                             const ExecOptions& exec) {
  Progress quiet(Progress::Mode::Off, std::chrono::duration<double>(0));
  return evaluate_case(c, setup.paths, registry, gpu, exec, setup.run_options, false, false, quiet, 0, 1).report;
}

}  // namespace pagecheck::app
