// CLI smoke tests on the real binary: exit codes, messages, JSON fields,
// round trips and failure bundles. Each test runs `pagecheck` as a user would
// (stdout and stderr to files, so never a terminal) and checks what it left.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pagecheck/case_file.hpp"
#include "pagecheck/metrics.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/synthetic.hpp"

namespace fs = std::filesystem;

namespace {

struct Result {
  int rc = -1;
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path work_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::path(CLI_WORK_DIR);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// Runs `pagecheck ARGS` (ARGS already shell-quoted) in the work folder.
// Runs the binary in the scratch folder; `env` (e.g. "NAME=value") is set
// for that run only.
Result run_tool(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const fs::path out = work_dir() / ("stdout." + std::to_string(counter));
  const fs::path err = work_dir() / ("stderr." + std::to_string(counter));
  ++counter;
  const std::string cmd = "cd '" + work_dir().string() + "' && " + (env.empty() ? "" : "env " + env + " ") + "'" +
                          std::string(PAGECHECK_BIN) + "' " + args + " > '" + out.string() + "' 2> '" + err.string() +
                          "'";
  const int status = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_file(p)); }

// Whether this binary has a usable GPU (a reference-only run reports the
// device when there is one, null otherwise).
bool have_gpu() {
  static const bool gpu = [] {
    const Result r = run_tool("run --preset mqa --paths reference,direct --no-timing --quiet --json gpu_probe.json");
    if (r.rc != 0 && r.rc != 1) return false;
    return !read_json(work_dir() / "gpu_probe.json")["device"].is_null();
  }();
  return gpu;
}

}  // namespace

TEST_CASE("--help and --version exit 0") {
  Result r = run_tool("--help");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "replay"));
  CHECK(contains(r.out, "Exit codes"));
  r = run_tool("run --help");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "--save-failing"));
  r = run_tool("--version");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "pagecheck"));
}

TEST_CASE("usage errors exit 2") {
  CHECK(run_tool("--no-such-option").rc == 2);
  CHECK(run_tool("").rc == 2);  // no subcommand
  CHECK(run_tool("run --seqs notanumber").rc == 2);
  CHECK(run_tool("run --seqs 0").rc == 2);
  CHECK(run_tool("run --seq-len 5 --seq-len-max 9").rc == 2);  // excluded together
  CHECK(run_tool("replay").rc == 2);                           // no file
  CHECK(run_tool("gen").rc == 2);                              // no -o

  Result r = run_tool("run --paths reference,warp9");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "warp9"));
  r = run_tool("run --preset no-such-model");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "no-such-model"));
  r = run_tool("run --preset mqa --plan sideways --paths reference");
  CHECK(r.rc == 2);
  r = run_tool("run --q-heads 6 --kv-heads 4 --paths reference");  // the generator refuses: not a multiple
  CHECK(r.rc == 2);
  r = run_tool("run --kv-dtype F12 --paths reference");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "F12"));
}

TEST_CASE("a NaN tolerance or softcap is a usage error, not a pass") {
  // NaN < 0 is false, so a plain "non-negative" check lets NaN through, and
  // with a NaN tolerance no element ever counts as a mismatch.
  REQUIRE(run_tool("gen -o nan_tol.safetensors --seqs 2 --seq-len 24 --head-dim 64 --with-output --output-dtype BF16")
              .rc == 0);
  REQUIRE(run_tool("replay nan_tol.safetensors --paths reference --atol 0 --rtol 0").rc == 1);
  CHECK(run_tool("replay nan_tol.safetensors --paths reference --atol nan --rtol 0").rc == 2);
  CHECK(run_tool("replay nan_tol.safetensors --paths reference --atol 0 --rtol nan").rc == 2);
  CHECK(run_tool("run --preset mqa --paths reference --softcap nan").rc == 2);
}

TEST_CASE("replay of a missing file exits 3 and names it") {
  const Result r = run_tool("replay does-not-exist.safetensors --paths reference");
  CHECK(r.rc == 3);
  CHECK(contains(r.err, "does-not-exist.safetensors"));
  CHECK(contains(r.err, "no such file"));
}

TEST_CASE("replay of garbage and of a truncated file exits 3 and names the file") {
  {
    std::ofstream f(work_dir() / "garbage.safetensors", std::ios::binary);
    f << "this is not a safetensors file at all, just text\n";
  }
  Result r = run_tool("replay garbage.safetensors --paths reference");
  CHECK(r.rc == 3);
  CHECK(contains(r.err, "garbage.safetensors"));

  REQUIRE(run_tool("gen -o whole.safetensors --seqs 2 --seq-len 20 --head-dim 64").rc == 0);
  const std::string bytes = read_file(work_dir() / "whole.safetensors");
  {
    std::ofstream f(work_dir() / "truncated.safetensors", std::ios::binary);
    f << bytes.substr(0, bytes.size() - 100);
  }
  r = run_tool("replay truncated.safetensors --paths reference");
  CHECK(r.rc == 3);
  CHECK(contains(r.err, "truncated.safetensors"));

  // A valid file after an invalid one still runs, and the exit code stays 3.
  r = run_tool("replay garbage.safetensors whole.safetensors --paths reference --json mixed.json");
  CHECK(r.rc == 3);
  const auto j = read_json(work_dir() / "mixed.json");
  REQUIRE(j["cases"].size() == 2);
  CHECK(j["cases"][0]["errors"].size() >= 1);
  CHECK(j["cases"][1]["paths"][0]["status"] == "pass");
  CHECK(j["exit_code"] == 3);
}

TEST_CASE("a case that parses but does not validate exits 3 and says what is wrong") {
  pagecheck::SyntheticSpec spec;
  spec.num_seqs = 2;
  spec.seq_len_max = spec.seq_len_min = 40;
  spec.head_dim = 64;
  auto c = pagecheck::generate_case(spec);
  REQUIRE(c.ok());
  c->table.page_indices[c->table.page_indptr[1]] = 1 << 30;  // a page far past the pool
  REQUIRE(pagecheck::save_case_file(*c, work_dir() / "bad_table.safetensors").ok());
  Result r = run_tool("replay bad_table.safetensors --paths reference");
  CHECK(r.rc == 3);
  CHECK(contains(r.err, "bad_table.safetensors"));
  CHECK(contains(r.err, std::to_string(1 << 30)));
  r = run_tool("inspect bad_table.safetensors");
  CHECK(r.rc == 3);
  CHECK(contains(r.out, "invalid:"));
}

TEST_CASE("inspect and replay print an unvalidated hostile case without overflowing") {
  // query_start_loc [INT32_MIN, INT32_MAX] and a cache of no blocks with
  // block size INT64_MAX both parse; validation refuses them, but the
  // geometry line and the table statistics are printed first.
  using pagecheck::DType;
  using pagecheck::Tensor;
  std::map<std::string, Tensor> tensors;
  tensors["query"] = Tensor::from_vector<float>(DType::F32, {1, 1, 1}, {1.0f});
  const std::int64_t huge_block = std::numeric_limits<std::int64_t>::max();
  tensors["key_cache"] = Tensor::from_vector<float>(DType::F32, {0, huge_block, 1, 1}, {});
  tensors["value_cache"] = Tensor::from_vector<float>(DType::F32, {0, huge_block, 1, 1}, {});
  tensors["block_table"] = Tensor::from_vector<std::int32_t>(DType::I32, {1, 1}, {0});
  tensors["seq_lens"] = Tensor::from_vector<std::int32_t>(DType::I32, {1}, {100});
  tensors["query_start_loc"] = Tensor::from_vector<std::int32_t>(
      DType::I32, {2}, {std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()});
  REQUIRE(pagecheck::write_safetensors(work_dir() / "hostile_geometry.safetensors", tensors, {}).ok());

  Result r = run_tool("inspect hostile_geometry.safetensors");
  CHECK(r.rc == 3);
  CHECK(contains(r.out, "prefill (q_len 4294967295)"));  // not a wrapped -1 read as decode
  CHECK(contains(r.out, "q_len:     min 4294967295"));
  CHECK(contains(r.out, "1 entries needed"));  // seq_len 100 needs one page of any size
  CHECK(contains(r.out, "1 out of range"));
  r = run_tool("replay hostile_geometry.safetensors --paths reference");
  CHECK(r.rc == 3);
}

TEST_CASE("run --preset llama3-8b --paths reference writes the JSON fields") {
  const Result r = run_tool("run --preset llama3-8b --paths reference --json out.json --csv out.csv --junit out.xml");
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "llama3-8b"));
  const auto j = read_json(work_dir() / "out.json");
  CHECK(j["tool"] == "pagecheck");
  CHECK(j["exit_code"] == 0);
  CHECK(j.contains("version"));
  CHECK(j.contains("command"));
  CHECK(j.contains("summary"));
  REQUIRE(j["cases"].size() == 1);
  const auto& c = j["cases"][0];
  CHECK(c["name"] == "llama3-8b");
  REQUIRE(c["paths"].size() == 1);
  const auto& p = c["paths"][0];
  CHECK(p["path"] == "reference");
  CHECK(p["status"] == "pass");
  for (const char* key : {"max_abs_err", "rel_l2_err", "mismatches", "reason", "timings", "plan", "checks"})
    CHECK_MESSAGE(p.contains(key), key);

  const std::string csv = read_file(work_dir() / "out.csv");
  CHECK(csv.rfind("case,path,status,", 0) == 0);
  CHECK(contains(csv, "\nllama3-8b,reference,pass,"));
  const std::string xml = read_file(work_dir() / "out.xml");
  CHECK(contains(xml, "<testcase classname=\"pagecheck.llama3-8b\" name=\"reference\""));
}

TEST_CASE("gen then replay: the recorded output round-trips") {
  Result r = run_tool(
      "gen -o rt.safetensors --seqs 3 --q-heads 4 --kv-heads 2 --head-dim 64 --block-size 7 --seq-lens 3,8,29 "
      "--q-len 2 --layout HND --table csr --kv-dtype F16 --q-dtype F32 --window 9 --softcap 30 --with-output");
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "rt.safetensors"));
  r = run_tool("replay rt.safetensors --paths reference --json rt.json");
  CHECK(r.rc == 0);
  const auto j = read_json(work_dir() / "rt.json");
  const auto& p = j["cases"][0]["paths"][0];
  CHECK(p["path"] == "reference");
  CHECK(p["status"] == "pass");
  REQUIRE(p.contains("recorded"));
  CHECK(p["recorded"]["rel_l2_err"].get<double>() < 1e-5);
  CHECK(p["recorded"]["max_abs_err"].get<double>() < 1e-5);
  CHECK(contains(j["cases"][0]["geometry"].get<std::string>(), "HND"));
  CHECK(contains(j["cases"][0]["geometry"].get<std::string>(), "csr"));
}

TEST_CASE("a recorded LSE without a recorded output is still compared") {
  REQUIRE(run_tool("gen -o lse_only.safetensors --seqs 2 --seq-len 24 --head-dim 64 --with-output").rc == 0);
  auto c = pagecheck::load_case_file(work_dir() / "lse_only.safetensors");
  REQUIRE(c.ok());
  REQUIRE(c->recorded_lse.has_value());
  c->recorded_output.reset();
  REQUIRE(pagecheck::save_case_file(*c, work_dir() / "lse_only_good.safetensors").ok());
  CHECK(run_tool("replay lse_only_good.safetensors --paths reference").rc == 0);

  std::vector<float> wrong(static_cast<std::size_t>(c->recorded_lse->numel()));
  for (std::size_t i = 0; i < wrong.size(); ++i) wrong[i] = static_cast<float>(c->recorded_lse->at(i)) + 1.0f;
  c->recorded_lse = pagecheck::Tensor::from_vector<float>(pagecheck::DType::F32, c->recorded_lse->shape, wrong);
  REQUIRE(pagecheck::save_case_file(*c, work_dir() / "lse_only_wrong.safetensors").ok());
  const Result r = run_tool("replay lse_only_wrong.safetensors --paths reference");
  CHECK(r.rc == 1);
  CHECK(contains(r.out, "recorded LSE"));
}

TEST_CASE("a recorded LSE failure quotes the tolerance it was judged with") {
  // F32 inputs with a BF16 recording: the recorded LSE is judged with the
  // BF16 tolerance, looser than the F32 LSE tolerance.
  REQUIRE(run_tool("gen -o lse_tol.safetensors --seqs 2 --seq-len 24 --head-dim 64 --q-dtype F32 --kv-dtype F32 "
                   "--with-output --output-dtype BF16")
              .rc == 0);
  auto c = pagecheck::load_case_file(work_dir() / "lse_tol.safetensors");
  REQUIRE(c.ok());
  REQUIRE(c->recorded_lse.has_value());
  std::vector<float> wrong(static_cast<std::size_t>(c->recorded_lse->numel()));
  for (std::size_t i = 0; i < wrong.size(); ++i) wrong[i] = static_cast<float>(c->recorded_lse->at(i)) + 1.0f;
  c->recorded_lse = pagecheck::Tensor::from_vector<float>(pagecheck::DType::F32, c->recorded_lse->shape, wrong);
  REQUIRE(pagecheck::save_case_file(*c, work_dir() / "lse_tol_wrong.safetensors").ok());
  const Result r = run_tool("replay lse_tol_wrong.safetensors --paths reference");
  CHECK(r.rc == 1);
  const pagecheck::Tolerance bf16 = pagecheck::default_tolerance(pagecheck::DType::BF16, pagecheck::DType::BF16);
  const pagecheck::Tolerance f32_lse = pagecheck::default_lse_tolerance(pagecheck::DType::F32, pagecheck::DType::F32);
  REQUIRE(bf16.atol > f32_lse.atol);
  CHECK(contains(r.out, "differs from the recorded LSE: "));
  CHECK_MESSAGE(contains(r.out, fmt::format("elements beyond atol {:g} ", bf16.atol)), r.out);
}

TEST_CASE("inspect shows geometry, table statistics, validity and paths") {
  REQUIRE(run_tool("gen -o insp.safetensors --preset mqa --seqs 3 --seq-len 50").rc == 0);
  const Result r = run_tool("inspect insp.safetensors");
  CHECK(r.rc == 0);
  for (const char* part : {"geometry:", "pages:", "seq_len:", "q_len:", "valid:     yes", "reference", "direct",
                           "split", "auto", "prefill", "fmha"})
    CHECK_MESSAGE(contains(r.out, part), part);
  CHECK(run_tool("inspect nothing-here.safetensors").rc == 3);
  CHECK(run_tool("inspect garbage.safetensors").rc == 3);
}

TEST_CASE("GPU paths without a GPU are skipped visibly, and fail only with --require-gpu") {
  if (have_gpu()) {
    MESSAGE("a GPU is present: the no-GPU behaviour is not testable here");
    return;
  }
  Result r = run_tool("run --preset mqa --json skip.json");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "skipped"));
  const auto j = read_json(work_dir() / "skip.json");
  const auto& paths = j["cases"][0]["paths"];
  REQUIRE(paths.size() == 6);
  for (std::size_t i = 1; i < paths.size(); ++i) {
    CHECK(paths[i]["status"] == "skipped");
    CHECK(!paths[i]["reason"].get<std::string>().empty());
  }
  r = run_tool("run --preset mqa --require-gpu");
  CHECK(r.rc == 4);
  CHECK(contains(r.err, "require-gpu"));
  CHECK(run_tool("bench --shapes decode").rc == 4);
  CHECK(run_tool("tune -o tuning.json").rc == 4);
}

TEST_CASE("--save-failing writes a bundle that reproduces the failure") {
  // A BF16 recorded output judged with zero tolerance: the reference (float
  // precision) cannot match a BF16-rounded recording, so the case fails.
  REQUIRE(run_tool("gen -o failing.safetensors --seqs 2 --seq-len 24 --head-dim 64 --with-output --output-dtype BF16")
              .rc == 0);
  REQUIRE(run_tool("replay failing.safetensors --paths reference").rc == 0);  // default tolerance passes
  Result r = run_tool("replay failing.safetensors --paths reference --atol 0 --rtol 0 --save-failing bundles");
  CHECK(r.rc == 1);
  const fs::path bundle = work_dir() / "bundles" / "failing";
  REQUIRE(fs::is_directory(bundle));
  for (const char* name : {"case.safetensors", "outputs.safetensors", "command.txt", "replay.sh", "report.json"})
    CHECK_MESSAGE(fs::exists(bundle / name), name);
  const std::string command = read_file(bundle / "command.txt");
  CHECK(contains(command, " replay "));
  CHECK(contains(command, "case.safetensors"));
  CHECK(contains(command, "--atol 0"));
  CHECK(!contains(command, "--repeats"));  // defaults are not spelled out
  const int status = std::system(("sh '" + (bundle / "replay.sh").string() + "' --quiet > /dev/null 2>&1").c_str());
  CHECK(WEXITSTATUS(status) == 1);  // the bundle fails the same way

  // Timing options travel with the bundle.
  Result timed = run_tool(
      "replay failing.safetensors --paths reference --atol 0 --rtol 0 --hot --warmup 1 --repeats 7 "
      "--save-failing bundles-timed");
  CHECK(timed.rc == 1);
  const std::string timed_command = read_file(work_dir() / "bundles-timed" / "failing" / "command.txt");
  CHECK(contains(timed_command, "--hot"));
  CHECK(contains(timed_command, "--warmup 1"));
  CHECK(contains(timed_command, "--repeats 7"));
  Result untimed = run_tool(
      "replay failing.safetensors --paths reference --atol 0 --rtol 0 --no-timing --save-failing bundles-untimed");
  CHECK(untimed.rc == 1);
  CHECK(contains(read_file(work_dir() / "bundles-untimed" / "failing" / "command.txt"), "--no-timing"));
  // The kernel override travels too.
  Result forced = run_tool(
      "replay failing.safetensors --paths reference --atol 0 --rtol 0 --save-failing bundles-mma",
      "PAGECHECK_ATTN_KERNEL=mma");
  CHECK(forced.rc == 1);
  const std::string forced_command = read_file(work_dir() / "bundles-mma" / "failing" / "command.txt");
  CHECK(forced_command.rfind("env PAGECHECK_ATTN_KERNEL=mma ", 0) == 0);
  const int forced_status =
      std::system(("sh '" + (work_dir() / "bundles-mma" / "failing" / "replay.sh").string() + "' --quiet > /dev/null 2>&1").c_str());
  CHECK(WEXITSTATUS(forced_status) == 1);

  auto outputs = pagecheck::read_safetensors(bundle / "outputs.safetensors");
  REQUIRE(outputs.ok());
  CHECK(outputs->tensors.count("reference.output") == 1);
  CHECK(outputs->tensors.count("reference.lse") == 1);
  auto saved = pagecheck::load_case_file(bundle / "case.safetensors");
  REQUIRE(saved.ok());
  CHECK(saved->recorded_output.has_value());
  CHECK(saved->recorded_output->dtype == pagecheck::DType::BF16);  // the original recording, not the reference
}

TEST_CASE("PAGECHECK_ATTN_KERNEL: mma and auto are accepted, anything else is a usage error") {
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_ATTN_KERNEL=mma").rc == 0);
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_ATTN_KERNEL=auto").rc == 0);
  const Result r = run_tool("run --preset mqa --paths reference", "PAGECHECK_ATTN_KERNEL=wgmma2");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "PAGECHECK_ATTN_KERNEL='wgmma2'"));
}

TEST_CASE("no progress line and no color in a pipe") {
  const Result r = run_tool("run --preset mqa --paths reference");
  CHECK(r.rc == 0);
  CHECK(!contains(r.err, "\r"));
  CHECK(!contains(r.err, "\x1b["));
  CHECK(!contains(r.out, "\x1b["));
}
