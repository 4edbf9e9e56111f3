#include "isolation.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bundles.hpp"
#include "child_process.hpp"
#include "evaluate.hpp"
#include "gpu_setup.hpp"
#include "interrupts.hpp"
#include "pagecheck/error_map.hpp"
#include "pagecheck/report_read.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kContextLost = 75;  // the worker's exit code after a lost context

// Where a worker starts and what its supervisor decided before it did.
struct WorkerState {
  std::size_t start = 0;  // position in plan.selected
  std::map<std::int64_t, std::map<std::string, std::string>> errors;  // case index -> path -> reason
  std::map<std::string, std::string> skipped;                         // path -> reason
  std::set<std::string> bundle_names;
  bool error_maps = false;  // --html: the worker keeps the comparisons' error maps and sends them
  std::string command_line;  // the user's command, for the bundles (the worker's own is not)
};

json to_json(const WorkerState& s) {
  json errors = json::array();
  for (const auto& [index, paths] : s.errors)
    for (const auto& [path, reason] : paths) errors.push_back({{"case", index}, {"path", path}, {"reason", reason}});
  return {{"start", s.start},
          {"errors", errors},
          {"skipped", s.skipped},
          {"bundles", s.bundle_names},
          {"error_maps", s.error_maps},
          {"command", s.command_line}};
}

Expected<WorkerState> read_state(const fs::path& file) {
  std::ifstream f(file);
  if (!f) return runtime_error("cannot read the worker state", file.string());
  try {
    const json j = json::parse(f);
    WorkerState s;
    s.start = j.at("start").get<std::size_t>();
    for (const auto& e : j.at("errors"))
      s.errors[e.at("case").get<std::int64_t>()][e.at("path").get<std::string>()] = e.at("reason").get<std::string>();
    s.skipped = j.at("skipped").get<std::map<std::string, std::string>>();
    s.bundle_names = j.at("bundles").get<std::set<std::string>>();
    s.error_maps = j.at("error_maps").get<bool>();
    s.command_line = j.at("command").get<std::string>();
    return s;
  } catch (const json::exception& e) {
    return runtime_error(fmt::format("not a worker state: {}", e.what()), file.string());
  }
}

// One line of the journal, in one write so that a crash never leaves half
// of one behind a whole one.
class Journal {
 public:
  explicit Journal(const fs::path& file) : fd_(::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644)) {}
  ~Journal() {
    if (fd_ >= 0) ::close(fd_);
  }
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  bool ok() const { return fd_ >= 0; }
  void write(const json& line) {
    const std::string text = line.dump() + "\n";
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
};

// The error maps of --html (error_map.hpp), which the JSON report does not
// carry, travel beside a case's report: one entry per path row. Non-finite
// numbers as strings, which JSON has no other way to hold.
json number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

double number_from(const json& j) {
  if (!j.is_string()) return j.get<double>();
  const std::string text = j.get<std::string>();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

json grid_json(const ErrorGrid& g) {
  json ratio = json::array();
  for (const float r : g.ratio) ratio.push_back(number(r));
  return {{"rows", {g.rows.items, g.rows.per_bin}}, {"cols", {g.cols.items, g.cols.per_bin}}, {"ratio", ratio},
          {"flags", g.flags}};
}

ErrorGrid grid_from(const json& j) {
  ErrorGrid g;
  g.rows.items = j["rows"][0].get<std::int64_t>();
  g.rows.per_bin = j["rows"][1].get<std::int64_t>();
  g.cols.items = j["cols"][0].get<std::int64_t>();
  g.cols.per_bin = j["cols"][1].get<std::int64_t>();
  for (const auto& r : j["ratio"]) g.ratio.push_back(static_cast<float>(number_from(r)));
  g.flags = j["flags"].get<std::vector<std::uint8_t>>();
  return g;
}

json map_json(const std::optional<ErrorStats>& stats) {
  if (!stats || !stats->map) return nullptr;
  const ErrorMap& m = *stats->map;
  json worst = json::array();
  for (const auto& w : m.worst)
    worst.push_back({w.seq, w.token, w.head, w.dim, number(w.value), number(w.reference), number(w.abs_err),
                     number(w.ratio)});
  return {{"by_seq_head", grid_json(m.by_seq_head)}, {"by_token", grid_json(m.by_token)}, {"worst", worst}};
}

void attach_map(const json& j, std::optional<ErrorStats>& stats) {
  if (j.is_null() || !stats) return;
  auto m = std::make_shared<ErrorMap>();
  m->by_seq_head = grid_from(j["by_seq_head"]);
  m->by_token = grid_from(j["by_token"]);
  for (const auto& w : j["worst"])
    m->worst.push_back({w[0].get<std::int64_t>(), w[1].get<std::int64_t>(), w[2].get<std::int64_t>(),
                        w[3].get<std::int64_t>(), number_from(w[4]), number_from(w[5]), number_from(w[6]),
                        number_from(w[7])});
  stats->map = std::move(m);
}

json one_case(const CaseReport& c) {
  RunReport r;
  r.cases.push_back(c);
  json maps = json::array();
  for (const auto& p : c.paths)
    maps.push_back({map_json(p.error), map_json(p.lse_error), map_json(p.recorded), map_json(p.recorded_lse)});
  return {{"report", pagecheck::to_json(r)}, {"maps", maps}};
}

// The case of a journal line, its error maps attached; nullopt when the line
// is not one.
std::optional<CaseReport> case_from(const json& j) {
  auto one = report_from_json(j["report"], "the worker's journal");
  if (!one.ok() || one->cases.size() != 1) return std::nullopt;
  CaseReport c = std::move(one->cases.front());
  const json& maps = j["maps"];
  for (std::size_t i = 0; i < c.paths.size() && i < maps.size(); ++i) {
    attach_map(maps[i][0], c.paths[i].error);
    attach_map(maps[i][1], c.paths[i].lse_error);
    attach_map(maps[i][2], c.paths[i].recorded);
    attach_map(maps[i][3], c.paths[i].recorded_lse);
  }
  return c;
}

}  // namespace

bool use_isolation(const ExecOptions& exec, bool wants_gpu) {
  if (exec.isolation == "on") return true;
  if (exec.isolation == "off") return false;
  return wants_gpu && cuda_device_count() > 0;
}

int run_isolated_worker(const RunPlan& plan, ExecSetup& setup, const ExecOptions& exec, const OutputOptions& out,
                        const Invocation& invocation) {
  // The supervisor answers signals (it kills this worker when it must), and
  // a worker must not outlive it (a supervisor killed with SIGKILL): Ctrl-C,
  // sent to the whole process group, is its alone.
  ::signal(SIGINT, SIG_IGN);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return exit_code::kRuntime;  // it is already gone
  const fs::path dir = exec.isolation_worker;
  Journal journal(dir / "journal.jsonl");
  if (!journal.ok()) {
    fmt::print(stderr, "pagecheck: cannot write the worker journal in {}: {}\n", dir.string(), std::strerror(errno));
    return exit_code::kRuntime;
  }
  auto state = read_state(dir / "state.json");
  if (!state.ok()) {
    journal.write({{"fatal", {{"error", state.error().describe()}, {"code", exit_code::kRuntime}}}});
    return exit_code::kRuntime;
  }
  // The bundles name the user's command, not this worker's.
  Invocation users = invocation;
  users.command_line = state->command_line;
  PathRegistry registry;
  GpuSetup gpu;
  if (plan.wants_gpu || exec.require_gpu) {
    auto gpu_setup = setup_gpu(registry, exec.device, !exec.no_timing, exec.require_gpu);
    if (!gpu_setup.ok()) {
      const int code = exit_code_for(gpu_setup.error().code);
      journal.write({{"fatal", {{"error", gpu_setup.error().describe()}, {"code", code}}}});
      return code;
    }
    gpu = std::move(*gpu_setup);
  }
  for (auto& p : setup.external) registry.add(std::move(p));
  RunReport header;
  header.device = gpu.device;
  journal.write({{"start", {{"report", pagecheck::to_json(header)}, {"unavailable", gpu.unavailable}}}});

  Progress progress(plan.progress_mode, plan.progress_interval);
  std::int64_t in_flight = -1;
  std::string in_flight_name;
  progress.set_listener([&](std::string_view step) {
    journal.write({{"step", {{"case", in_flight}, {"name", in_flight_name}, {"step", std::string(step)}}}});
  });
  for (std::size_t n = state->start; n < plan.selected.size(); ++n) {
    const std::size_t i = plan.selected[n];
    const CaseSource& source = (*plan.sources)[i];
    in_flight = static_cast<std::int64_t>(i);
    in_flight_name = source.label;
    progress.update(n, plan.selected.size(), source.label, "loading");
    Expected<Case> loaded = load_case(source);
    progress.clear();
    if (!loaded.ok() && loaded.error().code == ErrorCode::Usage) {
      const std::string message = with_label(source.label, loaded.error().describe());
      fmt::print(stderr, "pagecheck: {}\n", message);
      journal.write({{"fatal", {{"error", message}, {"code", exit_code::kUsage}}}});
      return exit_code::kUsage;
    }
    if (!loaded.ok()) {
      journal.write({{"case", one_case(load_failure(source, i, loaded.error()))}});
      continue;
    }
    const Case& c = *loaded;
    in_flight_name = c.name;
    CaseControls controls;
    controls.check_context = true;
    controls.skipped = state->skipped;
    if (const auto decided = state->errors.find(in_flight); decided != state->errors.end())
      controls.errors = decided->second;
    CaseOutcome outcome = evaluate_case(c, setup.paths, registry, gpu, exec, setup.run_options,
                                        !out.save_failing.empty(), state->error_maps, progress, n,
                                        plan.selected.size(), controls);
    progress.clear();
    if (!outcome.context_lost.empty()) {
      // The case runs again in a fresh worker with this path decided.
      journal.write({{"lost", {{"case", in_flight}, {"path", outcome.context_lost_path}, {"reason", outcome.context_lost}}}});
      return kContextLost;
    }
    outcome.report.index = in_flight;
    say_invalid(source, outcome.report);
    std::optional<json> bundle;  // said after the case, whose rows come first in the table
    if (outcome.failing && !out.save_failing.empty()) {
      const std::string dir_name = unique_bundle_name(c.name, state->bundle_names);
      RunReport bundle_header = header;
      bundle_header.tool_version = PAGECHECK_VERSION;
      bundle_header.command_line = state->command_line;
      bundle_header.fail_on_skip = exec.fail_on_skip;
      auto saved = save_bundle(out.save_failing, dir_name, c, outcome, setup.paths, exec, users, bundle_header);
      bundle = json{{"bundle",
                     {{"name", dir_name},
                      {"dir", saved.ok() ? saved->string() : std::string()},
                      {"error", saved.ok() ? std::string() : saved.error().describe()}}}};
    }
    journal.write({{"case", one_case(outcome.report)}});
    if (bundle) journal.write(*bundle);
  }
  journal.write({{"done", true}});
  return exit_code::kPass;
}

namespace {

// The supervisor's view of one worker's journal, read as it grows.
struct JournalReader {
  fs::path file;
  std::uintmax_t offset = 0;
  std::string partial;

  std::vector<json> read_new() {
    std::vector<json> lines;
    std::ifstream f(file, std::ios::binary);
    if (!f) return lines;
    f.seekg(static_cast<std::streamoff>(offset));
    std::string chunk((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    offset += chunk.size();
    partial += chunk;
    std::size_t end;
    while ((end = partial.find('\n')) != std::string::npos) {
      const std::string line = partial.substr(0, end);
      partial.erase(0, end + 1);
      try {
        lines.push_back(json::parse(line));
      } catch (const json::exception&) {
        // A line cut by a crash cannot happen (one write); ignore any other.
      }
    }
    return lines;
  }
};

}  // namespace

int supervise_isolated(const RunPlan& plan, ExecSetup& setup, const ExecOptions& exec, const OutputOptions& out,
                       const Invocation& invocation, RunRecord& record) {
  const auto folder = make_child_folder("pagecheck-isolation", "the isolated worker");
  if (!folder.ok()) return record.not_run(folder.error());
  const fs::path dir = *folder;
  std::error_code ec;
  std::atomic<pid_t> worker_pid{-1};
  InterruptScope on_signal([&](int signo) {
    // The worker may be inside a kernel that never returns: it goes first.
    if (const pid_t pid = worker_pid.load(); pid > 0) ::kill(pid, SIGKILL);
    const auto code = record.on_signal(signo);
    fs::remove_all(dir, ec);
    return code;
  });

  // The worker: the user's command without the reports (written here) and
  // the isolation options, its table thrown away (printed here), its stderr
  // (progress, warnings) the user's.
  std::vector<std::string> argv = {invocation.executable};
  for (auto& a : args_without(invocation.args, {"--json", "--csv", "--junit", "--html", "--isolation", "--path-timeout"},
                              {"--no-color"}))
    argv.push_back(std::move(a));
  argv.insert(argv.end(), {"--no-color", "--isolation-worker", dir.string()});

  WorkerState state;
  state.error_maps = !out.html.empty();
  state.command_line = invocation.command_line;
  std::map<std::string, std::vector<std::string>> crashes;  // path -> the cases it ended the worker on
  bool device_said = false;
  int code = exit_code::kPass;
  int attempt = 0;
  std::pair<std::int64_t, std::string> last_crash{-1, ""};
  while (state.start < plan.selected.size()) {
    ++attempt;
    const std::size_t start_of_attempt = state.start;
    fs::remove(dir / "journal.jsonl", ec);
    {
      std::ofstream f(dir / "state.json");
      f << to_json(state).dump();
      if (!f) {
        record.add_error(fmt::format("cannot write the isolated worker's state in {}", dir.string()));
        break;
      }
    }
    auto pid = spawn_self(argv, child_environment({}), dir / fmt::format("worker-{}.out", attempt), "");
    if (!pid.ok()) {
      record.add_error(pid.error().describe());
      break;
    }
    worker_pid = *pid;
    JournalReader reader;
    reader.file = dir / "journal.jsonl";
    std::int64_t step_case = -1;
    std::string step_name, step;
    auto step_start = std::chrono::steady_clock::now();
    bool done = false, timed_out = false;
    std::optional<std::pair<std::string, int>> fatal;
    std::optional<json> lost;
    ChildExit ended;
    const auto take = [&](const json& line) {
      if (line.contains("start")) {
        if (!device_said) {
          auto header = report_from_json(line["start"]["report"], "the worker's journal");
          record.set_device(header.ok() ? header->device : std::nullopt,
                            line["start"]["unavailable"].get<std::string>(), plan.wants_gpu);
          device_said = true;
        }
      } else if (line.contains("step")) {
        const json& s = line["step"];
        if (s["case"].get<std::int64_t>() != step_case || s["step"] == "loading" || s["name"] != step_name)
          record.start_case(s["case"].get<std::int64_t>(), s["name"].get<std::string>());
        step_case = s["case"].get<std::int64_t>();
        step_name = s["name"].get<std::string>();
        step = s["step"].get<std::string>();
        record.set_step(step);
        step_start = std::chrono::steady_clock::now();
      } else if (line.contains("case")) {
        if (auto one = case_from(line["case"])) {
          const std::int64_t index = one->index;
          record.add_case(std::move(*one));
          const auto at = std::find(plan.selected.begin(), plan.selected.end(), static_cast<std::size_t>(index));
          if (at != plan.selected.end()) state.start = static_cast<std::size_t>(at - plan.selected.begin()) + 1;
        }
        step_case = -1;
        step.clear();
      } else if (line.contains("bundle")) {
        state.bundle_names.insert(line["bundle"]["name"].get<std::string>());
        record.note_bundle(line["bundle"]["dir"].get<std::string>(), line["bundle"]["error"].get<std::string>());
      } else if (line.contains("lost")) {
        lost = line["lost"];
      } else if (line.contains("fatal")) {
        fatal = {line["fatal"]["error"].get<std::string>(), line["fatal"]["code"].get<int>()};
      } else if (line.contains("done")) {
        done = true;
      }
    };
    for (;;) {
      for (const auto& line : reader.read_new()) take(line);
      ended = wait_child(*pid, false);
      if (!ended.running) break;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      if (exec.path_timeout > 0 && step_case >= 0 && step != "loading" && seconds > exec.path_timeout) {
        ::kill(*pid, SIGKILL);
        ended = wait_child(*pid);
        timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    worker_pid = -1;
    if (interrupt_signal() != 0) {
      // A signal ended the worker too (Ctrl-C reaches the process group):
      // the interrupt handler writes the reports and ends this process.
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    for (const auto& line : reader.read_new()) take(line);
    if (done) break;
    if (fatal) {
      if (fatal->second == exit_code::kUsage) {
        fs::remove_all(dir, ec);
        return exit_code::kUsage;  // said by the worker
      }
      record.add_error(fatal->first);
      code = std::max(code, fatal->second);
      break;
    }
    // What was in flight when the worker ended, and why it ended.
    std::string path = step, reason;
    std::int64_t case_index = step_case;
    if (lost) {
      case_index = (*lost)["case"].get<std::int64_t>();
      path = (*lost)["path"].get<std::string>();
      reason = (*lost)["reason"].get<std::string>();
    } else if (timed_out) {
      reason = fmt::format("timed out after {:g} s (--path-timeout); the worker process was ended", exec.path_timeout);
    } else {
      reason = ended.failure.empty() ? fmt::format("the worker process exited {} while this path ran", ended.code)
                                     : fmt::format("the worker process was {} while this path ran", ended.failure);
    }
    if (case_index < 0) {
      // Between cases: a new worker goes on, unless this one made no
      // progress (it cannot start at all).
      const std::string why = ended.failure.empty() ? fmt::format("exit {}", ended.code) : ended.failure;
      if (state.start == start_of_attempt) {
        record.add_error(fmt::format("the isolated worker ended before it finished a case: {}", why));
        break;
      }
      continue;
    }
    const auto at = std::find(plan.selected.begin(), plan.selected.end(), static_cast<std::size_t>(case_index));
    if (at == plan.selected.end()) break;
    const std::size_t position = static_cast<std::size_t>(at - plan.selected.begin());
    if (path == "loading" || path.empty()) {
      record.add_case(load_failure((*plan.sources)[static_cast<std::size_t>(case_index)],
                                   static_cast<std::size_t>(case_index), runtime_error(reason)));
      state.start = position + 1;
      continue;
    }
    if (last_crash == std::make_pair(case_index, path)) {
      // The same path of the same case again, though it was decided: stop
      // rather than loop.
      record.add_error(fmt::format("the isolated worker ended twice on case {} path {}: {}", step_name, path, reason));
      break;
    }
    last_crash = {case_index, path};
    state.errors[case_index][path] = reason;
    state.start = position;
    auto& on = crashes[path];
    on.push_back(step_name);
    if (on.size() == 2 && path != "reference") {
      state.skipped[path] = "not run: it ended the worker process twice earlier in this run";
      record.add_error(fmt::format("path {} ended the worker process twice (cases {}, {}); it is skipped for the rest "
                                   "of the run",
                                   path, on[0], on[1]));
    }
  }
  fs::remove_all(dir, ec);
  return std::max(code, record.finish(setup.paths, exec.fail_on_skip));
}

}  // namespace pagecheck::app
