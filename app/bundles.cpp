#include "bundles.hpp"

#include <cstdlib>
#include <map>
#include <system_error>

#include <fmt/format.h>

#include "pagecheck/atomic_file.hpp"
#include "pagecheck/case_file.hpp"
#include "pagecheck/external_names.hpp"
#include "pagecheck/safetensors.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,+-@%") ==
                          std::string::npos)
    return arg;
  std::string out = "'";
  for (char ch : arg) {
    if (ch == '\'') out += "'\\''";
    else out += ch;
  }
  return out + "'";
}

std::string replay_command(const std::string& case_file, const std::vector<std::string>& paths, const ExecOptions& exec,
                           const Invocation& invocation) {
  std::string paths_arg;
  for (const auto& p : paths) paths_arg += (paths_arg.empty() ? "" : ",") + p;
  std::vector<std::string> args;
  // The kernel override and the device-memory cap of the environment
  // (docs/cli.md) are part of how the case ran.
  for (const char* variable : {"PAGECHECK_ATTN_KERNEL", "PAGECHECK_DECODE_KERNEL", "PAGECHECK_DECODE_TMA",
                               "PAGECHECK_DEVICE_MEMORY_LIMIT"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') continue;
    if (args.empty()) args.emplace_back("env");
    args.push_back(std::string(variable) + "=" + value);
  }
  args.insert(args.end(),
              {invocation.executable.empty() ? "pagecheck" : invocation.executable, "replay", case_file, "--paths",
               paths_arg});
  if (exec.atol) args.insert(args.end(), {"--atol", fmt::format("{}", *exec.atol)});
  if (exec.rtol) args.insert(args.end(), {"--rtol", fmt::format("{}", *exec.rtol)});
  if (!exec.plan.empty()) args.insert(args.end(), {"--plan", exec.plan});
  if (!exec.tuning_file.empty())
    args.insert(args.end(), {"--tuning", fs::absolute(exec.tuning_file).lexically_normal().string()});
  // The kernel libraries it ran with (prefixes kept), so that its ext:<name> paths resolve.
  for (const auto& kernel : exec.kernels) args.insert(args.end(), {"--kernel", absolute_kernel_argument(kernel)});
  if (exec.device != 0) args.insert(args.end(), {"--device", std::to_string(exec.device)});
  if (exec.require_gpu) args.emplace_back("--require-gpu");
  if (exec.fail_on_skip) args.emplace_back("--fail-on-skip");
  if (exec.no_checks) args.emplace_back("--no-checks");
  if (exec.check_batch_invariance) args.emplace_back("--check-batch-invariance");
  // Timing as it ran, so a timing regression replays the same way.
  if (exec.no_timing) {
    args.emplace_back("--no-timing");
  } else {
    if (exec.hot) args.emplace_back("--hot");
    if (exec.warmup != ExecOptions{}.warmup) args.insert(args.end(), {"--warmup", std::to_string(exec.warmup)});
    if (exec.repeats != ExecOptions{}.repeats) args.insert(args.end(), {"--repeats", std::to_string(exec.repeats)});
  }
  std::string command;
  for (const auto& a : args) command += (command.empty() ? "" : " ") + shell_quote(a);
  return command;
}

std::string safe_dir_name(const std::string& name) {
  std::string out;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                    ch == '_' || ch == '.';
    out += ok ? ch : '_';
  }
  if (out.empty() || out == "." || out == "..") out = "case";
  return out;
}

std::string unique_bundle_name(const std::string& case_name, std::set<std::string>& taken) {
  std::string dir_name = safe_dir_name(case_name);
  for (int n = 2; taken.count(dir_name); ++n) dir_name = safe_dir_name(case_name) + "-" + std::to_string(n);
  taken.insert(dir_name);
  return dir_name;
}

namespace {

Tensor float_tensor(const std::vector<float>& values, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  if (n != static_cast<std::int64_t>(values.size())) shape = {static_cast<std::int64_t>(values.size())};
  return Tensor::from_vector<float>(DType::F32, std::move(shape), values);
}

}  // namespace

Expected<fs::path> save_bundle(const fs::path& root, const std::string& dir_name, const Case& c,
                               const CaseOutcome& outcome, const std::vector<std::string>& paths,
                               const ExecOptions& exec, const Invocation& invocation, const RunReport& run) {
  const fs::path dir = root / dir_name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return runtime_error(fmt::format("cannot create the bundle folder: {}", ec.message()), dir.string());

  // The case as it ran, with its own recorded output if it had one.
  PC_TRY(save_case_file(c, dir / "case.safetensors"));

  std::map<std::string, Tensor> tensors;
  for (const auto& o : outcome.outputs) {
    tensors.emplace(o.path + ".output", float_tensor(o.output, {c.num_tokens(), c.q_heads(), c.v_head_dim()}));
    if (!o.lse.empty()) tensors.emplace(o.path + ".lse", float_tensor(o.lse, {c.num_tokens(), c.q_heads()}));
  }
  if (!tensors.empty())
    PC_TRY(write_safetensors(dir / "outputs.safetensors", tensors,
                             {{"case", c.name}, {"command", invocation.command_line}}));

  RunReport one;
  one.tool_version = run.tool_version;
  one.command_line = run.command_line;
  one.device = run.device;
  one.fail_on_skip = run.fail_on_skip;
  one.cases.push_back(outcome.report);
  PC_TRY(write_json((dir / "report.json").string(), one));

  const std::string command = replay_command(fs::absolute(dir / "case.safetensors").lexically_normal().string(), paths,
                                               exec, invocation);

  PC_TRY(replace_file_with_text(dir / "command.txt", command + "\n", "command.txt"));
  PC_TRY(replace_file_with_text(dir / "replay.sh",
                                "#!/bin/sh\n# Replays failing case " + c.name + " (written by: " +
                                    invocation.command_line + ")\nexec " + command + " \"$@\"\n",
                                "replay.sh"));
  fs::permissions(dir / "replay.sh", fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::add, ec);
  return dir;
}

}  // namespace pagecheck::app
