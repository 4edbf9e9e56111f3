// External kernels (issue 11): the example libraries loaded through the C
// ABI go through every harness check, and the checks reach them: the two
// pagecheck_wrap entries and simple_decode pass a sweep of awkward cases
// against the CPU reference (unwritten elements, bitwise repeatability, graph
// replay with changed tables, timing); the faulty entries fail (a stale last
// key: output beyond tolerance; no LSE: unwritten LSE).
// The plan step of ABI 1.1 (issue 20): planned_decode, whose kernel reads
// lengths and offsets only from what plan wrote into the plan-owned
// workspace and writes nothing unless the rest of the workspace was poisoned
// before that plan, passes every check; planned_decode_baked, whose launch
// bakes plan's host lengths into its arguments, fails the graph check; a
// library exported as ABI 1.0 loads and passes.
// Issue 19: misbehaving's stale_lengths (reads the lengths of its first call)
// fails the graph check even when every sequence is at the case's capacity
// (the check can only shorten them), and wrong_stream (launches on the legacy
// default stream) is reported as work outside its stream, with its numbers
// right; simple_decode passes the same cases.
//
// The libraries are found next to this binary's build tree
// (../../examples/external relative to tests/gpu), or in
// PAGECHECK_EXTERNAL_DIR when set.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>

#include "gpu_test_util.hpp"
#include "pagecheck/external_kernels.hpp"

using namespace pagecheck;
using namespace pagecheck::test;

namespace {

namespace fs = std::filesystem;

std::string library_dir() {
  if (const char* env = std::getenv("PAGECHECK_EXTERNAL_DIR"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / PAGECHECK_EXTERNAL_RELATIVE_DIR).lexically_normal().string();
}

std::string library(const std::string& file) { return (fs::path(library_dir()) / file).string(); }

PathRegistry& external_registry() {
  static PathRegistry registry = [] {
    PathRegistry r;
    for (const char* file : {"libpagecheck_wrap.so", "libsimple_decode.so", "libsimple_decode_faulty.so",
                             "libplanned_decode.so", "libsimple_decode_abi1_0.so", "libpagecheck_misbehaving.so"}) {
      auto paths = gpu::load_external_kernels(library(file));
      REQUIRE_MESSAGE(paths.ok(), (paths.ok() ? "" : paths.error().describe()));
      for (auto& p : *paths) r.add(std::move(p));
    }
    return r;
  }();
  return registry;
}

const std::vector<std::string> kGoodPaths = {"ext:pagecheck_direct", "ext:pagecheck_split", "ext:simple_decode",
                                             "ext:planned_decode", "ext:simple_decode_abi1_0"};

SyntheticSpec decode_spec(std::string name, std::uint64_t seed) {
  SyntheticSpec s;
  s.name = std::move(name);
  s.seed = seed;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.block_size = 16;
  s.query_mode = QueryMode::Decode;
  s.seq_len_dist = LengthDist::List;
  return s;
}

struct Outcome {
  ErrorStats output, lse;
  PathRun run;
};

// Runs `name` on `c` and compares with the reference; REQUIREs that it ran.
Outcome run_path(const Case& c, const std::string& name, const RunOptions& options = correctness_options()) {
  Path* path = external_registry().find(name);
  REQUIRE_MESSAGE(path != nullptr, name);
  const Applicability a = path->applies(c);
  REQUIRE_MESSAGE(a.applies, (name + ": " + a.reason));
  auto ref = reference_attention(c);
  REQUIRE_MESSAGE(ref.ok(), (ref.ok() ? "" : ref.error().describe()));
  auto run = path->run(c, options);
  REQUIRE_MESSAGE(run.ok(), (run.ok() ? "" : run.error().describe()));
  Outcome o;
  o.output = compare(c, run->output, ref->output, c.v_head_dim(), default_tolerance(c.query.dtype, c.key_cache.dtype),
                     false, ref->lse);
  o.lse = compare(c, run->lse, ref->lse, 1, default_lse_tolerance(c.query.dtype, c.key_cache.dtype));
  o.run = std::move(*run);
  return o;
}

void check_passes(const SyntheticSpec& spec, const std::vector<std::string>& paths) {
  auto c = generate_case(spec);
  REQUIRE_MESSAGE(c.ok(), (describe_spec(spec) + ": " + (c.ok() ? "" : c.error().describe())));
  for (const auto& name : paths) {
    INFO(describe_spec(spec) << " path " << name);
    const Outcome o = run_path(*c, name);
    std::string failures;
    for (const auto& f : o.run.check_failures) failures += f + "\n";
    CHECK_MESSAGE(o.run.check_failures.empty(), failures);
    CHECK(o.run.unwritten == 0);
    CHECK_MESSAGE(o.output.mismatches == 0,
                  fmt::format("output: {} of {} mismatches, max abs err {:.3g}", o.output.mismatches,
                              o.output.elements, o.output.max_abs_err));
    CHECK_MESSAGE(o.lse.mismatches == 0, fmt::format("LSE: {} mismatches", o.lse.mismatches));
    CHECK(!o.run.notes.at("graph_check").empty());  // the graph check ran on the plugin
  }
}

}  // namespace

TEST_CASE("external: wrap and simple_decode pass every check; block sizes 1, 7, 16, 32, lengths block +-1") {
  std::uint64_t seed = 1100;
  for (std::int64_t bs : {1, 7, 16, 32}) {
    auto s = decode_spec(fmt::format("ext-block-{}", bs), seed++);
    s.block_size = bs;
    s.seq_len_list = {1, std::max<std::int64_t>(1, bs - 1), bs, bs + 1, 255, 256, 257, 700};
    s.num_seqs = static_cast<std::int64_t>(s.seq_len_list.size());
    check_passes(s, kGoodPaths);
  }
}

TEST_CASE("external: dtypes, GQA 1/4/MQA, window, softcap, k/v scales, CSR tables") {
  std::uint64_t seed = 1200;
  for (DType dtype : {DType::F16, DType::BF16}) {
    for (auto [q_heads, kv_heads] : {std::pair<std::int64_t, std::int64_t>{8, 8}, {8, 2}, {8, 1}}) {
      auto s = decode_spec(fmt::format("ext-{}-{}x{}", dtype_name(dtype), q_heads, kv_heads), seed++);
      s.query_dtype = s.kv_dtype = dtype;
      s.q_heads = q_heads;
      s.kv_heads = kv_heads;
      s.seq_len_list = {1, 17, 300, 777};
      s.num_seqs = 4;
      check_passes(s, kGoodPaths);
    }
  }
  auto s = decode_spec("ext-window-softcap-scales", seed++);
  s.seq_len_list = {1, 40, 129, 600};
  s.num_seqs = 4;
  s.sliding_window = 100;
  s.softcap = 30.0;
  s.k_scale = 0.5;
  s.v_scale = 2.0;
  check_passes(s, kGoodPaths);
  s = decode_spec("ext-csr-d64", seed++);
  s.table_form = TableForm::Csr;
  s.head_dim = 64;
  s.seq_len_list = {5, 16, 33, 400};
  s.num_seqs = 4;
  check_passes(s, kGoodPaths);
  // pagecheck_wrap takes every KV dtype pagecheck's own decode does.
  s = decode_spec("ext-wrap-fp8", seed++);
  s.kv_dtype = DType::F8_E4M3;
  s.k_scale = 0.5;
  s.v_scale = 2.0;
  s.seq_len_list = {1, 100, 513};
  s.num_seqs = 3;
  check_passes(s, {"ext:pagecheck_direct", "ext:pagecheck_split"});
}

TEST_CASE("external: timing reaches a plugin (events, L2 flush, graph replay, byte model)") {
  auto s = decode_spec("ext-timing", 1300);
  s.seq_len_list = {2048, 1000, 3000, 17};
  s.num_seqs = 4;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  RunOptions options = correctness_options();
  options.measure = true;
  options.warmup = 1;
  options.repeats = 5;
  for (const auto& name : kGoodPaths) {
    INFO(name);
    const Outcome o = run_path(*c, name, options);
    REQUIRE(!o.run.timings.empty());
    const StageTiming& total = o.run.timings.front();
    CHECK(total.stage == "total");
    CHECK(total.median_ms > 0);
    CHECK(total.bytes > 0);
    CHECK(total.flops > 0);
    CHECK(total.graph_replay_ms.has_value());
    CHECK(o.run.notes.count("l2_flush") == 1);
    CHECK(o.run.notes.at("library").find(".so") != std::string::npos);
  }
}

TEST_CASE("external: the checks reach a plugin; a faulty kernel fails") {
  auto s = decode_spec("ext-faulty", 1400);
  s.seq_len_list = {33, 100, 257, 64};
  s.num_seqs = 4;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  {
    INFO("simple_decode_stale_key reads the last key from the slot before it");
    const Outcome o = run_path(*c, "ext:simple_decode_stale_key");
    CHECK(o.output.mismatches > 0);
    CHECK(o.run.unwritten == 0);
  }
  {
    INFO("simple_decode_no_lse never writes the LSE");
    const Outcome o = run_path(*c, "ext:simple_decode_no_lse");
    bool lse_unwritten = false;
    // 4 sequences x 8 query heads, none written.
    for (const auto& f : o.run.check_failures) lse_unwritten |= f.find("LSE: 32 of 32 elements unwritten") != std::string::npos;
    std::string failures;
    for (const auto& f : o.run.check_failures) failures += f + "\n";
    CHECK_MESSAGE(lse_unwritten, failures);
    CHECK(o.output.mismatches == 0);  // the output itself is right
  }
}

TEST_CASE("external: applicability is the plugin's") {
  auto s = decode_spec("ext-hnd", 1500);
  s.layout = KvLayout::HND;
  s.seq_len_list = {10, 20};
  s.num_seqs = 2;
  auto hnd = generate_case(s);
  REQUIRE(hnd.ok());
  const Applicability simple = external_registry().find("ext:simple_decode")->applies(*hnd);
  CHECK(!simple.applies);
  CHECK(simple.reason.find("layout HND") != std::string::npos);
  check_passes(s, {"ext:pagecheck_direct"});  // the wrap takes HND

  auto p = decode_spec("ext-prefill", 1501);
  p.query_mode = QueryMode::Prefill;
  p.seq_len_list = {10, 20};
  p.num_seqs = 2;
  auto prefill = generate_case(p);
  REQUIRE(prefill.ok());
  const Applicability wrap = external_registry().find("ext:pagecheck_direct")->applies(*prefill);
  CHECK(!wrap.applies);
  CHECK(wrap.reason.find("pagecheck_wrap: decode only") != std::string::npos);
}

TEST_CASE("external: the loader names the library at fault") {
  auto missing = gpu::load_external_kernels(library("no-such-library.so"));
  REQUIRE(!missing.ok());
  CHECK(missing.error().code == ErrorCode::InvalidInput);
  CHECK(missing.error().describe().find("no-such-library.so") != std::string::npos);
  auto future = gpu::load_external_kernels(library("libpagecheck_ext_abi_mismatch.so"));
  REQUIRE(!future.ok());
  CHECK(future.error().describe().find("ABI 2.0") != std::string::npos);
}

TEST_CASE("external plan step: plan-owned workspace kept between plan and launch, the rest poisoned before plan") {
  // planned_decode passing the sweeps above (kGoodPaths) already shows it;
  // here the notes, and a case whose graph check grows and shrinks lengths
  // across page boundaries (the kernel sees them only through plan).
  auto s = decode_spec("ext-planned", 1600);
  s.block_size = 7;
  s.seq_len_list = {1, 6, 7, 8, 50, 300};
  s.num_seqs = 6;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  RunOptions options = correctness_options();
  options.measure = true;  // timing plans once, then repeats and replays that plan
  options.warmup = 1;
  options.repeats = 3;
  const Outcome o = run_path(*c, "ext:planned_decode", options);
  std::string failures;
  for (const auto& f : o.run.check_failures) failures += f + "\n";
  CHECK_MESSAGE(o.run.check_failures.empty(), failures);
  CHECK(o.run.unwritten == 0);
  CHECK(o.output.mismatches == 0);
  CHECK(o.lse.mismatches == 0);
  CHECK(o.run.notes.at("abi") == "1.2");  // built against this tree's header
  // 8 bytes of plan number, int64 [7] page offsets, int32 [6] lengths, int32 [7] query offsets, to 16 bytes.
  CHECK(o.run.notes.at("plan_workspace_bytes") == "128");
  CHECK(o.run.notes.at("host_staging_bytes") == "128");
  CHECK(o.run.notes.at("workspace_bytes") == std::to_string(128 + 4 * 6 * 8));  // + a probe word per (seq, head)
  REQUIRE(!o.run.timings.empty());
  CHECK(o.run.timings.front().median_ms > 0);
}

TEST_CASE("external plan step: a launch that bakes plan's lengths into its arguments fails the graph check") {
  auto s = decode_spec("ext-planned-baked", 1700);
  s.seq_len_list = {33, 100, 257, 64};
  s.num_seqs = 4;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  const Outcome o = run_path(*c, "ext:planned_decode_baked");
  // Eager runs plan first, so they are right...
  CHECK(o.output.mismatches == 0);
  CHECK(o.run.unwritten == 0);
  // ...but the graph replays the lengths of capture time.
  bool replay_differs = false;
  for (const auto& f : o.run.check_failures) replay_differs |= f.find("graph replay differs") != std::string::npos;
  std::string failures;
  for (const auto& f : o.run.check_failures) failures += f + "\n";
  CHECK_MESSAGE(replay_differs, failures);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TEST_CASE("external: a kernel that keeps the lengths of its first call fails the graph check at capacity") {
  // What `pagecheck run --seqs 8 --seq-len 300` makes: every sequence at the
  // capacity, so both rounds of the graph check shorten every sequence. The
  // windowed form (session 10's isolation check, the suite's cover-052): a
  // window of 5 keys over sequences shortened by more than the 16 keys past
  // the new length that the check changes; the stale kernel reads only the
  // last keys before the old length.
  for (const int form : {0, 1, 2}) {
    const bool at_capacity = form != 1;
    auto s = decode_spec(form == 0 ? "ext-stale-capacity" : form == 1 ? "ext-stale-mixed" : "ext-stale-window", 1900);
    s.seq_len_list = form == 0   ? std::vector<std::int64_t>(8, 300)
                     : form == 1 ? std::vector<std::int64_t>{33, 100, 257, 64}
                                 : std::vector<std::int64_t>(4, 513);
    if (form == 2) s.sliding_window = 5;
    s.num_seqs = static_cast<std::int64_t>(s.seq_len_list.size());
    auto c = generate_case(s);
    REQUIRE(c.ok());
    INFO(describe_spec(s));
    const Outcome o = run_path(*c, "ext:stale_lengths");
    // Right on the case as uploaded...
    CHECK(o.output.mismatches == 0);
    CHECK(o.run.unwritten == 0);
    // ...and stale once the lengths change.
    REQUIRE_FALSE(o.run.check_failures.empty());
    CHECK_MESSAGE(o.run.check_failures.front().find("the changed lengths did not reach the kernels") !=
                      std::string::npos,
                  joined(o.run.check_failures));
    if (at_capacity) {
      bool keys_past = false;
      for (const auto& f : o.run.check_failures) keys_past |= f.find("keys past the new lengths") != std::string::npos;
      CHECK_MESSAGE(keys_past, joined(o.run.check_failures));
    }
    // The same case with the kernel that reads the lengths given: no alarm.
    check_passes(s, {"ext:simple_decode"});
  }
}

TEST_CASE("external: a kernel launched on the legacy default stream ran work outside its stream") {
  auto s = decode_spec("ext-wrong-stream", 2000);
  s.seq_len_list = {300, 17, 129, 64};
  s.num_seqs = 4;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  const Outcome o = run_path(*c, "ext:wrong_stream");
  REQUIRE_FALSE(o.run.check_failures.empty());
  CHECK_MESSAGE(o.run.check_failures.front().find("the kernel ran work outside its stream") != std::string::npos,
                joined(o.run.check_failures));
  // The numbers it wrote are right (read after the device-wide synchronise),
  // so the reason is the stream, not NaN.
  CHECK(o.output.mismatches == 0);
  CHECK(o.run.unwritten == 0);
  CHECK(o.run.notes.count("graph_check") == 0);  // skipped: it would only say the same again
}

TEST_CASE("external: a library built against ABI 1.0 loads and runs without a plan") {
  auto s = decode_spec("ext-abi-1.0", 1800);
  s.seq_len_list = {1, 17, 300};
  s.num_seqs = 3;
  check_passes(s, {"ext:simple_decode_abi1_0"});
  auto c = generate_case(s);
  REQUIRE(c.ok());
  const Outcome o = run_path(*c, "ext:simple_decode_abi1_0");
  CHECK(o.run.notes.at("abi") == "1.0");
  CHECK(o.run.notes.count("plan_workspace_bytes") == 0);
}

// ABI 1.2's features (external.h, "FEATURES OF ABI 1.2") never reach a library
// of an older minor, nor an entry that does not declare them, loaded for real.
TEST_CASE("external: sinks, ALiBi and latent cases are n/a for an ABI 1.0 library and for undeclared entries") {
  auto s = decode_spec("ext-features", 1801);
  s.seq_len_list = {17, 300};
  s.num_seqs = 2;
  auto sinks_spec = s;
  sinks_spec.sinks = true;
  auto alibi_spec = s;
  alibi_spec.alibi = true;
  auto latent_spec = s;
  latent_spec.latent = true, latent_spec.kv_heads = 1, latent_spec.q_heads = 16;
  latent_spec.head_dim = 576, latent_spec.v_head_dim = 512, latent_spec.scale = 0.07;
  for (const auto* spec : {&sinks_spec, &alibi_spec, &latent_spec}) {
    auto c = generate_case(*spec);
    REQUIRE(c.ok());
    const Applicability old = external_registry().find("ext:simple_decode_abi1_0")->applies(*c);
    CHECK_FALSE(old.applies);
    CHECK_MESSAGE(old.reason.find("ABI 1.0") != std::string::npos, old.reason);
    const Applicability current = external_registry().find("ext:simple_decode")->applies(*c);
    CHECK_FALSE(current.applies);
    CHECK_MESSAGE(current.reason.find("PAGECHECK_FEATURE_") != std::string::npos, current.reason);
  }
}

// FlashInfer's paged kernels through the adapter (examples/external/flashinfer),
// when it was built (-DPAGECHECK_FLASHINFER_INCLUDE_DIR): both entries pass
// every check against the reference over dtypes (FP8 caches in the decode),
// head dims, layouts, tables, page sizes, GQA ratios, window, softcap, scales
// and causality.
TEST_CASE("external: FlashInfer's decode and prefill through the adapter") {
  const std::string file = library("flashinfer/libpagecheck_flashinfer.so");
  if (!fs::exists(file)) {
    MESSAGE("not built (configure with -DPAGECHECK_FLASHINFER_INCLUDE_DIR): " << file);
    return;
  }
  static PathRegistry registry = [&] {
    PathRegistry r;
    auto paths = gpu::load_external_kernels(file);
    REQUIRE_MESSAGE(paths.ok(), (paths.ok() ? "" : paths.error().describe()));
    for (auto& p : *paths) r.add(std::move(p));
    return r;
  }();
  std::uint64_t seed = 2000;
  int variant = 0;
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (std::int64_t dim : {64, 128, 256}) {
      for (QueryMode mode : {QueryMode::Decode, QueryMode::Chunked}) {
        auto s = decode_spec(fmt::format("ext-flashinfer-{}-d{}-{}", dtype_name(dtype), dim, static_cast<int>(mode)),
                             seed++);
        s.query_dtype = s.kv_dtype = dtype;
        s.head_dim = dim;
        s.query_mode = mode;
        s.seq_len_list = {1, 15, 16, 17, 300, 1000};
        s.num_seqs = 6;
        if (mode == QueryMode::Chunked) {
          s.q_len_dist = LengthDist::List;
          s.q_len_list = {1, 3, 16, 17, 40, 100};
        }
        switch (variant++ % 4) {
          case 0: s.block_size = 7; s.layout = KvLayout::HND; break;
          case 1: s.block_size = 1; s.table_form = TableForm::Csr; s.sliding_window = 100; s.kv_heads = 8; break;
          case 2:
            s.block_size = 16;
            s.softcap = 30.0;
            s.k_scale = 0.5;
            s.v_scale = 2.0;
            s.kv_heads = 1;
            // The decode also takes an FP8 cache (the prefill entry declines it).
            if (mode == QueryMode::Decode) s.kv_dtype = dim == 128 ? DType::F8_E4M3 : DType::F8_E5M2;
            break;
          default: s.block_size = 32; s.causal = false; s.kv_heads = 4; break;
        }
        auto c = generate_case(s);
        REQUIRE_MESSAGE(c.ok(), (describe_spec(s) + ": " + (c.ok() ? "" : c.error().describe())));
        auto ref = reference_attention(*c);
        REQUIRE(ref.ok());
        for (const char* name : {"ext:flashinfer_decode", "ext:flashinfer_prefill"}) {
          INFO(describe_spec(s) << " path " << name);
          Path* path = registry.find(name);
          REQUIRE(path != nullptr);
          const Applicability a = path->applies(*c);
          if (!a.applies) {
            // Only these decline: the decode a chunked case, the prefill an FP8 cache.
            const bool expected = std::string(name) == "ext:flashinfer_decode" ? mode == QueryMode::Chunked
                                                                                : s.kv_dtype != s.query_dtype;
            CHECK_MESSAGE(expected, a.reason);
            continue;
          }
          auto run = path->run(*c, correctness_options());
          REQUIRE_MESSAGE(run.ok(), (run.ok() ? "" : run.error().describe()));
          std::string failures;
          for (const auto& f : run->check_failures) failures += f + "\n";
          CHECK_MESSAGE(run->check_failures.empty(), failures);
          CHECK(run->unwritten == 0);
          const ErrorStats out = compare(*c, run->output, ref->output, c->v_head_dim(),
                                         default_tolerance(c->query.dtype, c->key_cache.dtype), false, ref->lse);
          const ErrorStats lse = compare(*c, run->lse, ref->lse, 1, default_lse_tolerance(c->query.dtype, c->key_cache.dtype));
          CHECK_MESSAGE(out.mismatches == 0, fmt::format("output: {} of {} mismatches, max abs err {:.3g}",
                                                         out.mismatches, out.elements, out.max_abs_err));
          CHECK_MESSAGE(lse.mismatches == 0, fmt::format("LSE: {} mismatches, max abs err {:.3g}", lse.mismatches,
                                                         lse.max_abs_err));
        }
      }
    }
  }
}
