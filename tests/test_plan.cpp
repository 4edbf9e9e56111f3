// The plan: parsing, the default heuristic, tuning files and their use.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "pagecheck/plan.hpp"

using namespace pagecheck;

namespace {

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("pagecheck_test_plan_" + name);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

PlanRequest benchmark_request(std::int64_t num_seqs, std::int64_t context) {
  PlanRequest r;
  r.max_context_tokens = context;
  r.query_heads = 32;
  r.kv_heads = 8;
  r.head_dim = 128;
  r.value_head_dim = 128;
  r.num_seqs = num_seqs;
  r.multiprocessors = 132;
  return r;
}

}  // namespace

TEST_CASE("parse_plan accepts direct and split:P:T") {
  auto direct = parse_plan("direct");
  REQUIRE(direct.ok());
  CHECK(direct->kind == PlanKind::Direct);
  CHECK(direct->source == PlanSource::Explicit);
  CHECK(direct->to_string() == "direct");
  CHECK(direct->source_name() == "explicit");

  auto split = parse_plan("split:512:2048");
  REQUIRE(split.ok());
  CHECK(split->kind == PlanKind::SplitKv);
  CHECK(split->partition_tokens == 512);
  CHECK(split->threshold_tokens == 2048);
  CHECK(split->to_string() == "split:512:2048");

  auto zero_threshold = parse_plan("split:256:0");
  REQUIRE(zero_threshold.ok());
  CHECK(zero_threshold->threshold_tokens == 0);
}

TEST_CASE("parse_plan rejects malformed plans with a message naming the part at fault") {
  struct Bad {
    const char* text;
    const char* expected_fragment;
  };
  const Bad bad[] = {
      {"", "unknown plan"},
      {"Direct", "unknown plan"},
      {"splat:1:2", "unknown plan"},
      {"split", "lacks its sizes"},
      {"split:512", "lacks THRESHOLD_TOKENS"},
      {"split:0:10", "PARTITION_TOKENS '0'"},
      {"split:-5:10", "PARTITION_TOKENS '-5'"},
      {"split:abc:10", "PARTITION_TOKENS 'abc'"},
      {"split:512:x", "THRESHOLD_TOKENS 'x'"},
      {"split:512:-1", "THRESHOLD_TOKENS '-1'"},
      {"split:512:2048:7", "THRESHOLD_TOKENS '2048:7'"},
      {"split:99999999999999999999:1", "PARTITION_TOKENS"},
      {"split:4194304:1", "above the limit"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.text);
    auto plan = parse_plan(b.text);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error().code == ErrorCode::Usage);
    CHECK(plan.error().message.find(b.expected_fragment) != std::string::npos);
  }
}

TEST_CASE("default plan: direct when the grid fills the device, split when it does not") {
  // The benchmark shapes of issue 3.
  const Plan p64 = choose_plan(benchmark_request(64, 4096), nullptr);
  CHECK(p64.kind == PlanKind::Direct);
  CHECK(p64.source == PlanSource::Default);
  CHECK(choose_plan(benchmark_request(256, 1024), nullptr).kind == PlanKind::Direct);

  const Plan p1 = choose_plan(benchmark_request(1, 32768), nullptr);
  REQUIRE(p1.kind == PlanKind::SplitKv);
  // The partitions measured fastest on the H200 (plan.cpp): 1024 at
  // 1 x 32768 (256 CTAs, within 1/32 of two waves) and at 8 x 8192.
  CHECK(p1.partition_tokens == 1024);
  CHECK(p1.threshold_tokens == 1024);
  const Plan p8 = choose_plan(benchmark_request(8, 8192), nullptr);
  CHECK(p8.kind == PlanKind::SplitKv);
  CHECK(p8.partition_tokens == 1024);
  // Batch 1, shorter contexts: the partition shrinks to keep ~two waves
  // (16384 -> 512, 8192 -> 256, never below 256).
  CHECK(choose_plan(benchmark_request(1, 16384), nullptr).partition_tokens == 512);
  CHECK(choose_plan(benchmark_request(1, 8192), nullptr).partition_tokens == 256);
  CHECK(choose_plan(benchmark_request(1, 2048), nullptr).partition_tokens == 256);
  // Many partitions never push the partition above 1024.
  CHECK(choose_plan(benchmark_request(16, 32768), nullptr).partition_tokens == 1024);
  // A short context never splits, however few sequences.
  CHECK(choose_plan(benchmark_request(1, 200), nullptr).kind == PlanKind::Direct);
}

TEST_CASE("default plan for a kernel of one CTA a multiprocessor (latent MLA): direct from one wave") {
  // 128 query heads over one latent head: two 64-head CTAs a sequence.
  const auto mla = [](std::int64_t num_seqs, std::int64_t context) {
    PlanRequest r = benchmark_request(num_seqs, context);
    r.query_heads = 128;
    r.kv_heads = 1;
    r.head_dim = 576;
    r.value_head_dim = 512;
    r.direct_ctas = num_seqs * 2;
    r.one_cta_per_multiprocessor = true;
    return r;
  };
  // 64 x 4096: 128 CTAs, within 1/32 of one wave (0.199 ms direct against
  // 0.312 split on an H100); the GQA model would split 64 CTAs.
  CHECK(choose_plan(mla(64, 4096), nullptr).kind == PlanKind::Direct);
  PlanRequest gqa_model = mla(64, 4096);
  gqa_model.direct_ctas = 0;
  gqa_model.one_cta_per_multiprocessor = false;
  CHECK(choose_plan(gqa_model, nullptr).kind == PlanKind::SplitKv);
  // 8 x 4096: 16 CTAs; 512-token partitions make 128, one wave.
  const Plan p8 = choose_plan(mla(8, 4096), nullptr);
  REQUIRE(p8.kind == PlanKind::SplitKv);
  CHECK(p8.partition_tokens == 512);
  CHECK(p8.threshold_tokens == 512);
  // 32 x 8192: 64 CTAs; 1024-token partitions make 512.
  CHECK(choose_plan(mla(32, 8192), nullptr).partition_tokens == 1024);
  // The GQA kernels' requests do not move: direct_ctas counts as given.
  PlanRequest given = mla(64, 4096);
  given.one_cta_per_multiprocessor = false;
  given.direct_ctas = 264;
  CHECK(choose_plan(given, nullptr).kind == PlanKind::Direct);
  given.direct_ctas = 263;
  CHECK(choose_plan(given, nullptr).kind == PlanKind::SplitKv);
}

TEST_CASE("tuning file round trip") {
  TuningTable table;
  table.device_name = "NVIDIA H200";
  table.entries.push_back({32, 8, 128, 128, 1, 512, 2048, {}});
  table.entries.push_back({32, 8, 128, 128, 64, 1024, 0, {}});
  table.entries.push_back({64, 8, 192, 128, 0, 256, 4096, {}});
  table.entries[0].partition_by_context = {{4096, 256}, {32768, 1024}};
  const auto path = temp_file("roundtrip.json");
  REQUIRE(write_tuning_file(path.string(), table).ok());
  auto read = read_tuning_file(path.string());
  REQUIRE(read.ok());
  CHECK(read->device_name == table.device_name);
  REQUIRE(read->entries.size() == table.entries.size());
  for (std::size_t i = 0; i < table.entries.size(); ++i) {
    const auto& a = table.entries[i];
    const auto& b = read->entries[i];
    CHECK(a.query_heads == b.query_heads);
    CHECK(a.kv_heads == b.kv_heads);
    CHECK(a.head_dim == b.head_dim);
    CHECK(a.value_head_dim == b.value_head_dim);
    CHECK(a.num_seqs == b.num_seqs);
    CHECK(a.partition_tokens == b.partition_tokens);
    CHECK(a.threshold_tokens == b.threshold_tokens);
    CHECK(a.partition_by_context == b.partition_by_context);
  }
  std::filesystem::remove(path);
}

TEST_CASE("tuning file validation names the field at fault") {
  const auto path = temp_file("bad.json");
  struct Bad {
    const char* text;
    const char* expected_fragment;
  };
  const std::string head = R"({"format": "pagecheck-tuning", "version": 1, "device": "x", "entries": )";
  const std::string good_entry =
      R"({"query_heads": 32, "kv_heads": 8, "head_dim": 128, "value_head_dim": 128, "num_seqs": 1, "partition_tokens": 512, "threshold_tokens": 2048})";
  const std::string cases[][2] = {
      {"{not json", "not valid JSON"},
      {"[1, 2]", "JSON object"},
      {R"({"format": "other", "version": 1, "entries": []})", "format must be"},
      {R"({"format": "pagecheck-tuning", "version": 7, "entries": []})", "version must be 1"},
      {R"({"format": "pagecheck-tuning", "version": 1})", "entries must be an array"},
      {head + "[" + good_entry + ", 5]}", "entries[1] must be an object"},
      {head + R"([{"query_heads": 32, "kv_heads": 8, "head_dim": 128, "value_head_dim": 128, "num_seqs": 1, "threshold_tokens": 2048}]})",
       "entries[0].partition_tokens is missing"},
      {head + R"([{"query_heads": 32, "kv_heads": 8, "head_dim": 128, "value_head_dim": 128, "num_seqs": 1, "partition_tokens": "512", "threshold_tokens": 2048}]})",
       "entries[0].partition_tokens must be an integer"},
      {head + "[" + good_entry + R"(, {"query_heads": 32, "kv_heads": 8, "head_dim": 128, "value_head_dim": 128, "num_seqs": 1, "partition_tokens": 0, "threshold_tokens": 2048}]})",
       "entries[1].partition_tokens must be at least 1, got 0"},
      {head + R"([{"query_heads": 32, "kv_heads": 8, "head_dim": 128, "value_head_dim": 128, "num_seqs": 1, "partition_tokens": 512, "threshold_tokens": 2048, "partition_by_context": [[4096, 256], [1024, 512]]}]})",
       "entries[0].partition_by_context[1]: contexts must be positive and ascending, got 1024 after 4096"},
      {head + R"([{"query_heads": 32, "kv_heads": 8, "head_dim": 128, "value_head_dim": 128, "num_seqs": 1, "partition_tokens": 512, "threshold_tokens": 2048, "partition_by_context": [[4096]]}]})",
       "entries[0].partition_by_context[0] must be a pair of integers"},
      {head + R"([{"query_heads": 30, "kv_heads": 8, "head_dim": 128, "value_head_dim": 128, "num_seqs": 1, "partition_tokens": 512, "threshold_tokens": 2048}]})",
       "entries[0].query_heads 30 is not a multiple of kv_heads 8"},
  };
  for (const auto& c : cases) {
    CAPTURE(c[0]);
    write_text(path, c[0]);
    auto read = read_tuning_file(path.string());
    REQUIRE_FALSE(read.ok());
    CHECK(read.error().code == ErrorCode::InvalidInput);
    CHECK(read.error().where == path.string());
    CHECK(read.error().message.find(c[1]) != std::string::npos);
  }
  std::filesystem::remove(path);
  auto missing = read_tuning_file(path.string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("cannot open") != std::string::npos);
}

TEST_CASE("choose_plan uses the tuned entry nearest in batch size") {
  TuningTable table;
  table.device_name = "test";
  table.entries.push_back({32, 8, 128, 128, 1, 1024, 4096, {}});  // batch 1: split past 4096
  table.entries.push_back({32, 8, 128, 128, 64, 512, 0, {}});     // batch 64: split never wins

  const Plan small = choose_plan(benchmark_request(2, 32768), &table);
  CHECK(small.source == PlanSource::Tuned);
  REQUIRE(small.kind == PlanKind::SplitKv);
  CHECK(small.partition_tokens == 1024);
  CHECK(small.threshold_tokens == 4096);
  CHECK(small.to_string() == "split:1024:4096");
  CHECK(small.source_name() == "tuned");

  // Below the tuned threshold: direct, still from the tuning.
  const Plan short_context = choose_plan(benchmark_request(1, 2048), &table);
  CHECK(short_context.kind == PlanKind::Direct);
  CHECK(short_context.source == PlanSource::Tuned);

  // Batch 24 is nearer 64 than 1 (log scale): the tuned "never split" wins
  // over the heuristic, which splits 24 x 32768 (192 CTAs, under two waves).
  const Plan large = choose_plan(benchmark_request(24, 32768), &table);
  CHECK(large.source == PlanSource::Tuned);
  CHECK(large.kind == PlanKind::Direct);
  CHECK(choose_plan(benchmark_request(24, 32768), nullptr).kind == PlanKind::SplitKv);

  // Other heads or dims: no entry, the default heuristic.
  PlanRequest other = benchmark_request(1, 32768);
  other.head_dim = 64;
  other.value_head_dim = 64;
  const Plan fallback = choose_plan(other, &table);
  CHECK(fallback.source == PlanSource::Default);
  CHECK(fallback.kind == PlanKind::SplitKv);

  // Partition by context: the smallest measured context at or above the
  // request's, else the longest.
  TuningTable by_context;
  by_context.entries.push_back({32, 8, 128, 128, 1, 512, 256, {}});
  by_context.entries[0].partition_by_context = {{4096, 256}, {16384, 512}, {32768, 1024}};
  CHECK(choose_plan(benchmark_request(1, 3000), &by_context).partition_tokens == 256);
  CHECK(choose_plan(benchmark_request(1, 16384), &by_context).partition_tokens == 512);
  CHECK(choose_plan(benchmark_request(1, 20000), &by_context).partition_tokens == 1024);
  CHECK(choose_plan(benchmark_request(1, 100000), &by_context).partition_tokens == 1024);
  CHECK(choose_plan(benchmark_request(1, 200), &by_context).kind == PlanKind::Direct);  // under the threshold
}
