// A path is one way of computing the attention of a case: the reference or a
// GPU kernel path. The CLI finds paths through one registry; kernels/ adds
// the GPU ones when built with CUDA.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/plan.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

struct Applicability {
  bool applies = true;
  std::string reason;  // why not, when it does not apply ("head_dim 96 is not built; built: 64, 128, 256")
};

// One timed region of a path (the whole path, or a stage such as "gather").
struct StageTiming {
  std::string stage;       // "total", "gather", "fmha", ...
  double median_ms = 0, min_ms = 0, max_ms = 0;
  // First and third quartile of the timed repeats (timing_stats.hpp): q3 - q1
  // is the run's measured spread. Absent for a single timed run (the
  // reference) and in reports written before they were recorded.
  std::optional<double> q1_ms, q3_ms;
  int repeats = 0;
  double bytes = 0;        // byte model of the stage
  double flops = 0;        // FLOP model of the stage
  std::optional<double> graph_replay_ms;  // CUDA graph replay time, when captured
};

// Ceilings measured on the device at start-up.
struct DeviceInfo {
  std::string name;
  int device_index = 0;
  int multiprocessors = 0;
  double copy_gb_per_s = 0;      // device-to-device copy, bytes read + written
  double matmul_tflop_per_s = 0; // BF16 matrix product
  double read_gb_per_s = 0;      // read-only stream of device memory (decode's bound)
  // Why matmul_tflop_per_s was not measured when the other ceilings were
  // ("cuBLAS cannot be loaded (...)"); empty otherwise.
  std::string matmul_unavailable;
};

struct RunOptions {
  int device = 0;
  bool hot = false;          // no L2 flush between timed repeats
  bool measure = true;       // time the path (false: correctness only)
  int warmup = 3;
  int repeats = 20;
  bool checks = true;        // repeatability and graph-replay checks
  std::optional<Plan> plan;  // --plan; else tuning or default
  std::string tuning_file;   // --tuning
};

// What a path returns for one case.
struct PathRun {
  std::vector<float> output;  // [num_tokens, q_heads, v_head_dim], widened to float
  std::vector<float> lse;     // [num_tokens, q_heads]; empty if the path has none
  std::int64_t unwritten = 0; // output elements still holding the poison after the run
  std::vector<StageTiming> timings;
  std::vector<std::string> check_failures;  // "not bitwise repeatable: 12 elements differ", ...
  std::string plan;                          // "split:512:2048 (tuned)" where a plan applies
  std::map<std::string, std::string> notes;  // free-form extra facts for the report
};

class Path {
 public:
  virtual ~Path() = default;
  virtual std::string name() const = 0;
  virtual bool needs_gpu() const { return true; }
  virtual Applicability applies(const Case& c) const = 0;
  // Errors are runtime failures (exit 4); a wrong answer is not an error.
  virtual Expected<PathRun> run(const Case& c, const RunOptions& options) = 0;
};

class PathRegistry {
 public:
  void add(std::unique_ptr<Path> path) { paths_.push_back(std::move(path)); }
  Path* find(const std::string& name) const {
    for (const auto& p : paths_)
      if (p->name() == name) return p.get();
    return nullptr;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& p : paths_) out.push_back(p->name());
    return out;
  }
  const std::vector<std::unique_ptr<Path>>& all() const { return paths_; }

 private:
  std::vector<std::unique_ptr<Path>> paths_;
};

// The GPU path names known to the tool, whether built or not, so that a build
// without CUDA can still report them as skipped.
inline const std::vector<std::string>& gpu_path_names() {
  static const std::vector<std::string> names = {"direct", "split", "auto", "prefill", "fmha"};
  return names;
}

}  // namespace pagecheck
