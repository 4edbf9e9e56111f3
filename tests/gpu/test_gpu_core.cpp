// The GPU core: the harness catches what it claims to catch (unwritten
// elements, moving results, launches that bake lengths in at capture), the
// device probe, RAII, the byte/FLOP model, timing rows, and the default suite
// and presets through every path that applies.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "harness/cuda_resources.cuh"
#include "gpu_test_util.hpp"
#include "harness/harness.cuh"
#include "pagecheck/suite.hpp"

using namespace pagecheck;
using namespace pagecheck::gpu;
using namespace pagecheck::test;

namespace {

// A path whose single stage is a memset of the output (and LSE): `fill`
// returns the byte value to write and how many bytes of the output to cover.
class MemsetPath final : public GpuPath {
 public:
  using Fill = std::function<std::pair<int, std::size_t>(const DeviceCase&)>;
  MemsetPath(std::string name, Fill fill) : name_(std::move(name)), fill_(std::move(fill)) {}
  std::string name() const override { return name_; }
  Applicability applies(const Case&) const override { return {}; }
  Expected<PreparedPath> prepare(const Case&, DeviceCase& d, const RunOptions&) override {
    PreparedPath p;
    DeviceCase* dc = &d;
    Fill fill = fill_;
    p.stages.push_back(Stage{"memset",
                             [dc, fill](cudaStream_t s) -> Status {
                               const auto [value, bytes] = fill(*dc);
                               CUDA_TRY(cudaMemsetAsync(dc->output.get(), value, bytes, s));
                               CUDA_TRY(cudaMemsetAsync(dc->lse.get(), value, dc->lse.bytes(), s));
                               return {};
                             },
                             0.0, 0.0});
    return p;
  }

 private:
  std::string name_;
  Fill fill_;
};

// A path whose single stage is `launch`, run on the uploaded case.
class LambdaPath final : public GpuPath {
 public:
  using Launch = std::function<Status(const DeviceCase&, cudaStream_t)>;
  LambdaPath(std::string name, Launch launch) : name_(std::move(name)), launch_(std::move(launch)) {}
  std::string name() const override { return name_; }
  Applicability applies(const Case&) const override { return {}; }
  Expected<PreparedPath> prepare(const Case&, DeviceCase& d, const RunOptions&) override {
    PreparedPath p;
    DeviceCase* dc = &d;
    Launch launch = launch_;
    p.stages.push_back(Stage{"lambda", [dc, launch](cudaStream_t s) { return launch(*dc, s); }, 0.0, 0.0});
    return p;
  }

 private:
  std::string name_;
  Launch launch_;
};

Case small_case(DType query_dtype = DType::F32) {
  SyntheticSpec s;
  s.name = "core";
  s.seed = 42;
  s.num_seqs = 4;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.query_dtype = query_dtype;
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

}  // namespace

TEST_CASE("harness: a path that writes everything deterministically passes every check") {
  const Case c = small_case();
  // Zeros, and each (decode) sequence's length, read from the device, at the
  // start of its LSE row: the graph check asks that a sequence whose length
  // grew gives another output or LSE than before.
  LambdaPath path("writes-all", [](const DeviceCase& d, cudaStream_t s) -> Status {
    CUDA_TRY(cudaMemsetAsync(d.output.get(), 0, d.output.bytes(), s));
    CUDA_TRY(cudaMemsetAsync(d.lse.get(), 0, d.lse.bytes(), s));
    CUDA_TRY(cudaMemcpy2DAsync(d.lse.get(), static_cast<std::size_t>(d.view.q_heads) * 4, d.seq_lens.get(), 4, 4,
                               static_cast<std::size_t>(d.view.kv.num_seqs), cudaMemcpyDeviceToDevice, s));
    return {};
  });
  auto run = path.run(c, correctness_options());
  REQUIRE(run.ok());
  CHECK(run->unwritten == 0);
  CHECK(run->check_failures.empty());
  CHECK(run->output.size() == static_cast<std::size_t>(c.num_tokens() * c.q_heads() * c.v_head_dim()));
  CHECK(run->output[0] == 0.0f);
  CHECK(run->notes.count("graph_check") == 1);
}

TEST_CASE("harness: elements left unwritten are counted") {
  const Case c = small_case();
  MemsetPath path("leaves-tail",
                  [](const DeviceCase& d) { return std::pair<int, std::size_t>{0, d.output.bytes() - 10 * sizeof(float)}; });
  auto run = path.run(c, correctness_options());
  REQUIRE(run.ok());
  CHECK(run->unwritten == 10);
  CHECK(std::isnan(run->output.back()));
}

TEST_CASE("harness: a result that moves between runs is not bitwise repeatable") {
  const Case c = small_case(DType::BF16);
  auto counter = std::make_shared<int>(0);
  MemsetPath path("moving", [counter](const DeviceCase& d) {
    return std::pair<int, std::size_t>{(*counter)++ % 64, d.output.bytes()};
  });
  auto run = path.run(c, correctness_options());
  REQUIRE(run.ok());
  CHECK(has_failure(*run, "not bitwise repeatable"));
}

TEST_CASE("harness: a launch that bakes the lengths in at capture fails the graph check") {
  const Case c = small_case();
  // The memset's value comes from the host's lengths at launch time: a graph
  // replays the value of capture time, an eager run after the change differs.
  MemsetPath path("frozen-lengths", [](const DeviceCase& d) {
    return std::pair<int, std::size_t>{d.host_seq_lens[0] % 64, d.output.bytes()};
  });
  auto run = path.run(c, correctness_options());
  REQUIRE(run.ok());
  CHECK(has_failure(*run, "graph replay differs from an eager run"));
  CHECK_FALSE(has_failure(*run, "not bitwise repeatable"));
}

TEST_CASE("harness: a launch that bakes the page table in at capture fails the graph check") {
  // CSR table without shared pages: every entry names a distinct real page,
  // so only the graph check's page move changes what an entry points at.
  SyntheticSpec s;
  s.name = "frozen-table";
  s.seed = 44;
  s.num_seqs = 4;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.query_dtype = DType::F32;
  s.table_form = TableForm::Csr;
  s.share_pages = false;
  s.seq_len_dist = LengthDist::List;
  s.seq_len_list = {20, 45, 70, 130};
  auto c = generate_case(s);
  REQUIRE(c.ok());
  // Output element e = the first 4 bytes of the page that table entry e
  // names, the page taken from the host's table at launch time: a graph
  // replays the pages of capture time. Lengths play no part.
  LambdaPath path("frozen-table", [](const DeviceCase& d, cudaStream_t st) -> Status {
    CUDA_TRY(cudaMemsetAsync(d.output.get(), 0, d.output.bytes(), st));
    CUDA_TRY(cudaMemsetAsync(d.lse.get(), 0, d.lse.bytes(), st));
    const std::size_t kb = d.key_page_bytes();
    for (std::size_t e = 0; e < d.host_page_indices.size() && (e + 1) * 4 <= d.output.bytes(); ++e) {
      const std::int64_t page = d.host_page_indices[e];
      if (page < 0 || page >= d.view.kv.num_blocks) continue;
      CUDA_TRY(cudaMemcpyAsync(d.output.as<std::byte>() + e * 4, d.key_cache.as<std::byte>() + page * kb, 4,
                               cudaMemcpyDeviceToDevice, st));
    }
    return {};
  });
  auto run = path.run(*c, correctness_options());
  REQUIRE(run.ok());
  CHECK(run->unwritten == 0);
  CHECK_FALSE(has_failure(*run, "not bitwise repeatable"));
  // The moved page holds the same values at its new place; only a page left
  // behind with other bytes tells the stale replay apart.
  CHECK(has_failure(*run, "graph replay differs from an eager run"));
  CHECK(run->notes["graph_check"].find("moved to free page") != std::string::npos);
}

TEST_CASE("harness: timing rows, graph replay time, byte and FLOP model") {
  const Case c = small_case(DType::BF16);
  RunOptions o = correctness_options();
  o.measure = true;
  o.warmup = 1;
  o.repeats = 3;
  Path* direct = gpu_registry().find("direct");
  REQUIRE(direct != nullptr);
  auto run = direct->run(c, o);
  REQUIRE(run.ok());
  REQUIRE(run->timings.size() == 1);
  const StageTiming& t = run->timings[0];
  CHECK(t.stage == "total");
  CHECK(t.repeats == 3);
  CHECK(t.min_ms <= t.median_ms);
  CHECK(t.median_ms <= t.max_ms);
  CHECK(t.graph_replay_ms.has_value());
  const AttentionModel m = attention_model(c);
  CHECK(t.bytes == doctest::Approx(m.bytes()));
  CHECK(t.flops == doctest::Approx(m.flops));
  // Decode, no window: every key of every sequence, K and V of each KV head.
  double keys = 0;
  for (auto len : c.seq_lens) keys += len;
  CHECK(m.kv_bytes == doctest::Approx(keys * 2 * (64 + 64) * 2));
  CHECK(m.flops == doctest::Approx(2.0 * keys * (64 + 64) * 8));
}

TEST_CASE("harness: fmha times its gather and FMHA separately") {
  SyntheticSpec s;
  s.name = "fmha-timing";
  s.seed = 43;
  s.num_seqs = 2;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.query_mode = QueryMode::Chunked;
  s.seq_len_dist = LengthDist::List;
  s.seq_len_list = {100, 300};
  s.q_len_dist = LengthDist::Fixed;
  s.q_len_max = 32;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  RunOptions o = correctness_options();
  o.measure = true;
  o.warmup = 1;
  o.repeats = 3;
  auto run = gpu_registry().find("fmha")->run(*c, o);
  REQUIRE(run.ok());
  REQUIRE(run->timings.size() == 3);
  CHECK(run->timings[0].stage == "total");
  CHECK(run->timings[1].stage == "gather");
  CHECK(run->timings[2].stage == "fmha");
  CHECK(run->timings[1].bytes > 0);
  CHECK(run->notes.count("gather_gb_per_s") == 1);
}

TEST_CASE("byte model: a window reads only the window") {
  SyntheticSpec s;
  s.name = "window-model";
  s.num_seqs = 1;
  s.q_heads = 4;
  s.kv_heads = 1;
  s.head_dim = 64;
  s.seq_len_dist = LengthDist::Fixed;
  s.seq_len_max = 1000;
  s.sliding_window = 100;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  const AttentionModel m = attention_model(*c);
  CHECK(m.kv_bytes == doctest::Approx(100.0 * (64 + 64) * 2));
  CHECK(m.flops == doctest::Approx(2.0 * 100 * (64 + 64) * 4));
}

TEST_CASE("probe_device measures both ceilings; a missing device is a usage error") {
  auto info = probe_device(0, true);
  REQUIRE(info.ok());
  CHECK_FALSE(info->name.empty());
  CHECK(info->multiprocessors > 0);
  CHECK(info->copy_gb_per_s > 0);
  CHECK(info->matmul_tflop_per_s > 0);
  auto missing = probe_device(device_count() + 3, false);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ErrorCode::Usage);
}

TEST_CASE("RAII: buffers move, leaving the source empty") {
  auto a = device_alloc(1 << 20);
  REQUIRE(a.ok());
  DeviceBuffer first = std::move(*a);
  void* p = first.get();
  DeviceBuffer second = std::move(first);
  CHECK(first.empty());
  CHECK(first.bytes() == 0);
  CHECK(second.get() == p);
  CHECK(second.bytes() == (1u << 20));
  auto stream = make_stream();
  REQUIRE(stream.ok());
  Stream moved = std::move(*stream);
  CHECK(static_cast<bool>(moved));
}

TEST_CASE("the default suite and presets pass through every path that applies") {
  std::vector<SyntheticSpec> specs = default_suite();
  for (const auto& name : preset_names()) {
    auto p = preset(name);
    REQUIRE(p.ok());
    specs.push_back(*p);
  }
  for (const auto& spec : specs) {
    auto c = generate_case(spec);
    REQUIRE_MESSAGE(c.ok(), spec.name);
    std::vector<std::string> paths;
    for (const auto& name : gpu_path_names())
      if (gpu_registry().find(name)->applies(*c).applies) paths.push_back(name);
    check_paths(*c, describe_spec(spec), paths);
  }
}

// pagecheck run uploads generated cases from their cache_source, chunk by
// chunk: the device pool must be the held caches' pool, byte for byte
// (spare page included), or the suite would check other data than it says.
TEST_CASE("upload: caches made on demand reach the device as held caches do") {
  std::vector<SyntheticSpec> specs = default_suite();
  for (const auto& name : preset_names()) {
    auto p = preset(name);
    REQUIRE(p.ok());
    specs.push_back(*p);
  }
  const auto device_bytes = [](const DeviceBuffer& b) {
    std::vector<std::byte> host(b.bytes());
    if (!host.empty()) REQUIRE(cudaMemcpy(host.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  };
  for (const auto& spec : specs) {
    CAPTURE(spec.name);
    auto held = generate_case(spec);
    auto sourced = generate_case_sourced(spec);
    REQUIRE(held.ok());
    REQUIRE(sourced.ok());
    REQUIRE_FALSE(sourced->caches_held());
    auto a = upload_case(*held);
    auto b = upload_case(*sourced);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(device_bytes((*a)->key_cache) == device_bytes((*b)->key_cache));
    CHECK(device_bytes((*a)->value_cache) == device_bytes((*b)->value_cache));
    CHECK(device_bytes((*a)->query) == device_bytes((*b)->query));
  }
}

// The suite's path families (suite.hpp) are a model of the kernels'
// applicability; the covering property means something only if the model
// is right: each GPU path applies exactly to the cases of its families.
TEST_CASE("the suite's path families agree with every GPU path's applicability") {
  for (const auto& sc : default_suite_cases()) {
    auto c = generate_case(sc.spec);
    REQUIRE_MESSAGE(c.ok(), sc.spec.name);
    for (const auto& name : gpu_path_names()) {
      bool modelled = false;
      for (const auto& t : suite_targets())
        if (std::find(t.paths.begin(), t.paths.end(), name) != t.paths.end() && t.accepts(sc.row)) modelled = true;
      const Applicability real = gpu_registry().find(name)->applies(*c);
      CHECK_MESSAGE(real.applies == modelled, sc.spec.name, " path ", name, ": the suite says ",
                    std::string(modelled ? "applies" : "does not apply"), ", the path says ",
                    real.applies ? std::string("applies") : real.reason);
    }
  }
}
