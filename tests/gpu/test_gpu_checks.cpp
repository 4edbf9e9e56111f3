// The harness checks the mutation self-test added (scripts/mutants,
// docs/validation.md "Mutation self-test"): the workspace is poisoned before
// every run, and the graph check asks that changed lengths reach the
// kernels. Each test builds a path that has exactly the fault a check is
// there for, and one without it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "harness/cuda_resources.cuh"
#include "gpu_test_util.hpp"
#include "harness/harness.cuh"

using namespace pagecheck;
using namespace pagecheck::gpu;
using namespace pagecheck::test;

namespace {

// A path with one workspace buffer of `workspace_bytes` and one stage
// `launch(case, workspace, stream)`; `setup(case, workspace)` runs once at
// prepare time (outside the stage, like a plan computed on the host).
class WorkspacePath final : public GpuPath {
 public:
  using Launch = std::function<Status(const DeviceCase&, const DeviceBuffer&, cudaStream_t)>;
  using Setup = std::function<Status(const DeviceCase&, const DeviceBuffer&)>;
  WorkspacePath(std::string name, std::function<std::size_t(const DeviceCase&)> workspace_bytes, Launch launch,
                Setup setup = nullptr)
      : name_(std::move(name)), bytes_(std::move(workspace_bytes)), launch_(std::move(launch)), setup_(std::move(setup)) {}
  std::string name() const override { return name_; }
  Applicability applies(const Case&) const override { return {}; }
  Expected<PreparedPath> prepare(const Case&, DeviceCase& d, const RunOptions&) override {
    PreparedPath p;
    auto buffer = device_alloc(bytes_(d));
    if (!buffer) return buffer.error();
    if (setup_) PC_TRY(setup_(d, *buffer));
    p.workspace.push_back(std::move(*buffer));
    const DeviceCase* dc = &d;
    const DeviceBuffer* ws = &p.workspace.back();  // the vector's element: moves keep the buffer
    Launch launch = launch_;
    p.stages.push_back(Stage{"stage", [dc, ws, launch](cudaStream_t s) { return launch(*dc, *ws, s); }, 0.0, 0.0});
    return p;
  }

 private:
  std::string name_;
  std::function<std::size_t(const DeviceCase&)> bytes_;
  Launch launch_;
  Setup setup_;
};

Case small_case(TableForm form = TableForm::Dense) {
  SyntheticSpec s;
  s.name = "checks";
  s.seed = 45;
  s.num_seqs = 4;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.query_dtype = DType::F32;
  s.table_form = form;
  s.seq_len_dist = LengthDist::List;
  s.seq_len_list = {20, 45, 70, 130};
  auto c = generate_case(s);
  REQUIRE(c.ok());
  return *c;
}

bool has_failure(const PathRun& run, const std::string& fragment) {
  for (const auto& f : run.check_failures)
    if (f.find(fragment) != std::string::npos) return true;
  return false;
}

// The LSE: 0, and each (decode) sequence's row starts with its length as
// read from `lens`, so every row depends on the lengths the stage reads.
Status write_lengths(const DeviceCase& d, const void* lens, cudaStream_t s) {
  CUDA_TRY(cudaMemsetAsync(d.lse.get(), 0, d.lse.bytes(), s));
  CUDA_TRY(cudaMemcpy2DAsync(d.lse.get(), static_cast<std::size_t>(d.view.q_heads) * 4, lens, 4, 4,
                             static_cast<std::size_t>(d.view.kv.num_seqs), cudaMemcpyDeviceToDevice, s));
  return {};
}

}  // namespace

TEST_CASE("harness: a stage that reads workspace no stage of the run wrote reads NaN") {
  const Case c = small_case();
  // The stage copies its workspace into the output: every element then
  // holds the harness's 0xFF workspace bytes (a NaN, not the output poison).
  WorkspacePath path(
      "reads-unwritten-workspace", [](const DeviceCase& d) { return d.output.bytes(); },
      [](const DeviceCase& d, const DeviceBuffer& ws, cudaStream_t s) -> Status {
        CUDA_TRY(cudaMemcpyAsync(d.output.get(), ws.get(), d.output.bytes(), cudaMemcpyDeviceToDevice, s));
        return write_lengths(d, d.seq_lens.get(), s);
      });
  auto run = path.run(c, correctness_options());
  REQUIRE(run.ok());
  CHECK(run->unwritten == 0);
  REQUIRE_FALSE(run->output.empty());
  CHECK(std::isnan(run->output.front()));
  CHECK(std::isnan(run->output.back()));

  // The same stage that writes its workspace first reads what it wrote.
  WorkspacePath writes_first(
      "writes-workspace-first", [](const DeviceCase& d) { return d.output.bytes(); },
      [](const DeviceCase& d, const DeviceBuffer& ws, cudaStream_t s) -> Status {
        CUDA_TRY(cudaMemsetAsync(ws.get(), 0, ws.bytes(), s));
        CUDA_TRY(cudaMemcpyAsync(d.output.get(), ws.get(), d.output.bytes(), cudaMemcpyDeviceToDevice, s));
        return write_lengths(d, d.seq_lens.get(), s);
      });
  auto good = writes_first.run(c, correctness_options());
  REQUIRE(good.ok());
  CHECK(good->output.front() == 0.0f);
  CHECK(good->check_failures.empty());
}

TEST_CASE("harness: a path that keeps reading the lengths of upload time fails the graph check") {
  const Case c = small_case();
  // The lengths are copied once, at prepare time, into a device buffer of
  // the path's own (a graph input buffer that the table update never
  // reaches), and the stage reads that copy: replay and eager run agree,
  // neither sees the change.
  auto frozen = std::make_shared<DeviceBuffer>();
  WorkspacePath path(
      "frozen-length-copy", [](const DeviceCase&) { return std::size_t{16}; },
      [frozen](const DeviceCase& d, const DeviceBuffer&, cudaStream_t s) -> Status {
        CUDA_TRY(cudaMemsetAsync(d.output.get(), 0, d.output.bytes(), s));
        return write_lengths(d, frozen->get(), s);
      },
      [frozen](const DeviceCase& d, const DeviceBuffer&) -> Status {
        auto buffer = device_alloc(d.seq_lens.bytes());
        if (!buffer) return buffer.error();
        *frozen = std::move(*buffer);
        CUDA_TRY(cudaMemcpy(frozen->get(), d.seq_lens.get(), d.seq_lens.bytes(), cudaMemcpyDeviceToDevice));
        return {};
      });
  auto run = path.run(c, correctness_options());
  REQUIRE(run.ok());
  CHECK_FALSE(has_failure(*run, "graph replay differs"));
  CHECK_FALSE(has_failure(*run, "not bitwise repeatable"));
  CHECK(has_failure(*run, "the changed lengths did not reach the kernels"));

  // Reading the lengths the harness updates passes.
  WorkspacePath live(
      "live-lengths", [](const DeviceCase&) { return std::size_t{16}; },
      [](const DeviceCase& d, const DeviceBuffer&, cudaStream_t s) -> Status {
        CUDA_TRY(cudaMemsetAsync(d.output.get(), 0, d.output.bytes(), s));
        return write_lengths(d, d.seq_lens.get(), s);
      });
  auto good = live.run(c, correctness_options());
  REQUIRE(good.ok());
  CHECK(good->check_failures.empty());
  CHECK(good->notes["graph_check"].find("longer") != std::string::npos);
}

TEST_CASE("harness: the real paths pass the new checks on a windowed split case") {
  // Split partitions that the window leaves empty: their slots of the
  // poisoned workspace must be written (the empty state) before the merge.
  SyntheticSpec s;
  s.name = "checks-window-split";
  s.seed = 46;
  s.num_seqs = 3;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.seq_len_dist = LengthDist::List;
  s.seq_len_list = {300, 700, 1100};
  s.sliding_window = 100;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  RunOptions o = correctness_options();
  o.plan = Plan{PlanKind::SplitKv, 256, 256, PlanSource::Explicit};
  check_paths(*c, "window 100, split:256:256", {"direct", "split", "auto", "prefill", "fmha"}, o);
}
