// inspect: what a case file holds, whether it validates, which paths apply.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "commands.hpp"
#include "gpu_setup.hpp"
#include "case_sources.hpp"
#include "specs.hpp"
#include "pagecheck/case_file.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/text.hpp"
#include "pagecheck/validate.hpp"

namespace pagecheck::app {
namespace {

struct LengthStats {
  std::int64_t min = 0, max = 0;
  double mean = 0;
};

LengthStats stats_of(const std::vector<std::int64_t>& values) {
  LengthStats s;
  if (values.empty()) return s;
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (auto v : values) sum += static_cast<double>(v);
  s.mean = sum / static_cast<double>(values.size());
  return s;
}

// Table statistics, computed defensively: the case may not validate.
void print_table_stats(const Case& c) {
  const std::int64_t num_seqs = c.num_seqs();
  const std::int64_t bs = std::max<std::int64_t>(c.block_size(), 1);
  std::vector<std::int64_t> seq_lens, q_lens;
  for (std::int64_t s = 0; s < num_seqs; ++s) seq_lens.push_back(c.seq_lens[s]);
  for (std::size_t s = 0; s + 1 < c.query_start_loc.size(); ++s)
    q_lens.push_back(static_cast<std::int64_t>(c.query_start_loc[s + 1]) - c.query_start_loc[s]);

  std::map<std::int32_t, std::set<std::int64_t>> users;  // page -> sequences that need it
  std::int64_t entries_needed = 0, out_of_range = 0, repeated_in_seq = 0;
  const auto& indptr = c.table.page_indptr;
  const auto& indices = c.table.page_indices;
  for (std::int64_t s = 0; s < num_seqs && static_cast<std::size_t>(s) + 1 < indptr.size(); ++s) {
    // Rounded up without seq_len + bs - 1, which overflows for a hostile
    // block size (up to INT64_MAX when the cache has no blocks).
    const std::int64_t seq_len = std::max<std::int64_t>(c.seq_lens[s], 0);
    const std::int64_t needed = seq_len / bs + (seq_len % bs != 0 ? 1 : 0);
    std::set<std::int32_t> seen;
    for (std::int64_t k = 0; k < needed; ++k) {
      const std::int64_t at = indptr[s] + k;
      if (at < 0 || at >= static_cast<std::int64_t>(indices.size()) || at >= indptr[s + 1]) break;
      const std::int32_t page = indices[at];
      ++entries_needed;
      if (page < 0 || page >= c.num_blocks()) {
        ++out_of_range;
        continue;
      }
      if (!seen.insert(page).second) ++repeated_in_seq;
      users[page].insert(s);
    }
  }
  std::int64_t shared = 0;
  for (const auto& [page, seqs] : users)
    if (seqs.size() > 1) ++shared;

  const LengthStats sl = stats_of(seq_lens), ql = stats_of(q_lens);
  fmt::print("table:     {} form, {} entries needed", c.table.form == TableForm::Dense ? "dense (vLLM)" : "CSR (FlashInfer)",
             entries_needed);
  if (c.table.form == TableForm::Dense) fmt::print(", {} blocks per row", c.table.max_blocks_per_seq);
  fmt::print("\n");
  fmt::print("pages:     {} of {} pages used ({:.1f}% of the pool), {} shared between sequences", users.size(),
             c.num_blocks(), c.num_blocks() > 0 ? 100.0 * static_cast<double>(users.size()) / c.num_blocks() : 0.0,
             shared);
  if (repeated_in_seq) fmt::print(", {} repeated inside a sequence", repeated_in_seq);
  if (out_of_range) fmt::print(", {} out of range", out_of_range);
  fmt::print("\n");
  fmt::print("seq_len:   min {}, max {}, mean {:.1f}\n", sl.min, sl.max, sl.mean);
  fmt::print("q_len:     min {}, max {}, mean {:.1f}{}\n", ql.min, ql.max, ql.mean,
             c.query_start_loc_given ? "" : " (no query_start_loc: one token per sequence)");
}

int inspect_file(const std::string& file, int device) {
  if (const Status path_ok = check_case_path(file); !path_ok.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", with_label(file, path_ok.error().describe()));
    return exit_code::kInvalidInput;
  }
  auto loaded = load_case_file(file);
  if (!loaded.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", with_label(file, loaded.error().describe()));
    return exit_code::kInvalidInput;
  }
  const Case& c = *loaded;
  // Everything quoted from the file is escaped for the terminal.
  fmt::print("file:      {}\n", printable(file));
  fmt::print("case:      {}{}{}\n", printable(c.name, 200), c.params.description.empty() ? "" : " - ",
             printable(c.params.description, 400));
  fmt::print("geometry:  {}\n", describe_geometry(c));
  if (c.has_latent())
    fmt::print("tensors:   query {}, latent cache {} (one KV head; V = the first {} columns of each row, {} rope "
               "columns after them)\n",
               c.query.describe(), c.key_cache.describe(), c.v_head_dim(), c.key_head_dim() - c.v_head_dim());
  else
    fmt::print("tensors:   query {}, key_cache {}, value_cache {}\n", c.query.describe(), c.key_cache.describe(),
               c.value_cache.describe());
  if (c.cache_form != CacheForm::Separate)
    fmt::print("cache:     given as {}; {} {} {}\n", cache_form_name(c.cache_form),
               cache_form_copies(c.cache_form) ? "copied at read time into" : "viewed in place as",
               c.params.layout == KvLayout::NHD ? "NHD" : "HND",
               c.has_latent() ? "latent cache (written back as kv_c_and_k_pe_cache)" : "key_cache/value_cache");
  if (c.recorded_output || c.recorded_lse)
    fmt::print("recorded:  output {}, lse {}\n", c.recorded_output ? c.recorded_output->describe() : "none",
               c.recorded_lse ? c.recorded_lse->describe() : "none");
  fmt::print("params:    {}causal, scale {:g}{}, window {}, softcap {:g}, k_scale {:g}, v_scale {:g}\n",
             c.params.causal ? "" : "non-", c.scale(), c.params.scale ? "" : " (1/sqrt(head_dim))",
             c.params.sliding_window, c.params.softcap, c.params.k_scale, c.params.v_scale);
  if (c.has_sinks()) {
    const auto [low, high] = std::minmax_element(c.sinks.begin(), c.sinks.end());
    fmt::print("sinks:     {} logits (one per query head), {:g} .. {:g}\n", c.sinks.size(), *low, *high);
  }
  if (c.has_alibi()) {
    const auto [low, high] = std::minmax_element(c.alibi_slopes.begin(), c.alibi_slopes.end());
    fmt::print("alibi:     {} slopes (one per query head), {:g} .. {:g}\n", c.alibi_slopes.size(), *low, *high);
  }
  for (const auto& [key, value] : c.params.extra_metadata) {
    fmt::print("metadata:  {} = {}\n", printable(key, 80), printable(value, 160));
  }
  print_table_stats(c);

  const ValidationReport validation = validate_case(c);
  for (const auto& w : validation.warnings) fmt::print("warning:   {}\n", w);
  if (!validation.ok()) {
    for (const auto& e : validation.errors) fmt::print("invalid:   {}\n", e);
    fmt::print(stderr, "pagecheck: {}: the case does not validate ({} error{})\n", file,
               validation.errors.size(), validation.errors.size() == 1 ? "" : "s");
    return exit_code::kInvalidInput;
  }
  fmt::print("valid:     yes\n");

  fmt::print("paths:\n");
  fmt::print("  {:<10} applies (Eigen CPU reference, float64)\n", "reference");
  PathRegistry registry;
  const auto not_built = register_for_applicability(registry, device);
  for (const auto& name : gpu_path_names()) {
    if (not_built) {
      fmt::print("  {:<10} {}\n", name, *not_built);
      continue;
    }
    const Path* p = registry.find(name);
    if (p == nullptr) {
      fmt::print("  {:<10} not built into this binary\n", name);
      continue;
    }
    const Applicability a = p->applies(c);
    if (a.applies) fmt::print("  {:<10} applies\n", name);
    else fmt::print("  {:<10} n/a: {}\n", name, a.reason);
  }
  return exit_code::kPass;
}

}  // namespace

int cmd_inspect(const InspectConfig& config) {
  // Every file is inspected, even after one that does not load; the most
  // severe exit code wins.
  int code = exit_code::kPass;
  for (std::size_t i = 0; i < config.files.size(); ++i) {
    if (i > 0) fmt::print("\n");
    std::fflush(stdout);
    code = std::max(code, inspect_file(config.files[i], config.device));
  }
  return code;
}

}  // namespace pagecheck::app
