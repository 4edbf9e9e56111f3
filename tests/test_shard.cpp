// Sharding and merging: the partition of --shard, the JSON report reader
// (round trip through the writer) and merge_reports (order, completeness,
// the errors and warnings).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>

#include "pagecheck/report_read.hpp"
#include "pagecheck/shard.hpp"

using namespace pagecheck;

namespace {

PathReport path(std::string name, PathStatus status, std::string reason = {}) {
  PathReport p;
  p.path = std::move(name);
  p.status = status;
  p.reason = std::move(reason);
  p.tolerance = {1e-2, 2e-2};
  return p;
}

ErrorStats stats(double max_abs, std::int64_t mismatches) {
  ErrorStats e;
  e.max_abs_err = max_abs;
  e.max_rel_err = max_abs * 2;
  e.rel_l2_err = max_abs / 3;
  e.mismatches = mismatches;
  e.nonfinite = 0;
  e.elements = 1024;
  e.worst = {1, 2, 3, 4};
  e.worst_value = 0.5;
  e.worst_reference = 0.25;
  return e;
}

// Case k of a run of `total`: a mix of every shape a report can hold.
CaseReport make_case(std::int64_t k) {
  CaseReport c;
  c.index = k;
  c.name = "case-" + std::to_string(k);
  c.description = "covering: k=" + std::to_string(k);
  c.geometry = "4 seqs, d128";
  if (k % 5 == 4) {
    c.errors.push_back("block_table[0][1] = 99 but the cache has 4 blocks");
    return c;
  }
  if (k % 3 == 0) c.warnings.push_back("a NaN in the unused pages");
  PathReport ref = path("reference", PathStatus::Pass);
  StageTiming t;
  t.stage = "total";
  t.median_ms = 1.5 + static_cast<double>(k);
  t.min_ms = 1.25;
  t.max_ms = 2.5;
  t.repeats = 3;
  ref.timings.push_back(t);
  c.paths.push_back(ref);
  PathReport direct = path("direct", k % 4 == 1 ? PathStatus::Fail : PathStatus::Pass,
                           k % 4 == 1 ? "output: 3 of 1024 elements beyond atol" : "");
  direct.error = stats(k % 4 == 1 ? 0.75 : 1e-3, k % 4 == 1 ? 3 : 0);
  direct.lse_error = stats(1e-5, 0);
  direct.unwritten = k % 4 == 1 ? 2 : 0;
  t.bytes = 1e9;
  t.flops = 2e12;
  t.graph_replay_ms = 1.0;
  direct.timings.push_back(t);
  direct.plan = "direct";
  direct.notes["kernel"] = "mma.sync";
  if (k % 4 == 1) direct.check_failures.push_back("repeatability: run 2 differs");
  c.paths.push_back(direct);
  PathReport split = path("split", PathStatus::Skipped, "no CUDA device");
  if (k == 2) {
    // Non-finite measures are null in JSON and come back as inf / NaN.
    split = path("split", PathStatus::Fail, "NaN in the output");
    split.error = stats(std::numeric_limits<double>::infinity(), 7);
    split.error->nonfinite = 7;
    split.error->worst_value = std::numeric_limits<double>::quiet_NaN();
    split.recorded = stats(0.01, 1);
    split.recorded_lse = stats(0.001, 0);
  }
  if (k == 3) {
    split.recorded_lse = stats(0.002, 0);  // an LSE recorded without an output
  }
  c.paths.push_back(split);
  return c;
}

RunReport make_run(std::int64_t total, std::optional<ShardInfo> shard = std::nullopt) {
  RunReport r;
  r.tool_version = "0.1.0";
  r.command_line = "pagecheck run --no-timing --json all.json";
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.multiprocessors = 132;
  d.copy_gb_per_s = 3900;
  d.read_gb_per_s = 4500;
  d.matmul_tflop_per_s = 700;
  r.device = d;
  if (shard) {
    shard->cases_total = total;
    r.shard = shard;
    r.command_line = "pagecheck run --no-timing --shard " + shard_label(*shard) + " --json s" +
                     std::to_string(shard->index) + ".json";
  }
  for (std::int64_t k = 0; k < total; ++k)
    if (!shard || in_shard(k, *shard)) r.cases.push_back(make_case(k));
  return r;
}

RunReport round_trip(const RunReport& r) {
  auto back = report_from_json(to_json(r), "test.json");
  REQUIRE_MESSAGE(back.ok(), back.error().describe());
  return *back;
}

std::string merge_error(const std::vector<MergeInput>& inputs, const MergeOptions& options = {}) {
  auto merged = merge_reports(inputs, options);
  REQUIRE_FALSE(merged.ok());
  CHECK(merged.error().code == ErrorCode::InvalidInput);
  return merged.error().describe();
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

}  // namespace

TEST_CASE("--shard I/N: parsed 0-based, refused with the reason") {
  auto s = parse_shard("1/4");
  REQUIRE(s.ok());
  CHECK(s->index == 1);
  CHECK(s->count == 4);
  CHECK(parse_shard("0/1").ok());
  for (const char* bad : {"3/2", "2/2", "-1/2", "1/0", "x", "1", "1/", "/2", "1/2/3", "1.0/2", " 1/2"}) {
    CAPTURE(bad);
    const auto r = parse_shard(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::Usage);
  }
  CHECK(contains(parse_shard("3/2").error().message, "I must be < N"));
  CHECK(contains(parse_shard("1/0").error().message, "N must be at least 1"));
}

TEST_CASE("the shards of a case list partition it exactly, balanced") {
  for (std::int64_t total : {0, 1, 2, 7, 80, 101}) {
    for (int count : {1, 2, 3, 4, 8, 13}) {
      CAPTURE(total);
      CAPTURE(count);
      std::vector<int> owner(static_cast<std::size_t>(total), -1);
      std::size_t smallest = static_cast<std::size_t>(total) + 1, largest = 0;
      for (int i = 0; i < count; ++i) {
        const ShardInfo s{i, count, total};
        const auto picked = shard_indices(total, s);
        smallest = std::min(smallest, picked.size());
        largest = std::max(largest, picked.size());
        CHECK(std::is_sorted(picked.begin(), picked.end()));
        for (const auto k : picked) {
          REQUIRE(k >= 0);
          REQUIRE(k < total);
          CHECK(in_shard(k, s));
          CHECK(owner[static_cast<std::size_t>(k)] == -1);  // no overlap
          owner[static_cast<std::size_t>(k)] = i;
        }
      }
      CHECK(std::count(owner.begin(), owner.end(), -1) == 0);  // nothing left out
      CHECK(largest - smallest <= 1);
    }
  }
}

TEST_CASE("a report read back writes the same JSON") {
  const RunReport r = make_run(12);
  const RunReport back = round_trip(r);
  CHECK(to_json(back) == to_json(r));
  CHECK(to_csv(back) == to_csv(r));
  CHECK(to_junit(back) == to_junit(r));
  CHECK(report_exit_code(back) == report_exit_code(r));
  // The non-finite measures: null in JSON, +inf / NaN again.
  REQUIRE(back.cases[2].paths[2].error);
  CHECK(std::isinf(back.cases[2].paths[2].error->max_abs_err));
  CHECK(std::isnan(back.cases[2].paths[2].error->worst_value));
  CHECK(back.cases[2].paths[2].recorded_lse);
  CHECK_FALSE(back.cases[3].paths[2].recorded);
  CHECK(back.cases[3].paths[2].recorded_lse);
  // A sharded one keeps its shard.
  const RunReport shard = round_trip(make_run(12, ShardInfo{1, 3, 0}));
  REQUIRE(shard.shard);
  CHECK(shard.shard->index == 1);
  CHECK(shard.shard->count == 3);
  CHECK(shard.shard->cases_total == 12);
  CHECK(contains(to_junit(shard), "<property name=\"shard\" value=\"1/3\"/>"));
}

TEST_CASE("an interrupted report reads back interrupted, and its shards merge") {
  RunReport r = make_run(12, ShardInfo{1, 3, 0});
  r.cases.pop_back();  // the shard's last case was in flight
  Interruption i;
  i.signal = "SIGTERM";
  i.case_index = 10;
  i.case_name = "case-10";
  i.step = "direct";
  i.cases_finished = static_cast<std::int64_t>(r.cases.size());
  i.cases_selected = 4;
  r.interrupted = i;
  r.errors.push_back(describe_interruption(i));
  CHECK(r.errors.back() == "interrupted by SIGTERM during case case-10 (direct): 3 of 4 cases finished, 1 not run");
  const RunReport back = round_trip(r);
  REQUIRE(back.interrupted);
  CHECK(back.interrupted->signal == "SIGTERM");
  CHECK(back.interrupted->case_index == 10);
  CHECK(back.interrupted->case_name == "case-10");
  CHECK(back.interrupted->step == "direct");
  CHECK(back.interrupted->cases_finished == 3);
  CHECK(back.interrupted->cases_selected == 4);
  CHECK(to_json(back) == to_json(r));
  // Between cases: no case named.
  Interruption between;
  between.signal = "SIGINT";
  between.cases_finished = between.cases_selected = 2;
  CHECK(describe_interruption(between) == "interrupted by SIGINT between cases: 2 of 2 cases finished, 0 not run");
  // A report without the field (written before it existed) is not interrupted.
  nlohmann::json old = to_json(make_run(3));
  old.erase("interrupted");
  auto read = report_from_json(old, "old.json");
  REQUIRE(read.ok());
  CHECK_FALSE(read->interrupted);
  // The interrupted shard lacks a case of its share and still merges.
  std::vector<MergeInput> inputs = {{"s0.json", round_trip(make_run(12, ShardInfo{0, 3, 0}))},
                                    {"s1.json", back},
                                    {"s2.json", round_trip(make_run(12, ShardInfo{2, 3, 0}))}};
  auto merged = merge_reports(inputs);
  REQUIRE_MESSAGE(merged.ok(), merged.error().describe());
  CHECK(merged->report.cases.size() == 11);
  REQUIRE(merged->report.interrupted);
  CHECK(merged->report.interrupted->case_name == "case-10");
}

TEST_CASE("the shards of a run merge into the single run's report") {
  const std::int64_t total = 23;
  const RunReport single = make_run(total);
  for (int count : {1, 2, 3, 5}) {
    CAPTURE(count);
    std::vector<MergeInput> inputs;
    // Given in any order: the cases come back in the run's order.
    for (int i = count - 1; i >= 0; --i)
      // (fmt, not "s" + std::to_string(i): g++ 12 warns -Wrestrict there, a false positive.)
      inputs.push_back({fmt::format("s{}.json", i), round_trip(make_run(total, ShardInfo{i, count, 0}))});
    auto merged = merge_reports(inputs);
    REQUIRE_MESSAGE(merged.ok(), merged.error().describe());
    CHECK(merged->warnings.empty());
    nlohmann::json got = to_json(merged->report), want = to_json(single);
    // The command is the shards' without --shard (their report files differ).
    CHECK(got["command"] == "pagecheck run --no-timing --json s0.json");
    got.erase("command");
    want.erase("command");
    CHECK(got == want);
    CHECK(report_exit_code(merged->report) == report_exit_code(single));
    CHECK_FALSE(merged->report.shard);
  }
}

TEST_CASE("merge refuses what is not one set of shards, naming the files") {
  const auto shard = [](int i, int n, std::int64_t total = 10) {
    return MergeInput{fmt::format("s{}of{}.json", i, n),
                      make_run(total, ShardInfo{i, n, 0})};
  };
  CHECK(contains(merge_error({shard(0, 4), shard(2, 4)}), "shards 0, 2 of 4 given; missing 1, 3"));
  CHECK(contains(merge_error({shard(1, 2), shard(1, 2)}), "shard 1/2 given twice: s1of2.json and s1of2.json"));
  CHECK(contains(merge_error({shard(0, 2), shard(1, 3)}), "not one sharded run"));
  CHECK(contains(merge_error({shard(0, 2, 10), shard(1, 2, 11)}), "not one sharded run"));
  CHECK(contains(merge_error({shard(0, 2), {"all.json", make_run(10)}}), "s0of2.json is shard 0/2 but all.json is not sharded"));
  // A shard that lost a case, or holds one of another shard.
  MergeInput short_one = shard(1, 2);
  short_one.report.cases.pop_back();
  CHECK(contains(merge_error({shard(0, 2), short_one}), "shard 1/2 lacks case 9 of its share"));
  MergeInput stray = shard(1, 2);
  stray.report.cases.push_back(make_case(4));
  CHECK(contains(merge_error({shard(0, 2), stray}), "has index 4, which is not in shard 1/2"));
  // Unsharded reports: a case in two of them.
  CHECK(contains(merge_error({{"a.json", make_run(3)}, {"b.json", make_run(2)}}), "case 'case-0' is in both a.json and b.json"));
  CHECK(merge_reports({}).error().code == ErrorCode::Usage);

  // --allow-missing-shards: a warning, and the cases there are.
  MergeOptions allow;
  allow.allow_missing_shards = true;
  auto partial = merge_reports({shard(0, 3), shard(2, 3)}, allow);
  REQUIRE(partial.ok());
  REQUIRE(partial->warnings.size() == 1);
  CHECK(contains(partial->warnings[0], "missing 1"));
  CHECK(partial->report.cases.size() == 7);
}

TEST_CASE("merge of separate runs keeps their order; different settings warn") {
  RunReport a = make_run(3);
  RunReport b;
  b.tool_version = "0.1.0";
  b.command_line = "pagecheck replay x.safetensors --atol 0.5";
  b.cases.push_back(make_case(0));
  b.cases.back().name = "x";
  b.errors.push_back("a run error");
  b.fail_on_skip = true;
  auto merged = merge_reports({{"a.json", a}, {"b.json", b}}, MergeOptions{false, "", "pagecheck merge a.json b.json"});
  REQUIRE(merged.ok());
  const auto& r = merged->report;
  REQUIRE(r.cases.size() == 4);
  CHECK(r.cases[3].name == "x");
  CHECK(r.cases[3].index == 3);
  CHECK(r.fail_on_skip);
  CHECK(r.errors == std::vector<std::string>{"a run error"});
  CHECK(report_exit_code(r) == exit_code::kRuntime);
  CHECK(r.command_line == "pagecheck merge a.json b.json");  // the commands differ
  std::string all;
  for (const auto& w : merged->warnings) all += w + "\n";
  CHECK(contains(all, "different commands"));
  CHECK(contains(all, "different devices"));
  CHECK(contains(all, "--fail-on-skip"));
}

TEST_CASE("the reader names what is wrong with a file") {
  const nlohmann::json good = to_json(make_run(2));
  const auto error_of = [](const nlohmann::json& j) {
    auto r = report_from_json(j, "r.json");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::InvalidInput);
    return r.error().describe();
  };
  CHECK(contains(error_of(nlohmann::json::array()), "r.json: not a pagecheck report"));
  CHECK(contains(error_of({{"tool", "other"}}), "not a pagecheck report"));
  nlohmann::json j = good;
  j["schema"] = 2;
  CHECK(contains(error_of(j), "report schema 2; this pagecheck"));
  j.erase("schema");
  CHECK(contains(error_of(j), "without a \"schema\" field"));
  j = good;
  j["cases"][1]["paths"][0]["status"] = "meh";
  CHECK(contains(error_of(j), "cases[1].paths[0].status: 'meh' is not a status"));
  j = good;
  j["cases"][0].erase("name");
  CHECK(contains(error_of(j), "cases[0]: missing field 'name'"));
  j = good;
  j["cases"][0]["paths"][1]["mismatches"] = "three";
  CHECK(contains(error_of(j), "cases[0].paths[1].mismatches: expected an integer"));
  j = good;
  j["shard"] = {{"index", 3}, {"count", 2}, {"cases_total", 4}};
  CHECK(contains(error_of(j), "shard: 3/2 of 4 cases is not a shard"));
  CHECK(read_json_report("/nonexistent/r.json").error().code == ErrorCode::InvalidInput);
}

TEST_CASE("split_command_line undoes pagecheck's quoting") {
  CHECK(split_command_line("pagecheck replay 'a b.safetensors' 'it'\\''s' --json r.json") ==
        std::vector<std::string>{"pagecheck", "replay", "a b.safetensors", "it's", "--json", "r.json"});
  CHECK(split_command_line("pagecheck run --name ''") == std::vector<std::string>{"pagecheck", "run", "--name", ""});
}
