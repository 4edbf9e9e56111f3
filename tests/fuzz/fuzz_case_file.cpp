// libFuzzer target over the file path: the safetensors reader, the case
// builder, validation, the reference on small cases, the metrics and every
// report writer. Build with -DPAGECHECK_FUZZ=ON and clang (tests/fuzz/
// CMakeLists.txt); run as docs/validation.md ("Fuzzing and hostile files")
// says:
//   build-fuzz/tests/fuzz/fuzz_case_file -dict=tests/fuzz/case_file.dict \
//       -seed=1 -max_total_time=60 corpus-copy/ tests/fuzz/corpus/
// A finding is a crash, a sanitizer report, a leak, or an input whose peak
// memory exceeds -rss_limit_mb (the harness keeps the reference to cases of
// a few megabytes, so any growth beyond that is the library's).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "pagecheck/case_file.hpp"
#include "pagecheck/limits.hpp"
#include "pagecheck/metrics.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/text.hpp"
#include "pagecheck/validate.hpp"

using namespace pagecheck;

namespace {

// The reference runs only on cases this small: what it allocates and the
// work it does (query rows x keys x head dims).
constexpr std::uint64_t kMaxReferenceBytes = 16ull << 20;
constexpr std::uint64_t kMaxReferenceWork = 4ull << 20;

std::FILE* null_sink() {
  static std::FILE* sink = std::fopen("/dev/null", "w");
  return sink;
}

std::uint64_t reference_work(const Case& c) {
  std::uint64_t work = 0;
  const auto dims = static_cast<std::uint64_t>(c.head_dim() + c.v_head_dim());
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    const auto rows = static_cast<std::uint64_t>(c.q_len(s)) * static_cast<std::uint64_t>(c.q_heads());
    work += rows * static_cast<std::uint64_t>(c.seq_lens[s]) * dims;
    if (work > kMaxReferenceWork) return work;
  }
  return work;
}

std::vector<double> widened(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = t.at(i);
  return out;
}

void write_reports(RunReport& report) {
  (void)to_json(report).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)to_csv(report);
  (void)to_junit(report);
  print_table(null_sink(), report, /*color=*/true);
  print_failures(null_sink(), report);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  RunReport report;
  report.tool_version = "fuzz";
  report.command_line = "fuzz_case_file";
  CaseReport& cr = report.cases.emplace_back();

  auto loaded = parse_case_file(bytes, nullptr, "fuzz");
  if (!loaded) {
    cr.name = "fuzz";
    cr.errors.push_back(printable(loaded.error().describe()));
    write_reports(report);
    return 0;
  }
  const Case& c = *loaded;
  cr.name = c.name;
  cr.description = c.params.description;
  cr.geometry = printable(c.params.description, 64);

  const ValidationReport validation = validate_case(c);
  cr.warnings = validation.warnings;
  cr.errors = validation.errors;
  (void)validation_status(validation, "fuzz");
  if (!validation.ok()) {
    write_reports(report);
    return 0;
  }

  const MemoryEstimate estimate = estimate_memory(c, 1);
  if (estimate.host_bytes() <= kMaxReferenceBytes && reference_work(c) <= kMaxReferenceWork) {
    auto ref = reference_attention(c, 1);
    PathReport& row = cr.paths.emplace_back();
    row.path = "reference";
    if (!ref) {
      row.status = PathStatus::Error;
      row.reason = ref.error().describe();
    } else {
      const std::vector<float> out(ref->output.begin(), ref->output.end());
      const std::vector<float> lse(ref->lse.begin(), ref->lse.end());
      const Tolerance tol = default_tolerance(c.query.dtype, c.key_cache.dtype);
      row.error = compare(c, out, ref->output, c.v_head_dim(), tol, false, ref->lse);
      row.lse_error = compare(c, lse, ref->lse, 1, default_lse_tolerance(c.query.dtype, c.key_cache.dtype));
      if (c.recorded_output) row.recorded = compare(c, out, widened(*c.recorded_output), c.v_head_dim(), tol);
      if (c.recorded_lse) row.recorded_lse = compare(c, lse, widened(*c.recorded_lse), 1, tol);
      if (row.recorded && row.recorded->mismatches > 0) {
        row.status = PathStatus::Fail;
        row.reason = "differs from the recorded output";
      }
    }
  }
  write_reports(report);
  (void)report_exit_code(report);
  return 0;
}
