// CLI smoke tests on the real binary: exit codes, messages, JSON fields,
// round trips and failure bundles. Each test runs `pagecheck` as a user would
// (stdout and stderr to files, so never a terminal) and checks what it left.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

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

#include "cli_run.hpp"

namespace fs = std::filesystem;

namespace {

using namespace cli_test;

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// Runs the binary with its stdout a pipe whose reader is already gone, as
// after `pagecheck run | head -3` once head exits, and SIGPIPE at its default
// action, as a shell leaves it. Returns the exit code, or 128 + the signal.
int run_with_reader_gone(const std::vector<std::string>& args) {
  const std::string dir = work_dir().string();
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::close(fds[0]);  // the reader is gone before the first write
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGPIPE, SIG_DFL);
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::dup2(fds[1], STDOUT_FILENO);
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, STDERR_FILENO);
    std::vector<char*> argv = {const_cast<char*>(PAGECHECK_BIN)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(PAGECHECK_BIN, argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

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
  CHECK(contains(r.out, "chunked (q_len 4294967295)"));  // not a wrapped -1 read as decode
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

// A runtime's kernel that wrote NaN must fail its replay: the recorded
// output is judged, never skipped as "non-finite input".
TEST_CASE("a recorded output holding NaN or Inf fails the replay (exit 1)") {
  REQUIRE(run_tool("gen -o nan_rec.safetensors --seqs 2 --seq-len 24 --head-dim 64 --with-output").rc == 0);
  auto c = pagecheck::load_case_file(work_dir() / "nan_rec.safetensors");
  REQUIRE(c.ok());
  REQUIRE(c->recorded_output.has_value());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> values(static_cast<std::size_t>(c->recorded_output->numel()));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(c->recorded_output->at(i));
    values[values.size() / 2] = bad;
    pagecheck::Case broken = *c;
    broken.recorded_output = pagecheck::Tensor::from_vector<float>(pagecheck::DType::F32, c->recorded_output->shape, values);
    REQUIRE(pagecheck::save_case_file(broken, work_dir() / "nan_rec_bad.safetensors").ok());
    const Result r = run_tool("replay nan_rec_bad.safetensors --paths reference");
    CHECK(r.rc == 1);
    CHECK(contains(r.out, "recorded"));
  }
}

// A description or metadata value with terminal escapes is printed escaped.
TEST_CASE("inspect and replay print a case's escape sequences escaped") {
  REQUIRE(run_tool("gen -o esc.safetensors --seqs 1 --seq-len 8 --head-dim 64").rc == 0);
  auto c = pagecheck::load_case_file(work_dir() / "esc.safetensors");
  REQUIRE(c.ok());
  c->params.description = "evil\x1b[2J\x1b]0;title\x07";
  c->params.extra_metadata["note"] = "bell\x07";
  REQUIRE(pagecheck::save_case_file(*c, work_dir() / "esc_bad.safetensors").ok());
  for (const char* command : {"inspect esc_bad.safetensors", "replay esc_bad.safetensors --paths reference"}) {
    CAPTURE(command);
    const Result r = run_tool(command);
    CHECK(r.out.find('\x1b') == std::string::npos);
    CHECK(r.out.find('\x07') == std::string::npos);
    CHECK(contains(r.out, "evil\\x1b[2J"));
  }
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
  // So does --fail-on-skip, and the bundle's report says it was on.
  Result strict = run_tool(
      "replay failing.safetensors --paths reference --atol 0 --rtol 0 --fail-on-skip --save-failing bundles-strict");
  CHECK(strict.rc == 1);
  CHECK(contains(read_file(work_dir() / "bundles-strict" / "failing" / "command.txt"), " --fail-on-skip"));
  CHECK(read_json(work_dir() / "bundles-strict" / "failing" / "report.json")["fail_on_skip"] == true);
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
  // So does the device-memory cap, after the kernel override, in one env.
  Result capped = run_tool(
      "replay failing.safetensors --paths reference --atol 0 --rtol 0 --save-failing bundles-capped",
      "PAGECHECK_ATTN_KERNEL=mma PAGECHECK_DEVICE_MEMORY_LIMIT=512M");
  CHECK(capped.rc == 1);
  CHECK(read_file(work_dir() / "bundles-capped" / "failing" / "command.txt")
            .rfind("env PAGECHECK_ATTN_KERNEL=mma PAGECHECK_DEVICE_MEMORY_LIMIT=512M ", 0) == 0);

  auto outputs = pagecheck::read_safetensors(bundle / "outputs.safetensors");
  REQUIRE(outputs.ok());
  CHECK(outputs->tensors.count("reference.output") == 1);
  CHECK(outputs->tensors.count("reference.lse") == 1);
  auto saved = pagecheck::load_case_file(bundle / "case.safetensors");
  REQUIRE(saved.ok());
  CHECK(saved->recorded_output.has_value());
  CHECK(saved->recorded_output->dtype == pagecheck::DType::BF16);  // the original recording, not the reference
}

TEST_CASE("PAGECHECK_DECODE_KERNEL: mma and simt are accepted, anything else is a usage error") {
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_DECODE_KERNEL=mma").rc == 0);
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_DECODE_KERNEL=simt").rc == 0);
  const Result r = run_tool("run --preset mqa --paths reference", "PAGECHECK_DECODE_KERNEL=tensor");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "PAGECHECK_DECODE_KERNEL='tensor'"));
}

TEST_CASE("PAGECHECK_DECODE_TMA: 0 and 1 are accepted, anything else is a usage error") {
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_DECODE_TMA=0").rc == 0);
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_DECODE_TMA=1").rc == 0);
  const Result r = run_tool("run --preset mqa --paths reference", "PAGECHECK_DECODE_TMA=off");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "PAGECHECK_DECODE_TMA='off'"));
}

TEST_CASE("PAGECHECK_ATTN_KERNEL: mma, wgmma and auto are accepted, anything else is a usage error") {
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_ATTN_KERNEL=mma").rc == 0);
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_ATTN_KERNEL=wgmma").rc == 0);
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_ATTN_KERNEL=auto").rc == 0);
  const Result r = run_tool("run --preset mqa --paths reference", "PAGECHECK_ATTN_KERNEL=wgmma2");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "PAGECHECK_ATTN_KERNEL='wgmma2'"));
}

TEST_CASE("PAGECHECK_DEVICE_MEMORY_LIMIT: a size is accepted, anything else is a usage error before anything runs") {
  // Without a GPU path running the cap changes nothing (the check is made
  // per GPU path, on a device: the device check runs it).
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_DEVICE_MEMORY_LIMIT=1M").rc == 0);
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_DEVICE_MEMORY_LIMIT=").rc == 0);
  const Result r = run_tool("run --preset mqa --paths reference --json bad-limit.json", "PAGECHECK_DEVICE_MEMORY_LIMIT=1MB");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "PAGECHECK_DEVICE_MEMORY_LIMIT = '1MB' is not a size (bytes, or a number with K, M, G or T)"));
  CHECK(!fs::exists(work_dir() / "bad-limit.json"));
}

TEST_CASE("no progress line and no color in a pipe") {
  const Result r = run_tool("run --preset mqa --paths reference");
  CHECK(r.rc == 0);
  CHECK(!contains(r.err, "\r"));
  CHECK(!contains(r.err, "\x1b["));
  CHECK(!contains(r.out, "\x1b["));
}

TEST_CASE("integer options say what they want, for 0, words and negative numbers") {
  for (const char* value : {"0", "abc", "-3", "1.5"}) {
    CAPTURE(value);
    const Result r = run_tool(std::string("run --seqs ") + value);
    CHECK(r.rc == 2);
    CHECK_MESSAGE(contains(r.err, fmt::format("--seqs: must be a positive integer, got '{}'", value)), r.err);
    CHECK(!contains(r.err, "179769"));  // not CLI11's double range in 300 digits
  }
  Result r = run_tool("run --warmup -1");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--warmup: must be an integer >= 0, got '-1'"));
  r = run_tool("run --seq-lens 3,x,5");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--seq-lens: must be a positive integer, got 'x'"));
  r = run_tool("run --repeats 99999999999");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--repeats: must be a positive integer no larger than 2147483647"));
  r = run_tool("tune -o t.json --q-heads 0");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--q-heads: must be a positive integer, got '0'"));
  r = run_tool("run --scale abc");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--scale: must be a positive number, got 'abc'"));
}

TEST_CASE("a word that is not a subcommand is named, with the nearest subcommand") {
  Result r = run_tool("replya x");
  CHECK(r.rc == 2);
  CHECK_MESSAGE(contains(r.err, "'replya' is not a subcommand; did you mean 'replay'?"), r.err);
  CHECK(!contains(r.err, "A subcommand is required"));
  r = run_tool("--bogus");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "unknown option '--bogus'"));
  r = run_tool("--inspect x.safetensors");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "nearest subcommand: 'inspect'"));
  r = run_tool("");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "a subcommand is required: run, replay, gen, inspect, tune, bench"));
  // An option the subcommand lacks: named, with the nearest it has.
  r = run_tool("run --seqz 4");
  CHECK(r.rc == 2);
  CHECK_MESSAGE(contains(r.err, "run has no option '--seqz'; did you mean '--seqs'?"), r.err);
  r = run_tool("replay x.safetensors --jsno=r.json");
  CHECK(r.rc == 2);
  CHECK_MESSAGE(contains(r.err, "replay has no option '--jsno'; did you mean '--json'?"), r.err);
}

TEST_CASE("contradictory options are refused") {
  Result r = run_tool("run --mode decode --q-len 5 --paths reference");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--mode decode"));
  CHECK(contains(r.err, "--q-len 5"));
  CHECK(!contains(r.err, "--mode: --mode"));
  r = run_tool("run --mode prefill --q-len-max 4 --paths reference");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--q-len-max 4"));
  CHECK(run_tool("run --mode decode --q-len 1 --seqs 2 --seq-len 20 --head-dim 64 --paths reference").rc == 0);
  r = run_tool("gen -o contradiction.safetensors --output-dtype F16");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--output-dtype requires --with-output"));
  CHECK(!fs::exists(work_dir() / "contradiction.safetensors"));
  r = run_tool("run --preset mqa --paths reference --no-timing --repeats 5");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--no-timing"));
  CHECK(run_tool("run --preset mqa --paths reference --seq-len 40 --boundary").rc == 2);
}

TEST_CASE("flags on top of a preset name the variant") {
  const Result r = run_tool(
      "run --preset mqa --preset llama3-8b --seqs 2 --seq-len 40 --non-causal --paths reference --json variant.json");
  REQUIRE(r.rc == 0);
  const auto j = read_json(work_dir() / "variant.json");
  REQUIRE(j["cases"].size() == 2);
  CHECK(j["cases"][0]["name"] == "mqa+seqs2+seq-len40+non-causal");
  CHECK(j["cases"][1]["name"] == "llama3-8b+seqs2+seq-len40+non-causal");
  // The preset alone keeps its name; --name still wins.
  REQUIRE(run_tool("run --preset mqa --seqs 2 --name mine --paths reference --json named.json").rc == 0);
  CHECK(read_json(work_dir() / "named.json")["cases"][0]["name"] == "mine");
}

TEST_CASE("the geometry line names the mode in the words of --mode") {
  const std::string base = "--seqs 3 --seq-len 40 --head-dim 64 --paths reference --json ";
  const auto geometry = [&](const std::string& mode_args, const std::string& json) {
    const Result r = run_tool("run " + mode_args + " " + base + json);
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    return read_json(work_dir() / json)["cases"][0]["geometry"].get<std::string>();
  };
  CHECK(contains(geometry("--mode decode", "mode_decode.json"), ", decode, "));
  CHECK(contains(geometry("--mode prefill", "mode_prefill.json"), ", prefill (q_len 40), "));
  CHECK(contains(geometry("--mode chunked --q-len 5", "mode_chunked.json"), ", chunked (q_len 5), "));
  CHECK(contains(geometry("--q-len 5", "mode_implied.json"), ", chunked (q_len 5), "));
  CHECK(contains(geometry("--mode mixed --q-len 5", "mode_mixed.json"), ", mixed (q_len 1..5), "));
  // Prefill over lengths that include 1 is still prefill.
  const Result r = run_tool("run --mode prefill --seqs 3 --seq-lens 1,7,30 --head-dim 64 --paths reference --json p1.json");
  REQUIRE(r.rc == 0);
  CHECK(contains(read_json(work_dir() / "p1.json")["cases"][0]["geometry"].get<std::string>(), ", prefill (q_len 1..30), "));
}

// Whether --help shows `value` as the default of `option`: CLI11 2.1 writes
// "--repeats INT:POSITIVE=20", 2.4 "--repeats INT:POSITIVE [20]".
bool shows_default(const std::string& help, const std::string& option, const std::string& value) {
  return contains(help, option + "=" + value) || contains(help, option + " [" + value + "]");
}

TEST_CASE("--help shows every default") {
  Result r = run_tool("run --help");
  REQUIRE(r.rc == 0);
  CHECK(shows_default(r.out, "--repeats INT:POSITIVE", "20"));
  CHECK(shows_default(r.out, "--warmup INT:NONNEGATIVE", "3"));
  CHECK(shows_default(r.out, "--seed UINT:NONNEGATIVE", "1"));
  CHECK(contains(r.out, "--fail-on-skip"));
  CHECK(contains(r.out, "default: the preset's, else 4"));  // --seqs
  r = run_tool("gen --help");
  CHECK(shows_default(r.out, "--output-dtype TEXT:{F32,F16,BF16}", "F32"));
  r = run_tool("tune --help");
  CHECK(shows_default(r.out, "--q-heads INT:POSITIVE", "32"));
}

TEST_CASE("inspect takes several files; inspect and replay say the same of a folder") {
  REQUIRE(run_tool("gen -o insp_a.safetensors --seqs 2 --seq-len 20 --head-dim 64").rc == 0);
  REQUIRE(run_tool("gen -o insp_b.safetensors --seqs 3 --seq-len 30 --head-dim 64").rc == 0);
  Result r = run_tool("inspect insp_a.safetensors insp_b.safetensors");
  CHECK(r.rc == 0);
  CHECK(count_of(r.out, "file:      ") == 2);
  CHECK(count_of(r.out, "valid:     yes") == 2);
  r = run_tool("inspect insp_a.safetensors missing.safetensors insp_b.safetensors");
  CHECK(r.rc == 3);
  CHECK(count_of(r.out, "valid:     yes") == 2);  // the files after a bad one are inspected too
  CHECK(contains(r.err, "missing.safetensors: no such file"));

  fs::create_directories(work_dir() / "a_folder");
  const Result inspected = run_tool("inspect a_folder");
  const Result replayed = run_tool("replay a_folder --paths reference");
  CHECK(inspected.rc == 3);
  CHECK(replayed.rc == 3);
  const std::string message = "pagecheck: a_folder: is a directory, not a case file\n";
  CHECK_MESSAGE(contains(inspected.err, message), inspected.err);
  CHECK_MESSAGE(contains(replayed.err, message), replayed.err);
}

TEST_CASE("messages name what they are about once") {
  Result r = run_tool("run --preset mqa --plan sideways --paths reference");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "pagecheck: --plan: unknown plan 'sideways'"));
  CHECK(!contains(r.err, "--plan: --plan:"));
  r = run_tool("run --preset mqa --paths reference --tuning no-such-tuning.json");
  CHECK(r.rc == 3);
  CHECK(count_of(r.err, "no-such-tuning.json") == 1);

  // gen into a place that cannot hold a file names the path asked for, not a temporary.
  { std::ofstream(work_dir() / "plain_file.txt") << "x"; }
  r = run_tool("gen -o plain_file.txt/case.safetensors --seqs 2 --seq-len 20 --head-dim 64");
  CHECK(r.rc == 4);
  CHECK_MESSAGE(contains(r.err, "plain_file.txt/case.safetensors"), r.err);
  CHECK(!contains(r.err, ".tmp"));
  // A missing folder is made.
  CHECK(run_tool("gen -o new_folder/deeper/case.safetensors --seqs 2 --seq-len 20 --head-dim 64").rc == 0);
  CHECK(fs::exists(work_dir() / "new_folder" / "deeper" / "case.safetensors"));
}

TEST_CASE("the end of a run lists what failed, on stdout, and on stderr under -q") {
  REQUIRE(run_tool("gen -o listed.safetensors --seqs 2 --seq-len 24 --head-dim 64 --with-output --output-dtype BF16").rc ==
          0);
  Result r = run_tool("replay listed.safetensors --paths reference --atol 0 --rtol 0");
  CHECK(r.rc == 1);
  const auto at = r.out.rfind("failed (1 of 1 case):");
  REQUIRE(at != std::string::npos);
  CHECK(contains(r.out.substr(at), "listed: reference: fail: differs from the recorded output"));
  CHECK(r.out.rfind("1 case, 1 path runs") < at);  // after the summary: the last thing printed
  r = run_tool("replay listed.safetensors --paths reference --atol 0 --rtol 0 -q");
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "listed: reference: fail: differs from the recorded output"));
  CHECK(!contains(r.out, "differs"));
  // Nothing failed: no list.
  r = run_tool("replay listed.safetensors --paths reference");
  CHECK(r.rc == 0);
  CHECK(!contains(r.out, "failed ("));
}

TEST_CASE("report paths are checked before the run; folders are made") {
  Result r = run_tool("run --preset mqa --paths reference --json made/for/the/report.json --junit made/junit.xml");
  CHECK(r.rc == 0);
  CHECK(fs::exists(work_dir() / "made" / "for" / "the" / "report.json"));
  CHECK(fs::exists(work_dir() / "made" / "junit.xml"));
  { std::ofstream(work_dir() / "not_a_folder") << "x"; }
  r = run_tool("run --preset mqa --paths reference --csv not_a_folder/report.csv");
  CHECK(r.rc == 4);
  CHECK(contains(r.err, "--csv: not_a_folder/report.csv"));
  CHECK(!contains(r.out, "mqa"));  // refused before the first case ran
  fs::create_directories(work_dir() / "a_report_folder");
  r = run_tool("run --preset mqa --paths reference --json a_report_folder");
  CHECK(r.rc == 4);
  CHECK(!contains(r.out, "mqa"));
}

TEST_CASE("--json - writes the report to stdout and the table to stderr") {
  Result r = run_tool("run --preset mqa --paths reference --json -");
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);  // stdout is the report alone
  CHECK(j["cases"][0]["name"] == "mqa");
  CHECK(contains(r.err, "1 case, 1 path runs"));
  CHECK(!fs::exists(work_dir() / "-"));
  r = run_tool("run --preset mqa --paths reference --junit - -q");
  CHECK(r.rc == 0);
  CHECK(r.out.rfind("<?xml", 0) == 0);
  r = run_tool("run --preset mqa --paths reference --json - --csv -");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "only one report can"));
}

TEST_CASE("a reader that goes away does not stop the run or its reports") {
  fs::remove(work_dir() / "piped.json");
  const int rc = run_with_reader_gone({"run", "--preset", "mqa", "--preset", "llama3-8b", "--paths", "reference",
                                       "--json", "piped.json"});
  CHECK(rc == 0);  // not 128 + SIGPIPE
  REQUIRE(fs::exists(work_dir() / "piped.json"));
  CHECK(read_json(work_dir() / "piped.json")["cases"].size() == 2);
}

TEST_CASE("without a GPU: said once, a warning when no GPU path ran, --fail-on-skip makes it a failure") {
  if (have_gpu()) {
    MESSAGE("a GPU is present: the no-GPU behaviour is not testable here");
    return;
  }
  Result r = run_tool("run --preset mqa --preset llama3-8b");
  CHECK(r.rc == 0);
  CHECK(count_of(r.out, "built without CUDA") + count_of(r.out, "no CUDA device") == 1);  // the line at the top
  CHECK(count_of(r.out, "skipped    direct, split, auto, prefill, fmha\n") == 2);         // one line per case
  CHECK(contains(r.err, "warning: no GPU path ran"));
  CHECK(contains(r.err, "only the reference was checked"));

  r = run_tool("run --preset mqa --paths split --json split_only.json");
  CHECK(r.rc == 0);
  CHECK(contains(r.err, "warning: no GPU path ran"));
  CHECK(contains(r.err, "nothing was checked"));
  CHECK(!contains(run_tool("run --preset mqa --paths reference").err, "warning"));  // only the reference was asked for

  r = run_tool("run --preset mqa --paths split --fail-on-skip --json fail_on_skip.json --junit fail_on_skip.xml");
  CHECK(r.rc == 1);
  CHECK(contains(r.out, "mqa: split: skipped (--fail-on-skip)"));
  const auto j = read_json(work_dir() / "fail_on_skip.json");
  CHECK(j["exit_code"] == 1);
  CHECK(j["fail_on_skip"] == true);
  CHECK(contains(read_file(work_dir() / "fail_on_skip.xml"), "<failure"));
  CHECK(run_tool("run --preset mqa --paths reference --fail-on-skip").rc == 0);

  // --require-gpu: exit 4, and the report still says why.
  r = run_tool("run --preset mqa --require-gpu --json require_gpu.json");
  CHECK(r.rc == 4);
  const auto rg = read_json(work_dir() / "require_gpu.json");
  CHECK(rg["exit_code"] == 4);
  REQUIRE(rg["errors"].size() == 1);
  CHECK(contains(rg["errors"][0].get<std::string>(), "require-gpu"));
}

TEST_CASE("bench and tune write their --json report with the reason when they cannot run") {
  if (have_gpu()) {
    MESSAGE("a GPU is present: the no-GPU behaviour is not testable here");
    return;
  }
  Result r = run_tool("bench --shapes decode --json bench_nogpu/report.json --junit bench_nogpu/report.xml");
  CHECK(r.rc == 4);
  auto j = read_json(work_dir() / "bench_nogpu" / "report.json");
  CHECK(j["exit_code"] == 4);
  REQUIRE(j["errors"].size() == 1);
  CHECK(!j["errors"][0].get<std::string>().empty());
  CHECK(contains(read_file(work_dir() / "bench_nogpu" / "report.xml"), "<error"));
  r = run_tool("tune -o tune_nogpu.json --json tune_nogpu_report.json");
  CHECK(r.rc == 4);
  j = read_json(work_dir() / "tune_nogpu_report.json");
  CHECK(j["exit_code"] == 4);
  REQUIRE(j["errors"].size() == 1);
  CHECK(!fs::exists(work_dir() / "tune_nogpu.json"));  // no tuning file from no measurement
}

TEST_CASE("off a terminal, progress lines come at most once per interval; short runs print none") {
  Result r = run_tool("run --preset mqa --preset llama3-8b --paths reference");
  CHECK(r.rc == 0);
  CHECK(!contains(r.err, "pagecheck: case "));
  r = run_tool("run --preset mqa --preset llama3-8b --paths reference", "PAGECHECK_PROGRESS_SECONDS=0");
  CHECK(r.rc == 0);
  CHECK(contains(r.err, "pagecheck: case 1/2 (mqa) "));
  CHECK(contains(r.err, "pagecheck: case 2/2 (llama3-8b) "));
  CHECK(!contains(r.err, "\r"));
  CHECK(!contains(run_tool("run --preset mqa --paths reference -q", "PAGECHECK_PROGRESS_SECONDS=0").err, "case 1/1"));
  CHECK(run_tool("run --preset mqa --paths reference", "PAGECHECK_PROGRESS_SECONDS=soon").rc == 2);
}

TEST_CASE("off a terminal, one long step still prints a progress line every interval") {
  // A reference over 16 x 6000 tokens of Llama-3-8B decode: seconds in one
  // step, against an interval of a tenth of a second.
  const Result r = run_tool("run --preset llama3-8b --seqs 16 --seq-len 6000 --paths reference",
                            "PAGECHECK_PROGRESS_SECONDS=0.1");
  CHECK(r.rc == 0);
  std::size_t lines = 0;
  for (std::size_t at = r.err.find("(llama3-8b+seqs16+seq-len6000) reference ("); at != std::string::npos;
       at = r.err.find("(llama3-8b+seqs16+seq-len6000) reference (", at + 1))
    ++lines;
  CAPTURE(r.err);
  CHECK(lines >= 2);
  CHECK(contains(r.err, " s in this step)"));
}

// reduce (docs/cli.md "reduce"): a recorded output wrong in one element of
// one (sequence, head, token) reduces to that element's sequence, head and
// the context its token sees, and still fails the same way.
TEST_CASE("reduce cuts a planted recorded-output failure down to one sequence, head and token") {
  REQUIRE(run_tool("gen -o plant.safetensors --seqs 4 --q-heads 8 --kv-heads 2 --head-dim 64 --seq-len 40 "
                   "--mode prefill --with-output")
              .rc == 0);
  auto c = pagecheck::load_case_file(work_dir() / "plant.safetensors");
  REQUIRE(c.ok());
  REQUIRE(c->recorded_output.has_value());
  const std::int64_t seq = 2, token_in_seq = 5, head = 5, dim = 3, heads = 8, width = 64;
  const std::int64_t token = c->query_start_loc[seq] + token_in_seq;
  std::vector<float> values(static_cast<std::size_t>(c->recorded_output->numel()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(c->recorded_output->at(i));
  values[static_cast<std::size_t>((token * heads + head) * width + dim)] += 1.0f;
  pagecheck::Case bad = *c;
  bad.recorded_output = pagecheck::Tensor::from_vector<float>(pagecheck::DType::F32, c->recorded_output->shape, values);
  REQUIRE(pagecheck::save_case_file(bad, work_dir() / "plant_bad.safetensors").ok());
  REQUIRE(run_tool("replay plant_bad.safetensors --paths reference").rc == 1);

  fs::remove(work_dir() / "plant_bad.reduced.safetensors");
  const Result r = run_tool("reduce plant_bad.safetensors --paths reference");
  INFO(r.out, r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "still fails on reference (recorded output beyond tolerance)"));
  CHECK(contains(r.out, "before: 4 seqs"));
  CHECK(contains(r.out, "after:  1 seq,"));
  CHECK(contains(r.err, "pagecheck: reduce: test "));  // progress
  auto reduced = pagecheck::load_case_file(work_dir() / "plant_bad.reduced.safetensors");
  REQUIRE(reduced.ok());
  CHECK(reduced->num_seqs() == 1);
  CHECK(reduced->q_heads() == 1);
  CHECK(reduced->kv_heads() == 1);
  CHECK(reduced->num_tokens() == 1);
  CHECK(reduced->seq_lens[0] == token_in_seq + 1);  // causal: the token sees keys 0..5
  CHECK(reduced->num_blocks() == 1);
  CHECK(reduced->params.extra_metadata["reduced_from"] == "plant_bad.safetensors");
  // The kept query row and recorded output/LSE row are the original's, bitwise.
  REQUIRE(reduced->recorded_output.has_value());
  REQUIRE(reduced->recorded_lse.has_value());
  for (std::int64_t d = 0; d < width; ++d) {
    const auto at = static_cast<std::size_t>((token * heads + head) * width + d);
    CHECK(reduced->recorded_output->at(static_cast<std::size_t>(d)) == bad.recorded_output->at(at));
    CHECK(reduced->query.at(static_cast<std::size_t>(d)) == bad.query.at(at));
  }
  CHECK(reduced->recorded_lse->at(0) == bad.recorded_lse->at(static_cast<std::size_t>(token * heads + head)));

  // The printed replay command reproduces the failure.
  const auto at = r.out.find("replay: ");
  REQUIRE(at != std::string::npos);
  const std::string command = r.out.substr(at + 8, r.out.find('\n', at) - at - 8);
  CHECK(contains(command, "plant_bad.reduced.safetensors --paths reference"));
  const Result replayed = run_tool(command.substr(command.find(" replay ") + 1));
  CHECK(replayed.rc == 1);
  CHECK(contains(replayed.out, "differs from the recorded output"));

  // -o, and a bounded budget that still writes the best case found so far.
  const Result budget = run_tool("reduce plant_bad.safetensors --paths reference -o cut/small.safetensors --max-tests 3 -q");
  CHECK(budget.rc == 0);
  CHECK(contains(budget.out, "the budget of 3 tests ran out"));
  CHECK(budget.err.empty());
  CHECK(fs::exists(work_dir() / "cut" / "small.safetensors"));
}

TEST_CASE("reduce says when there is nothing to reduce, and refuses what it cannot do") {
  REQUIRE(run_tool("gen -o fine.safetensors --seqs 2 --seq-len 24 --head-dim 64 --with-output").rc == 0);
  Result r = run_tool("reduce fine.safetensors --paths reference");
  CHECK(r.rc == 3);
  CHECK(contains(r.err, "fine.safetensors does not fail on path reference: nothing to reduce"));
  CHECK(!fs::exists(work_dir() / "fine.reduced.safetensors"));
  r = run_tool("reduce fine.safetensors");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "give --paths P"));
  CHECK(run_tool("reduce fine.safetensors --paths reference,split").rc == 2);
  CHECK(run_tool("reduce fine.safetensors --paths nosuch").rc == 2);
  r = run_tool("reduce fine.safetensors --paths recorded");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--paths reference"));
  CHECK(run_tool("reduce fine.safetensors --paths reference -o fine.safetensors").rc == 2);
  CHECK(run_tool("reduce missing.safetensors --paths reference").rc == 3);
  CHECK(run_tool("reduce fine.safetensors --paths reference --max-tests 0").rc == 2);
  if (!have_gpu()) {
    r = run_tool("reduce fine.safetensors --paths split");
    CHECK(r.rc == 4);
    CHECK(contains(r.err, "path split cannot run here"));
  }
}

TEST_CASE("--kernel with a malformed prefix is a usage error naming it, in every build") {
  auto r = run_tool("run --seqs 1 --seq-len 8 --kernel =libx.so");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--kernel: '=libx.so': the prefix before '='"));
  r = run_tool("run --seqs 1 --seq-len 8 --kernel old=");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "no library file after '='"));
  // A well-formed prefix gets as far as the library itself.
  r = run_tool("run --seqs 1 --seq-len 8 --kernel old=no-such-lib.so");
  CHECK((r.rc == 2 || r.rc == 3));
  CHECK((contains(r.err, "built without CUDA") || contains(r.err, "no-such-lib.so: no such file")));
}
