// Shared by the GPU sweeps: one registry of the GPU paths on device 0, and a
// check that runs a generated case through paths and compares each with the
// CPU reference, printing the case's configuration when anything fails.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pagecheck/gpu.hpp"
#include "pagecheck/metrics.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/synthetic.hpp"

namespace pagecheck::test {

inline PathRegistry& gpu_registry() {
  static PathRegistry registry = [] {
    PathRegistry r;
    auto device = gpu::probe_device(0, false);
    REQUIRE_MESSAGE(device.ok(), (device.ok() ? "" : device.error().describe()));
    gpu::register_paths(r, *device);
    return r;
  }();
  return registry;
}

inline std::string describe_spec(const SyntheticSpec& s) {
  std::string lens;
  for (auto l : s.seq_len_list) lens += fmt::format("{} ", l);
  std::string qlens;
  for (auto l : s.q_len_list) qlens += fmt::format("{} ", l);
  return fmt::format(
      "{} seed {}: {} seqs, heads {}/{}, d{}/{}, block {}, Q {} KV {}, {}, seq_len [{}..{}] list [{}], q_len [{}..{}] "
      "list [{}], mode {}, window {}, softcap {}, causal {}, sinks {}, alibi {}",
      s.name, s.seed, s.num_seqs, s.q_heads, s.kv_heads, s.head_dim, s.v_head_dim ? s.v_head_dim : s.head_dim,
      s.block_size, dtype_name(s.query_dtype), dtype_name(s.kv_dtype), s.layout == KvLayout::NHD ? "NHD" : "HND",
      s.seq_len_min, s.seq_len_max, lens, s.q_len_min, s.q_len_max, qlens, static_cast<int>(s.query_mode),
      s.sliding_window, s.softcap, s.causal, s.sinks, s.alibi);
}

inline RunOptions correctness_options() {
  RunOptions o;
  o.measure = false;
  o.checks = true;
  return o;
}

// Runs `c` through each path in `paths` (each must apply) and checks: output
// and LSE within the default tolerances of the reference, every element
// written, no check failure (repeatability, graph replay).
inline void check_paths(const Case& c, const std::string& label, const std::vector<std::string>& paths,
                        const RunOptions& options = correctness_options()) {
  INFO(label);
  auto ref = reference_attention(c);
  REQUIRE_MESSAGE(ref.ok(), (ref.ok() ? "" : ref.error().describe()));
  const Tolerance tol = default_tolerance(c.query.dtype, c.key_cache.dtype);
  const Tolerance lse_tol = default_lse_tolerance(c.query.dtype, c.key_cache.dtype);
  for (const auto& name : paths) {
    INFO("path " << name);
    Path* path = gpu_registry().find(name);
    REQUIRE(path != nullptr);
    const Applicability a = path->applies(c);
    CHECK_MESSAGE(a.applies, a.reason);
    if (!a.applies) continue;
    auto run = path->run(c, options);
    CHECK_MESSAGE(run.ok(), (run.ok() ? "" : run.error().describe()));
    if (!run.ok()) continue;
    CHECK(run->unwritten == 0);
    std::string failures;
    for (const auto& f : run->check_failures) failures += f + "\n";
    CHECK_MESSAGE(run->check_failures.empty(), failures);
    const ErrorStats out = compare(c, run->output, ref->output, c.v_head_dim(), tol, false, ref->lse);
    CHECK_MESSAGE(out.mismatches == 0,
                  fmt::format("output: {} of {} mismatches, max abs err {:.3g}, worst seq {} token {} head {} dim {}: "
                              "{} vs {}",
                              out.mismatches, out.elements, out.max_abs_err, out.worst.seq, out.worst.token,
                              out.worst.head, out.worst.dim, out.worst_value, out.worst_reference));
    if (!run->lse.empty()) {
      const ErrorStats lse = compare(c, run->lse, ref->lse, 1, lse_tol);
      CHECK_MESSAGE(lse.mismatches == 0, fmt::format("LSE: {} mismatches, max abs err {:.3g} at seq {} token {} head {}",
                                                     lse.mismatches, lse.max_abs_err, lse.worst.seq, lse.worst.token,
                                                     lse.worst.head));
    }
  }
}

inline void check_spec(const SyntheticSpec& spec, const std::vector<std::string>& paths,
                       const RunOptions& options = correctness_options()) {
  auto c = generate_case(spec);
  REQUIRE_MESSAGE(c.ok(), (describe_spec(spec) + ": " + (c.ok() ? "" : c.error().describe())));
  check_paths(*c, describe_spec(spec), paths, options);
}

inline RunOptions with_plan(const std::string& plan_text) {
  RunOptions o = correctness_options();
  auto plan = parse_plan(plan_text);
  REQUIRE(plan.ok());
  o.plan = *plan;
  return o;
}

}  // namespace pagecheck::test
