// compare (pagecheck/compare.hpp) and what it stands on: the timing spread
// (timing_stats.hpp), the case content hash (content_hash.hpp), both through
// the JSON report and back, and the pairing, noise rule, verdicts, refusals
// and renderings of compare_reports, on report files the library writes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pagecheck/compare.hpp"
#include "pagecheck/content_hash.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/report_read.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/timing_stats.hpp"
#include "scratch_dir.hpp"

using namespace pagecheck;

namespace {

const test::ScratchDir& scratch() {
  static const test::ScratchDir dir("compare");
  return dir;
}

StageTiming timing(double median, std::optional<double> iqr, int repeats = 20) {
  StageTiming t;
  t.stage = "total";
  t.median_ms = median;
  t.min_ms = median * 0.9;
  t.max_ms = median * 1.2;
  t.repeats = repeats;
  if (iqr) {
    t.q1_ms = median - *iqr / 2;
    t.q3_ms = median + *iqr / 2;
  }
  return t;
}

PathReport path(std::string name, PathStatus status, std::optional<double> max_abs, std::optional<StageTiming> t) {
  PathReport p;
  p.path = std::move(name);
  p.status = status;
  p.tolerance = {1e-2, 2e-2};
  if (status == PathStatus::Fail) p.reason = "output: 3 mismatches";
  if (max_abs) {
    ErrorStats e;
    e.max_abs_err = *max_abs;
    e.max_rel_err = *max_abs;
    e.rel_l2_err = *max_abs / 4;
    e.mismatches = status == PathStatus::Fail ? 3 : 0;
    e.elements = 1024;
    e.worst = {0, 0, 1, 2};
    p.error = e;
  }
  if (t) p.timings.push_back(*t);
  return p;
}

CaseReport case_report(std::string name, std::string hash, std::vector<PathReport> paths) {
  CaseReport c;
  c.name = std::move(name);
  c.content_hash = std::move(hash);
  c.geometry = "4 seqs, 8/2 heads, d128, bs16, BF16/BF16, NHD, decode";
  c.paths = std::move(paths);
  return c;
}

RunReport run_report(std::vector<CaseReport> cases, std::string command = "pagecheck run --json r.json") {
  RunReport r;
  r.tool_version = "1.0.0";
  r.command_line = std::move(command);
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.multiprocessors = 132;
  d.copy_gb_per_s = 3900;
  d.read_gb_per_s = 4300;
  d.matmul_tflop_per_s = 700;
  r.device = d;
  for (std::size_t i = 0; i < cases.size(); ++i) cases[i].index = static_cast<std::int64_t>(i);
  r.cases = std::move(cases);
  return r;
}

// Written as a run writes it and read back as compare reads it.
RunReport through_file(const RunReport& r, const std::string& name) {
  const std::string file = (scratch().path / name).string();
  REQUIRE(write_json(file, r).ok());
  auto back = read_json_report(file);
  REQUIRE_MESSAGE(back.ok(), back.error().describe());
  return *back;
}

Comparison compare_files(const RunReport& base, const RunReport& now, const CompareOptions& options = {}) {
  auto cmp = compare_reports(through_file(base, "base.json"), "base.json", through_file(now, "new.json"), "new.json",
                             options);
  REQUIRE_MESSAGE(cmp.ok(), cmp.error().describe());
  return *cmp;
}

const CaseComparison& find_case(const Comparison& cmp, const std::string& name) {
  const auto it = std::find_if(cmp.cases.begin(), cmp.cases.end(), [&](const auto& c) { return c.name == name; });
  REQUIRE_MESSAGE(it != cmp.cases.end(), "no case " << name);
  return *it;
}

const PathComparison& find_path(const Comparison& cmp, const std::string& c, const std::string& p) {
  const CaseComparison& cc = find_case(cmp, c);
  const auto it = std::find_if(cc.paths.begin(), cc.paths.end(), [&](const auto& x) { return x.path == p; });
  REQUIRE_MESSAGE(it != cc.paths.end(), "no path " << p << " in " << c);
  return *it;
}

bool has(const std::vector<Verdict>& verdicts, Verdict v) {
  return std::find(verdicts.begin(), verdicts.end(), v) != verdicts.end();
}

// One path "split" of one case, timed (median, IQR) then and now.
Comparison time_pair(double base_ms, std::optional<double> base_iqr, double new_ms, std::optional<double> new_iqr,
                     const CompareOptions& options = {}) {
  const RunReport base = run_report({case_report("c", "h1", {path("split", PathStatus::Pass, 1e-3, timing(base_ms, base_iqr))})});
  const RunReport now = run_report({case_report("c", "h1", {path("split", PathStatus::Pass, 1e-3, timing(new_ms, new_iqr))})});
  return compare_files(base, now, options);
}

SyntheticSpec small_spec(std::uint64_t seed = 7) {
  SyntheticSpec s;
  s.name = "small";
  s.seed = seed;
  s.num_seqs = 3;
  s.q_heads = 4;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.block_size = 7;
  s.seq_len_min = s.seq_len_max = 23;
  return s;
}

}  // namespace

TEST_CASE("summarize_times: median, extremes and quartiles of the repeats") {
  const TimingSummary s = summarize_times({5, 1, 4, 2, 3});
  CHECK(s.median == 3);
  CHECK(s.min == 1);
  CHECK(s.max == 5);
  REQUIRE(s.q1);
  REQUIRE(s.q3);
  CHECK(*s.q1 == doctest::Approx(2));
  CHECK(*s.q3 == doctest::Approx(4));
  // Between samples: interpolated (type 7).
  const TimingSummary even = summarize_times({1, 2, 3, 4});
  CHECK(even.median == doctest::Approx(2.5));
  CHECK(*even.q1 == doctest::Approx(1.75));
  CHECK(*even.q3 == doctest::Approx(3.25));
  // One run: no spread.
  const TimingSummary one = summarize_times({2.5});
  CHECK(one.median == 2.5);
  CHECK_FALSE(one.q1);
  CHECK_FALSE(one.q3);
}

TEST_CASE("Hash64: equal bytes give equal words, one changed bit another") {
  std::vector<std::byte> bytes(1001);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 37 + 11);
  Hash64 a, b;
  a.bytes(bytes);
  b.bytes(bytes);
  CHECK(a.digest() == b.digest());
  for (std::size_t at : {std::size_t{0}, std::size_t{500}, std::size_t{1000}}) {
    auto flipped = bytes;
    flipped[at] ^= std::byte{0x01};
    Hash64 c;
    c.bytes(flipped);
    CHECK_MESSAGE(c.digest() != a.digest(), "bit 0 of byte " << at);
  }
  // A trailing zero byte is not nothing.
  auto longer = bytes;
  longer.push_back(std::byte{0});
  Hash64 d;
  d.bytes(longer);
  CHECK(d.digest() != a.digest());
  // Text is length-prefixed.
  Hash64 e, f;
  e.text("ab");
  e.text("c");
  f.text("a");
  f.text("bc");
  CHECK(e.digest() != f.digest());
  CHECK(hex64(0x1234).size() == 16);
}

TEST_CASE("case_content_hash: stable, blind to names, sensitive to the content") {
  auto first = generate_case(small_spec());
  auto second = generate_case(small_spec());
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  const std::string hash = case_content_hash(*first);
  CHECK(hash.size() == 16);
  CHECK(case_content_hash(*second) == hash);

  SUBCASE("the name and description are not content") {
    Case renamed = *second;
    renamed.name = "another name";
    renamed.params.description = "another description";
    CHECK(case_content_hash(renamed) == hash);
  }
  SUBCASE("another seed is another case") {
    auto other = generate_case(small_spec(8));
    REQUIRE(other.ok());
    CHECK(case_content_hash(*other) != hash);
  }
  SUBCASE("one bit of a referenced KV block") {
    Case c = *second;
    const std::int32_t block = c.table.page_indices[static_cast<std::size_t>(c.table.page_indptr[1])];
    std::vector<std::byte> copy(c.key_cache.data, c.key_cache.data + c.key_cache.nbytes);
    copy[static_cast<std::size_t>(block * c.key_block_bytes() + 3)] ^= std::byte{0x01};
    c.key_cache = Tensor::from_vector(c.key_cache.dtype, c.key_cache.shape, std::move(copy));
    CHECK(case_content_hash(c) != hash);
  }
  SUBCASE("a block no sequence reads does not count") {
    Case c = *second;
    std::set<std::int64_t> used;
    for (auto k = c.table.page_indptr.front(); k < c.table.page_indptr.back(); ++k)
      used.insert(c.table.page_indices[static_cast<std::size_t>(k)]);
    std::int64_t unused = 0;
    while (used.count(unused)) ++unused;
    REQUIRE(unused < c.num_blocks());
    std::vector<std::byte> copy(c.value_cache.data, c.value_cache.data + c.value_cache.nbytes);
    copy[static_cast<std::size_t>(unused * c.value_block_bytes())] ^= std::byte{0x01};
    c.value_cache = Tensor::from_vector(c.value_cache.dtype, c.value_cache.shape, std::move(copy));
    CHECK(case_content_hash(c) == hash);
  }
  SUBCASE("a parameter") {
    Case c = *second;
    c.params.softcap = 30;
    CHECK(case_content_hash(c) != hash);
  }
  SUBCASE("caches made on demand: stable, and by their settings") {
    auto a = generate_case_sourced(small_spec());
    auto b = generate_case_sourced(small_spec());
    auto other = generate_case_sourced(small_spec(9));
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(other.ok());
    CHECK(case_content_hash(*a) == case_content_hash(*b));
    CHECK(case_content_hash(*a) != case_content_hash(*other));
  }
}

TEST_CASE("the spread and the content hash go through the JSON report, and old reports still load") {
  const RunReport r = run_report({case_report("a", "00112233aabbccdd", {path("split", PathStatus::Pass, 1e-3, timing(2.0, 0.1))})});
  const nlohmann::json j = to_json(r);
  const auto& t = j["cases"][0]["paths"][0]["timings"][0];
  CHECK(t["q1_ms"].get<double>() == doctest::Approx(1.95));
  CHECK(t["q3_ms"].get<double>() == doctest::Approx(2.05));
  CHECK(t["iqr_ms"].get<double>() == doctest::Approx(0.1));
  CHECK(j["cases"][0]["content_hash"] == "00112233aabbccdd");
  const RunReport back = through_file(r, "spread.json");
  REQUIRE(back.cases[0].paths[0].timings[0].q3_ms);
  CHECK(*back.cases[0].paths[0].timings[0].q3_ms == doctest::Approx(2.05));
  CHECK(back.cases[0].content_hash == "00112233aabbccdd");

  // A report from before: no quartiles, no hash.
  nlohmann::json old = j;
  for (const char* key : {"q1_ms", "q3_ms", "iqr_ms"}) old["cases"][0]["paths"][0]["timings"][0].erase(key);
  old["cases"][0].erase("content_hash");
  auto loaded = report_from_json(old, "old.json");
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
  CHECK_FALSE(loaded->cases[0].paths[0].timings[0].q1_ms);
  CHECK(loaded->cases[0].content_hash.empty());
}

TEST_CASE("matching: renamed, changed, gone and new cases") {
  const auto p = [] { return path("split", PathStatus::Pass, 1e-3, timing(1.0, 0.01)); };
  const RunReport base = run_report({case_report("same", "h-same", {p()}), case_report("old-name", "h-renamed", {p()}),
                                     case_report("changed", "h-before", {p()}), case_report("dropped", "h-dropped", {p()})});
  const RunReport now = run_report({case_report("same", "h-same", {p()}), case_report("new-name", "h-renamed", {p()}),
                                    case_report("changed", "h-after", {p()}), case_report("added", "h-added", {p()})});
  const Comparison cmp = compare_files(base, now);
  REQUIRE(cmp.cases.size() == 5);

  const CaseComparison& same = find_case(cmp, "same");
  CHECK(same.verdicts.empty());
  CHECK(find_path(cmp, "same", "split").verdicts == std::vector<Verdict>{Verdict::Same});

  const CaseComparison& renamed = find_case(cmp, "new-name");
  CHECK(renamed.verdicts == std::vector<Verdict>{Verdict::Renamed});
  CHECK(renamed.base_name == "old-name");
  CHECK(find_path(cmp, "new-name", "split").verdicts == std::vector<Verdict>{Verdict::Same});

  const CaseComparison& changed = find_case(cmp, "changed");
  CHECK(changed.verdicts == std::vector<Verdict>{Verdict::Changed});
  CHECK(changed.base_hash == "h-before");
  CHECK(changed.new_hash == "h-after");
  CHECK(find_path(cmp, "changed", "split").verdicts == std::vector<Verdict>{Verdict::Changed});
  CHECK_FALSE(find_path(cmp, "changed", "split").change);  // not paired, so not judged

  CHECK(find_case(cmp, "dropped").verdicts == std::vector<Verdict>{Verdict::Gone});
  CHECK(find_case(cmp, "added").verdicts == std::vector<Verdict>{Verdict::New});
  // The gone case stands where BASE had it: after "changed".
  CHECK(cmp.cases[2].name == "changed");
  CHECK(cmp.cases[3].name == "dropped");

  // None of these fails by default; each can.
  CHECK(comparison_exit_code(cmp) == exit_code::kPass);
  for (const Verdict v : {Verdict::Gone, Verdict::New, Verdict::Changed, Verdict::Renamed}) {
    CompareOptions strict;
    strict.fail_on.insert(v);
    CHECK_MESSAGE(comparison_exit_code(compare_files(base, now, strict)) == exit_code::kFail, verdict_name(v));
  }
}

TEST_CASE("matching: without content hashes cases pair by name, and that is said once") {
  const auto p = [] { return path("split", PathStatus::Pass, 1e-3, timing(1.0, 0.01)); };
  const Comparison cmp = compare_files(run_report({case_report("a", "", {p()})}), run_report({case_report("a", "h", {p()})}));
  CHECK(find_case(cmp, "a").verdicts.empty());
  REQUIRE(cmp.notes.size() == 1);
  CHECK(cmp.notes[0].find("paired by name alone") != std::string::npos);
}

TEST_CASE("matching: paths by name; a path that ran only on one side is new or gone") {
  const RunReport base = run_report({case_report(
      "c", "h", {path("reference", PathStatus::Pass, std::nullopt, timing(50, std::nullopt, 1)),
                 path("direct", PathStatus::Pass, 1e-3, timing(1, 0.01)), path("split", PathStatus::Pass, 1e-3, timing(1, 0.01))})});
  PathReport skipped = path("direct", PathStatus::Skipped, std::nullopt, std::nullopt);
  skipped.reason = "no CUDA device";
  const RunReport now = run_report({case_report(
      "c", "h", {path("reference", PathStatus::Pass, std::nullopt, timing(50, std::nullopt, 1)), skipped,
                 path("fmha", PathStatus::Pass, 1e-3, timing(1, 0.01))})});
  const Comparison cmp = compare_files(base, now);
  CHECK(find_path(cmp, "c", "direct").verdicts == std::vector<Verdict>{Verdict::Gone});
  CHECK(find_path(cmp, "c", "direct").note.find("no CUDA device") != std::string::npos);
  CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::Gone});
  CHECK(find_path(cmp, "c", "fmha").verdicts == std::vector<Verdict>{Verdict::New});
  CHECK(find_path(cmp, "c", "reference").verdicts == std::vector<Verdict>{Verdict::Same});
}

TEST_CASE("matching: a merged report of shards pairs with the unsharded run; a lone shard is refused") {
  std::vector<CaseReport> cases;
  for (int k = 0; k < 5; ++k)
    cases.push_back(case_report(fmt::format("case-{}", k), fmt::format("hash-{}", k),
                                {path("split", PathStatus::Pass, 1e-3, timing(1.0 + k, 0.05))}));
  const RunReport whole = run_report(cases, "pagecheck run --json all.json");
  std::vector<MergeInput> shards;
  for (int s = 0; s < 2; ++s) {
    RunReport shard = run_report({}, fmt::format("pagecheck run --shard {}/2 --json s{}.json", s, s));
    shard.shard = ShardInfo{s, 2, 5};
    for (int k = s; k < 5; k += 2) {
      CaseReport c = cases[static_cast<std::size_t>(k)];
      c.index = k;
      shard.cases.push_back(c);
    }
    shards.push_back({fmt::format("s{}.json", s), through_file(shard, fmt::format("s{}.json", s))});
  }
  auto merged = merge_reports(shards);
  REQUIRE(merged.ok());
  const Comparison cmp = compare_files(whole, merged->report);
  CHECK(cmp.cases.size() == 5);
  CHECK(comparison_exit_code(cmp) == exit_code::kPass);
  const ComparisonSummary s = summarize(cmp);
  CHECK(s.path_verdicts[static_cast<std::size_t>(Verdict::Same)] == 5);
  CHECK(cmp.timing_differences.empty());

  auto lone = compare_reports(whole, "all.json", shards[0].report, "s0.json");
  REQUIRE_FALSE(lone.ok());
  CHECK(lone.error().code == ErrorCode::InvalidInput);
  CHECK(lone.error().message.find("merge the shards first") != std::string::npos);
  // The same shard of two runs is fine.
  CHECK(compare_reports(shards[0].report, "a.json", shards[0].report, "b.json").ok());
}

TEST_CASE("the noise rule: a change counts only past both runs' spread and the threshold") {
  SUBCASE("within the spread and the threshold: same") {
    const Comparison cmp = time_pair(1.00, 0.04, 1.03, 0.04);
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::Same});
    CHECK(*find_path(cmp, "c", "split").change == doctest::Approx(0.03));
  }
  SUBCASE("past the threshold but within a run's spread: same") {
    const Comparison cmp = time_pair(1.00, 0.02, 1.08, 0.12);
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::Same});
    CHECK(find_path(cmp, "c", "split").note.find("within the spread") != std::string::npos);
  }
  SUBCASE("past the spread but within the threshold: same") {
    const Comparison cmp = time_pair(1.00, 0.005, 1.03, 0.005);
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::Same});
  }
  SUBCASE("past both: slower, a regression") {
    const Comparison cmp = time_pair(1.00, 0.04, 1.10, 0.04);
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::Slower});
    CHECK(comparison_exit_code(cmp) == exit_code::kFail);
  }
  SUBCASE("past both the other way: faster, not a regression unless asked") {
    const Comparison cmp = time_pair(1.00, 0.04, 0.85, 0.04);
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::Faster});
    CHECK(comparison_exit_code(cmp) == exit_code::kPass);
    CompareOptions strict;
    strict.fail_on.insert(Verdict::Faster);
    CHECK(comparison_exit_code(time_pair(1.00, 0.04, 0.85, 0.04, strict)) == exit_code::kFail);
  }
  SUBCASE("--max-slowdown moves the threshold") {
    CompareOptions loose;
    loose.max_slowdown = 0.20;
    CHECK(find_path(time_pair(1.00, 0.01, 1.10, 0.01, loose), "c", "split").verdicts ==
          std::vector<Verdict>{Verdict::Same});
  }
  SUBCASE("spread unknown (reports from before it was recorded): the threshold alone, said") {
    const Comparison slower = time_pair(1.00, std::nullopt, 1.06, std::nullopt);
    CHECK(find_path(slower, "c", "split").verdicts == std::vector<Verdict>{Verdict::Slower});
    CHECK(find_path(slower, "c", "split").note.find("spread unknown") != std::string::npos);
    REQUIRE(slower.notes.size() == 1);
    CHECK(slower.notes[0].find("--max-slowdown alone") != std::string::npos);
    CHECK(find_path(time_pair(1.00, std::nullopt, 1.04, std::nullopt), "c", "split").verdicts ==
          std::vector<Verdict>{Verdict::Same});
  }
  SUBCASE("one side's spread known: that one counts") {
    CHECK(find_path(time_pair(1.00, std::nullopt, 1.10, 0.2), "c", "split").verdicts ==
          std::vector<Verdict>{Verdict::Same});
    CHECK(find_path(time_pair(1.00, std::nullopt, 1.10, 0.02), "c", "split").verdicts ==
          std::vector<Verdict>{Verdict::Slower});
  }
}

TEST_CASE("error and status: more error, now failing, now passing") {
  const auto compare_one = [](PathReport base, PathReport now, const CompareOptions& options = {}) {
    return compare_files(run_report({case_report("c", "h", {std::move(base)})}),
                         run_report({case_report("c", "h", {std::move(now)})}), options);
  };
  const auto t = timing(1.0, 0.02);
  SUBCASE("error within the growth: same") {
    const Comparison cmp = compare_one(path("split", PathStatus::Pass, 1e-3, t), path("split", PathStatus::Pass, 1.9e-3, t));
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::Same});
  }
  SUBCASE("error past the growth: more error, a regression") {
    const Comparison cmp = compare_one(path("split", PathStatus::Pass, 1e-3, t), path("split", PathStatus::Pass, 3e-3, t));
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::MoreError});
    CHECK(comparison_exit_code(cmp) == exit_code::kFail);
    CompareOptions loose;
    loose.max_error_growth = 5.0;
    CHECK(comparison_exit_code(compare_one(path("split", PathStatus::Pass, 1e-3, t),
                                           path("split", PathStatus::Pass, 3e-3, t), loose)) == exit_code::kPass);
  }
  SUBCASE("tiny errors far inside the tolerance do not count") {
    const Comparison cmp = compare_one(path("split", PathStatus::Pass, 1e-7, t), path("split", PathStatus::Pass, 1e-6, t));
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::Same});
  }
  SUBCASE("less error") {
    const Comparison cmp = compare_one(path("split", PathStatus::Pass, 4e-3, t), path("split", PathStatus::Pass, 1e-3, t));
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::LessError});
    CHECK(comparison_exit_code(cmp) == exit_code::kPass);
  }
  SUBCASE("crossing the tolerance: now failing, with the reason") {
    const Comparison cmp = compare_one(path("split", PathStatus::Pass, 4e-3, t), path("split", PathStatus::Fail, 5e-2, t));
    const PathComparison& p = find_path(cmp, "c", "split");
    CHECK(has(p.verdicts, Verdict::NowFailing));
    CHECK(has(p.verdicts, Verdict::MoreError));
    CHECK(p.now.reason == "output: 3 mismatches");
    CHECK(comparison_exit_code(cmp) == exit_code::kFail);
  }
  SUBCASE("a path that wrote NaN now: more error") {
    const Comparison cmp = compare_one(path("split", PathStatus::Pass, 4e-3, t),
                                       path("split", PathStatus::Fail, std::numeric_limits<double>::infinity(), t));
    CHECK(has(find_path(cmp, "c", "split").verdicts, Verdict::MoreError));
  }
  SUBCASE("fixed: now passing") {
    const Comparison cmp = compare_one(path("split", PathStatus::Fail, 5e-2, t), path("split", PathStatus::Pass, 4e-3, t));
    CHECK(has(find_path(cmp, "c", "split").verdicts, Verdict::NowPassing));
    CHECK(comparison_exit_code(cmp) == exit_code::kPass);
  }
  SUBCASE("an error now (the path did not run): now failing") {
    PathReport errored = path("split", PathStatus::Error, std::nullopt, std::nullopt);
    errored.reason = "CUDA error: out of memory";
    const Comparison cmp = compare_one(path("split", PathStatus::Pass, 4e-3, t), errored);
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::NowFailing});
  }
  SUBCASE("a case that became invalid: now failing, as a case") {
    CaseReport invalid = case_report("c", "h", {});
    invalid.errors.push_back("block_table[0][1] = 99 but the cache has 4 blocks");
    const Comparison cmp = compare_files(run_report({case_report("c", "h", {path("split", PathStatus::Pass, 1e-3, t)})}),
                                         run_report({invalid}));
    CHECK(find_case(cmp, "c").verdicts == std::vector<Verdict>{Verdict::NowFailing});
    CHECK(comparison_exit_code(cmp) == exit_code::kFail);
    CHECK(comparison_to_junit(cmp).find("block_table[0][1]") != std::string::npos);
  }
}

TEST_CASE("not comparable: device, clocks, version, timing mode; said once, errors still judged") {
  const auto base = run_report({case_report("c", "h", {path("split", PathStatus::Pass, 1e-3, timing(1.0, 0.01))})});
  auto now = run_report({case_report("c", "h", {path("split", PathStatus::Pass, 5e-3, timing(2.0, 0.01))})});
  SUBCASE("device") { now.device->name = "NVIDIA H100 80GB HBM3"; }
  SUBCASE("clocks: the measured ceilings far apart") { now.device->copy_gb_per_s = 3000; }
  SUBCASE("version") { now.tool_version = "1.1.0"; }
  SUBCASE("timing mode") { now.command_line = "pagecheck run --hot --repeats 50 --json r.json"; }
  const Comparison cmp = compare_files(base, now);
  REQUIRE(cmp.timing_differences.size() == 1);
  const PathComparison& p = find_path(cmp, "c", "split");
  CHECK(has(p.verdicts, Verdict::NotComparable));
  CHECK_FALSE(has(p.verdicts, Verdict::Slower));
  CHECK(has(p.verdicts, Verdict::MoreError));  // the error does not depend on the clocks
  // Said once, at the top.
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  print_comparison(f, cmp, false);
  std::rewind(f);
  std::string text;
  for (int ch = std::fgetc(f); ch != EOF; ch = std::fgetc(f)) text += static_cast<char>(ch);
  std::fclose(f);
  const auto first = text.find("timings not comparable: ");
  REQUIRE(first != std::string::npos);
  CHECK(text.find("timings not comparable: ", first + 1) == std::string::npos);
  CompareOptions strict;
  strict.fail_on.insert(Verdict::NotComparable);
  strict.max_error_growth = 10;
  CHECK(comparison_exit_code(compare_files(base, now, strict)) == exit_code::kFail);
}

TEST_CASE("refusals: a report that did not run, reports with nothing in common") {
  const auto ok = run_report({case_report("a", "h-a", {path("split", PathStatus::Pass, 1e-3, timing(1, 0.01))})});
  RunReport not_run = run_report({});
  not_run.errors.push_back("bench needs a CUDA device and none is present: nothing to benchmark");
  auto refused = compare_reports(ok, "base.json", not_run, "new.json");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::InvalidInput);
  CHECK(refused.error().describe().find("NEW did not run") != std::string::npos);

  const auto other = run_report({case_report("b", "h-b", {path("split", PathStatus::Pass, 1e-3, timing(1, 0.01))})});
  auto unrelated = compare_reports(ok, "base.json", other, "new.json");
  REQUIRE_FALSE(unrelated.ok());
  CHECK(unrelated.error().code == ErrorCode::InvalidInput);
  CHECK(unrelated.error().message.find("no case of base.json") != std::string::npos);

  nlohmann::json not_ours = {{"tool", "nvbench"}, {"cases", nlohmann::json::array()}};
  auto read = report_from_json(not_ours, "x.json");
  REQUIRE_FALSE(read.ok());
  CHECK(read.error().code == ErrorCode::InvalidInput);
}

TEST_CASE("parse_verdict takes the printed names and the hyphenated ones") {
  for (const Verdict v : all_verdicts()) {
    std::string name(verdict_name(v));
    CHECK(parse_verdict(name) == v);
    std::replace(name.begin(), name.end(), ' ', '-');
    CHECK(parse_verdict(name) == v);
  }
  CHECK_FALSE(parse_verdict("slow"));
}

TEST_CASE("renderings: JSON, JUnit and HTML say the same verdicts") {
  const RunReport base = run_report({case_report("a <b>", "h1", {path("split", PathStatus::Pass, 1e-3, timing(1.0, 0.01)),
                                                                 path("direct", PathStatus::Pass, 1e-3, timing(1.0, 0.01))}),
                                     case_report("gone-case", "h2", {path("split", PathStatus::Pass, 1e-3, timing(1, 0.01))})});
  const RunReport now = run_report({case_report("a <b>", "h1", {path("split", PathStatus::Pass, 1e-3, timing(1.5, 0.01)),
                                                                path("direct", PathStatus::Pass, 1e-3, timing(0.7, 0.01))})});
  const Comparison cmp = compare_files(base, now);

  const nlohmann::json j = comparison_to_json(cmp);
  CHECK(j["tool"] == "pagecheck compare");
  CHECK(j["exit_code"] == 1);
  CHECK(j["summary"]["regressions"] == 1);
  CHECK(j["summary"]["paths"]["slower"] == 1);
  CHECK(j["summary"]["paths"]["faster"] == 1);
  CHECK(j["summary"]["cases"]["gone"] == 1);
  CHECK(j["cases"][0]["paths"][0]["verdicts"][0] == "slower");
  CHECK(j["cases"][0]["paths"][0]["change_pct"].get<double>() == doctest::Approx(50));
  CHECK(j["cases"][0]["paths"][0]["base"]["iqr_ms"].get<double>() == doctest::Approx(0.01));
  CHECK(j["cases"][0]["paths"][0]["regression"] == true);
  CHECK(j["timings_comparable"] == true);

  const std::string junit = comparison_to_junit(cmp);
  CHECK(junit.find("tests=\"3\" failures=\"1\"") != std::string::npos);
  CHECK(junit.find("<failure message=\"slower\"") != std::string::npos);
  CHECK(junit.find("a &lt;b&gt;") != std::string::npos);

  const std::string html = comparison_to_html(cmp);
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("data-change=\"50\"") != std::string::npos);
  CHECK(html.find("data-change=\"-30\"") != std::string::npos);
  CHECK(html.find("a &lt;b&gt;") != std::string::npos);
  CHECK(html.find("a <b>") == std::string::npos);
  CHECK(html.find("1 regression") != std::string::npos);
}

TEST_CASE("the reference path's own timings through compare") {
  auto c = generate_case(small_spec());
  REQUIRE(c.ok());
  auto reference = make_reference_path();
  const auto timings_of_a_run = [&] {
    auto run = reference->run(*c, RunOptions{});
    REQUIRE(run.ok());
    REQUIRE_FALSE(run->timings.empty());
    return run->timings;
  };
  const auto report_of = [&](std::vector<StageTiming> timings, double scale) {
    PathReport p;
    p.path = "reference";
    p.timings = std::move(timings);
    for (auto& t : p.timings) t.median_ms = std::max(t.median_ms, 1e-3) * scale;
    CaseReport cr = case_report(c->name, case_content_hash(*c), {p});
    return run_report({cr}, "pagecheck run --paths reference --json r.json");
  };
  // Two runs of one binary: the same case, paired by name and hash, the
  // same, whatever the wall clock did.
  const Comparison twice = compare_files(report_of(timings_of_a_run(), 1.0), report_of(timings_of_a_run(), 1.0));
  CHECK(find_case(twice, c->name).verdicts.empty());
  CHECK(find_path(twice, c->name, "reference").verdicts == std::vector<Verdict>{Verdict::Same});
  // One run's time, and a hundred times that: a single timed run measures no
  // noise, so the change is shown and not judged, and that is said once.
  const auto measured = timings_of_a_run();
  const Comparison slowed = compare_files(report_of(measured, 1.0), report_of(measured, 100.0));
  const PathComparison& p = find_path(slowed, c->name, "reference");
  CHECK(p.verdicts == std::vector<Verdict>{Verdict::Same});
  REQUIRE(p.change);
  CHECK(*p.change == doctest::Approx(99.0));
  CHECK(p.note.find("a single timed run: not judged") != std::string::npos);
  REQUIRE(slowed.notes.size() == 1);
  CHECK(slowed.notes[0].find("the change is shown, not judged") != std::string::npos);
  CHECK(comparison_exit_code(slowed) == exit_code::kPass);
  // The same times as repeats of a GPU path with no recorded spread: judged
  // by the threshold alone.
  auto repeated = measured;
  for (auto& t : repeated) t.repeats = 20;
  const Comparison judged = compare_files(report_of(repeated, 1.0), report_of(repeated, 100.0));
  CHECK(has(find_path(judged, c->name, "reference").verdicts, Verdict::Slower));
}

TEST_CASE("--pair: two paths of one report, case by case") {
  const auto two_builds = [](double old_ms, double new_ms, double new_err) {
    return case_report("c", "", {path("reference", PathStatus::Pass, std::nullopt, timing(40, std::nullopt, 1)),
                                 path("ext:old", PathStatus::Pass, 1e-3, timing(old_ms, 0.01)),
                                 path("ext:new", PathStatus::Pass, new_err, timing(new_ms, 0.01))});
  };
  const RunReport report = through_file(run_report({two_builds(1.0, 1.3, 1e-3), two_builds(2.0, 2.0, 1e-3)}), "pair.json");
  // Two cases of one name in one run pair in order (the report holds "c" twice).
  auto cmp = compare_path_pairs(report, "pair.json", {{"ext:old", "ext:new"}});
  REQUIRE_MESSAGE(cmp.ok(), cmp.error().describe());
  REQUIRE(cmp->cases.size() == 2);
  REQUIRE(cmp->cases[0].paths.size() == 1);
  CHECK(cmp->cases[0].paths[0].path == "ext:old=ext:new");
  CHECK(cmp->cases[0].paths[0].verdicts == std::vector<Verdict>{Verdict::Slower});
  CHECK(cmp->cases[1].paths[0].verdicts == std::vector<Verdict>{Verdict::Same});
  CHECK(cmp->timing_differences.empty());
  CHECK(cmp->notes.empty());  // one report: no pairing by name to warn about
  CHECK(cmp->base.source == "pair.json [ext:old]");
  CHECK(cmp->now.source == "pair.json [ext:new]");
  CHECK(comparison_exit_code(*cmp) == exit_code::kFail);

  auto unknown = compare_path_pairs(report, "pair.json", {{"ext:old", "ext:newer"}});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code == ErrorCode::Usage);
  CHECK(unknown.error().message.find("'ext:newer'") != std::string::npos);

  CHECK(parse_path_pair("split=auto").ok());
  CHECK(parse_path_pair("ext:a=ext:b")->new_path == "ext:b");
  for (const char* bad : {"split", "=auto", "split=", "a=b=c", "split=split"})
    CHECK_MESSAGE(!parse_path_pair(bad).ok(), bad);
}

TEST_CASE("values_digest: the reference's digest is stable across runs and moves with one bit") {
  auto c = generate_case(small_spec());
  REQUIRE(c.ok());
  auto reference = make_reference_path();
  RunOptions quick;
  quick.measure = false;
  auto first = reference->run(*c, quick);
  auto second = reference->run(*c, quick);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  const std::string digest = values_digest(first->output);
  CHECK(digest.size() == 16);
  CHECK(values_digest(second->output) == digest);
  CHECK(values_digest(second->lse) == values_digest(first->lse));
  CHECK(values_digest(first->lse) != digest);
  for (const std::size_t at : {std::size_t{0}, first->output.size() / 2, first->output.size() - 1}) {
    auto moved = first->output;
    std::uint32_t bits = 0;
    std::memcpy(&bits, &moved[at], 4);
    bits ^= 1u;  // the last bit of the mantissa
    std::memcpy(&moved[at], &bits, 4);
    CHECK_MESSAGE(values_digest(moved) != digest, "element " << at);
  }
  // -0.0 and 0.0 are other bits.
  CHECK(values_digest(std::vector<float>{0.0f}) != values_digest(std::vector<float>{-0.0f}));
}

TEST_CASE("bits changed: digests through the report and compare") {
  const auto with_digest = [](std::string output, std::string lse) {
    PathReport p = path("split", PathStatus::Pass, 1e-3, timing(1.0, 0.02));
    p.output_digest = std::move(output);
    p.lse_digest = std::move(lse);
    return run_report({case_report("c", "h", {p})});
  };
  const RunReport base = with_digest("00000000000000aa", "00000000000000bb");
  REQUIRE(through_file(base, "digest.json").cases[0].paths[0].output_digest == "00000000000000aa");
  CHECK(to_json(base)["cases"][0]["paths"][0]["lse_digest"] == "00000000000000bb");

  CHECK(find_path(compare_files(base, with_digest("00000000000000aa", "00000000000000bb")), "c", "split").verdicts ==
        std::vector<Verdict>{Verdict::Same});
  for (const auto& now : {with_digest("00000000000000ac", "00000000000000bb"), with_digest("00000000000000aa", "00000000000000bc")}) {
    const Comparison cmp = compare_files(base, now);
    CHECK(find_path(cmp, "c", "split").verdicts == std::vector<Verdict>{Verdict::BitsChanged});
    CHECK(comparison_exit_code(cmp) == exit_code::kPass);  // within tolerance: news, not a failure
    CompareOptions deterministic;
    deterministic.fail_on.insert(Verdict::BitsChanged);
    CHECK(comparison_exit_code(compare_files(base, now, deterministic)) == exit_code::kFail);
  }
  // Unknown on a side (an older report): nothing said.
  CHECK(find_path(compare_files(with_digest("", ""), base), "c", "split").verdicts == std::vector<Verdict>{Verdict::Same});
}
