// pagecheck soak and --check-batch-invariance through the real binary, on
// the CPU (the reference path): exit codes, the case stream, case k alone,
// the reports, the refused options.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cli_run.hpp"

using namespace cli_test;

namespace {

// soak on the reference alone, one reference thread (CI's 2 cores).
std::string soak(const std::string& args) { return "soak --paths reference --threads 1 --no-color " + args; }

}  // namespace

TEST_CASE("soak --cases N runs N random cases and passes on the reference") {
  const auto r = run_tool(soak("--cases 6 --seed 3 --json soak.json --save-failing failures"));
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "soak: seed 3, 6 cases in"));
  CHECK(contains(r.out, "0 failing, 0 distinct failures"));
  const auto j = nlohmann::json::parse(read_file(work_dir() / "soak.json"));
  CHECK(j["exit_code"] == 0);
  CHECK(j["cases"].empty());  // only failing cases are kept
  CHECK_FALSE(fs::exists(work_dir() / "failures"));
}

TEST_CASE("soak --case K runs case K of the seed alone, as the stream ran it") {
  const auto one = run_tool(soak("--seed 9 --case 4 --json one.json"));
  INFO(one.err);
  CHECK(one.rc == 0);
  CHECK(contains(one.out, "seed 9, one case, from case 4"));
  CHECK(contains(one.out, "soak: seed 9, 1 case in"));
  const auto from = run_tool(soak("--seed 9 --cases 1 --first-case 4 --stop-on-failure"));
  CHECK(from.rc == 0);
  CHECK(contains(from.out, "soak: seed 9, 1 case in"));
}

TEST_CASE("soak refuses what does not apply to it") {
  CHECK(run_tool(soak("--case 2 --cases 3")).rc == 2);
  CHECK(run_tool(soak("--case 2 --minutes 1")).rc == 2);
  const auto shard = run_tool(soak("--cases 2 --shard 0/2"));
  CHECK(shard.rc == 2);
  CHECK(contains(shard.err, "soak runs in one process"));
  CHECK(run_tool(soak("--cases 2 --workers 2")).rc == 2);
  CHECK(run_tool(soak("--cases 2 --html x.html")).rc == 2);
  CHECK(run_tool(soak("--cases 0")).rc == 2);
  CHECK(run_tool(soak("--minutes -1")).rc == 2);
  CHECK(run_tool(soak("--cases 2 --plan bogus")).rc == 2);
}

TEST_CASE("--check-batch-invariance reports each path's invariance in the JSON") {
  const auto r = run_tool("run --paths reference --threads 1 --seqs 3 --seq-len-min 5 --seq-len-max 40 --mode mixed "
                          "--q-heads 4 --kv-heads 2 --head-dim 16 --check-batch-invariance --json bi.json -q");
  INFO(r.err);
  CHECK(r.rc == 0);
  const auto j = nlohmann::json::parse(read_file(work_dir() / "bi.json"));
  const auto& row = j["cases"][0]["paths"][0];
  CHECK(row["path"] == "reference");
  CHECK(row["status"] == "pass");
  CHECK(row["notes"]["batch_invariance"] == "invariant over 4 batches");
  // Off by default.
  const auto plain = run_tool("run --paths reference --threads 1 --seqs 2 --seq-len 9 --head-dim 16 --json plain.json -q");
  CHECK(plain.rc == 0);
  const auto p = nlohmann::json::parse(read_file(work_dir() / "plain.json"));
  const auto& plain_row = p["cases"][0]["paths"][0];
  const bool has_note = plain_row.contains("notes") && plain_row["notes"].contains("batch_invariance");
  CHECK_FALSE(has_note);
  // --plan invariant parses for run.
  CHECK(run_tool("run --paths reference --threads 1 --seqs 1 --seq-len 4 --head-dim 16 --plan invariant -q").rc == 0);
}
