// Seeded, reproducible synthetic cases: geometry, length distributions,
// value profiles, named model presets and the default boundary suite.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

enum class LengthDist : std::uint8_t {
  Fixed,     // every sequence seq_len_max (or q_len_max)
  Uniform,   // uniform in [min, max]
  List,      // cycle through `*_list`
  Boundary,  // cycle through the awkward lengths in [min, max]: 1, block-1, block, block+1,
             // 2 block-1, partition-1, partition, partition+1 (partition 512), ... (boundary_lengths)
};

enum class QueryMode : std::uint8_t {
  Decode,   // q_len = 1
  Prefill,  // q_len = seq_len (a whole prompt)
  Chunked,  // q_len drawn from the q_len distribution, <= seq_len (chunked prefill)
  Mixed,    // alternate decode and chunked-prefill sequences
};

enum class ValueProfile : std::uint8_t {
  Gaussian,     // N(0, 1) everywhere
  LlmLike,      // a few large-magnitude key channels, an attention-sink first token
  LargeLogits,  // logits in the hundreds: punishes a softmax without max subtraction
};

struct SyntheticSpec {
  std::string name = "synthetic";
  std::uint64_t seed = 1;

  std::int64_t num_seqs = 4;
  std::int64_t q_heads = 8;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 128;
  std::int64_t v_head_dim = 0;  // 0: same as head_dim
  std::int64_t block_size = 16;
  std::int64_t pool_factor = 3;  // pool holds at least this many times the pages needed

  DType query_dtype = DType::BF16;
  DType kv_dtype = DType::BF16;
  KvLayout layout = KvLayout::NHD;
  TableForm table_form = TableForm::Dense;

  LengthDist seq_len_dist = LengthDist::Fixed;
  std::int64_t seq_len_min = 1;
  std::int64_t seq_len_max = 256;
  std::vector<std::int64_t> seq_len_list;

  QueryMode query_mode = QueryMode::Decode;
  LengthDist q_len_dist = LengthDist::Fixed;
  std::int64_t q_len_min = 1;
  std::int64_t q_len_max = 1;
  std::vector<std::int64_t> q_len_list;

  bool causal = true;
  std::int64_t sliding_window = 0;
  double softcap = 0;
  std::optional<double> scale;
  double k_scale = 1.0;  // fp8 scales (stored x means x * scale)
  double v_scale = 1.0;

  // Attention sinks: one logit per query head, drawn from the seed (uniform
  // in [-2, 6] next to the Gaussian profile's logits, shifted and scaled to
  // the other profiles' logits): negligible next to long rows, dominant in
  // short ones.
  bool sinks = false;
  // ALiBi: the slopes BLOOM and MPT use for q_heads heads (alibi_slopes()).
  bool alibi = false;
  // A latent (MLA) cache: one KV head (kv_heads 1) whose head_dim-wide rows
  // hold the latent, its first v_head_dim columns, which are also V
  // (kv_lora_rank = v_head_dim), and the rope part; NHD; scale required.
  bool latent = false;

  ValueProfile profile = ValueProfile::Gaussian;
  bool share_pages = true;  // some pages shared between sequences (prefix caching)
  bool poison_unused = true;  // NaN in unreferenced pages and slots past seq_len
  std::string description;
};

Expected<Case> generate_case(const SyntheticSpec& spec);

// The same case without its KV caches in memory (what pagecheck run makes):
// the table, lengths, query and parameters as generate_case makes them, and
// key_cache/value_cache with their dtype and shape but no data; the case's
// cache_source makes their bytes, exactly those generate_case puts there,
// for whoever reads them (the reference, the GPU upload, save_case_file), so
// that gigabytes of caches are never held or first-touched at once.
Expected<Case> generate_case_sourced(const SyntheticSpec& spec);

// The checks generate_case makes before it allocates anything: a spec that
// passes is one the generator accepts (a usage error names the field).
Status check_synthetic_spec(const SyntheticSpec& spec);

// ALiBi's slopes for `heads` query heads, as the paper (Press et al.) and
// BLOOM/MPT make them: for the largest power of two n <= heads, 2^(-8i/n)
// for i = 1..n; the heads beyond n take the odd powers 2^(-4(2i-1)/n),
// i = 1, 2, ...
std::vector<float> alibi_slopes(std::int64_t heads);

// Real model geometries: "llama3-8b", "llama3-70b", "mistral-7b-window",
// "gemma2-9b-softcap", "deepseek-192-128", ... (preset_names() lists them).
std::vector<std::string> preset_names();
Expected<SyntheticSpec> preset(const std::string& name);
// A name that stands for several presets: the layer kinds of one model
// ("gpt-oss-20b": its window layer and its full layer).
struct PresetGroup {
  std::string name;
  std::vector<std::string> members;  // preset names
  std::string description;
};
const std::vector<PresetGroup>& preset_groups();
// The specs `name` stands for: a preset's one, or a group's members.
Expected<std::vector<SyntheticSpec>> preset_cases(const std::string& name);

// The default suite's specs (suite.hpp: a pairwise covering array over the
// feature axes per GPU path family, plus a few fixed cases).
std::vector<SyntheticSpec> default_suite();

// Records the generator settings of `spec` as metadata strings: "seed",
// "tool_version", "generator" and "generator_settings" (one JSON object).
std::map<std::string, std::string> spec_metadata(const SyntheticSpec& spec);

// The lengths LengthDist::Boundary cycles through, ascending, inside [min, max].
std::vector<std::int64_t> boundary_lengths(std::int64_t block_size, std::int64_t min, std::int64_t max);

// Names as the CLI and the metadata spell them: "fixed", "uniform", "list",
// "boundary"; "decode", "prefill", "chunked", "mixed"; "gaussian", "llm",
// "large-logits". parse_* return nullopt for anything else.
std::string_view length_dist_name(LengthDist dist);
std::string_view query_mode_name(QueryMode mode);
std::string_view value_profile_name(ValueProfile profile);
std::optional<LengthDist> parse_length_dist(std::string_view name);
std::optional<QueryMode> parse_query_mode(std::string_view name);
std::optional<ValueProfile> parse_value_profile(std::string_view name);

// The split partition the boundary cases straddle (the split-KV path's default).
inline constexpr std::int64_t kDefaultPartitionTokens = 512;

}  // namespace pagecheck
