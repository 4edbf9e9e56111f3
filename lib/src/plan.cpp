// The direct/split-KV plan: parsing, the built-in heuristic, tuning files.
#include "pagecheck/plan.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pagecheck/atomic_file.hpp"

namespace pagecheck {

std::string Plan::to_string() const {
  if (kind == PlanKind::Direct) return "direct";
  return fmt::format("split:{}:{}", partition_tokens, threshold_tokens);
}

std::string_view Plan::source_name() const {
  switch (source) {
    case PlanSource::Default: return "default";
    case PlanSource::Explicit: return "explicit";
    case PlanSource::Tuned: return "tuned";
  }
  return "default";
}

namespace {

// A non-negative decimal integer that fits in int64, or nullopt.
std::optional<std::int64_t> parse_count(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

constexpr std::int64_t kMaxPartitionTokens = std::int64_t{1} << 20;

}  // namespace

// Partition and threshold fixed, whatever the batch: a sequence longer than
// 1024 tokens is split into 1024-token partitions, a shorter one attended
// whole, so each sequence's arithmetic follows from its own length. 1024 is
// the partition the heuristic picks for the long-context bench shapes (8 x
// 8192, 1 x 32768), so those cost nothing; where the heuristic goes direct
// (large batches) the fixed split pays its merge (docs/gpu-paths.md).
Plan batch_invariant_plan() {
  return Plan{PlanKind::SplitKv, kInvariantPartitionTokens, kInvariantPartitionTokens, PlanSource::Explicit};
}

Expected<Plan> parse_plan(std::string_view text) {
  const std::string where = "--plan";
  if (text == "direct") return Plan{PlanKind::Direct, 0, 0, PlanSource::Explicit};
  if (text == "invariant") return batch_invariant_plan();
  constexpr std::string_view kUsage =
      "expected 'direct', 'invariant' or 'split:PARTITION_TOKENS:THRESHOLD_TOKENS' (e.g. split:512:2048)";
  if (!text.starts_with("split")) return usage_error(fmt::format("unknown plan '{}': {}", text, kUsage), where);
  std::string_view rest = text.substr(5);
  if (rest.empty() || rest.front() != ':')
    return usage_error(fmt::format("plan '{}' lacks its sizes: {}", text, kUsage), where);
  rest.remove_prefix(1);
  const auto colon = rest.find(':');
  if (colon == std::string_view::npos)
    return usage_error(fmt::format("plan '{}' lacks THRESHOLD_TOKENS: {}", text, kUsage), where);
  const std::string_view partition_text = rest.substr(0, colon);
  const std::string_view threshold_text = rest.substr(colon + 1);
  const auto partition = parse_count(partition_text);
  if (!partition || *partition == 0)
    return usage_error(fmt::format("plan '{}': PARTITION_TOKENS '{}' is not a positive integer", text, partition_text),
                       where);
  if (*partition > kMaxPartitionTokens)
    return usage_error(fmt::format("plan '{}': PARTITION_TOKENS {} is above the limit {}", text, *partition,
                                   kMaxPartitionTokens),
                       where);
  const auto threshold = parse_count(threshold_text);
  if (!threshold)
    return usage_error(
        fmt::format("plan '{}': THRESHOLD_TOKENS '{}' is not a non-negative integer", text, threshold_text), where);
  return Plan{PlanKind::SplitKv, *partition, *threshold, PlanSource::Explicit};
}

namespace {

bool entry_matches(const TuningEntry& e, const PlanRequest& r) {
  return e.query_heads == r.query_heads && e.kv_heads == r.kv_heads && e.head_dim == r.head_dim &&
         e.value_head_dim == r.value_head_dim;
}

// Distance between batch sizes on a log scale (a tuned batch of 8 is nearer
// to 12 than a tuned batch of 64 is); an entry for any batch matches all.
double batch_distance(std::int64_t tuned, std::int64_t requested) {
  if (tuned <= 0) return 0.0;
  return std::abs(std::log(static_cast<double>(tuned)) - std::log(static_cast<double>(std::max<std::int64_t>(1, requested))));
}

}  // namespace

// The built-in heuristic. The direct path launches one CTA per (sequence, KV
// head) and keeps the whole context in it; it is the fastest path whenever
// those CTAs fill the device, because split-KV adds a workspace round trip and
// a merge launch. When they do not (few sequences, long contexts), split-KV
// multiplies the CTAs by the number of partitions.
//   - Direct when the direct grid covers at least two waves of the
//     multiprocessors (64 x 4096 with 8 KV heads: 512 CTAs on 132 SMs), or
//     when the longest context fits in the smallest partition.
//   - Otherwise SplitKv with the largest partition of 256..1024 tokens
//     (fewest partials to merge) whose grid comes within 1/32 of two waves
//     (255 CTAs on 132 SMs); sequences no longer than one partition go direct
//     (threshold = partition), since splitting them gains nothing.
// Measured on the H200 by `pagecheck tune` (32/8 heads, d128, BF16, block 16,
// L2 flushed; docs/performance.md): batch 64 (512 CTAs) direct wins at every
// context 512..8192 (4096: 0.277 ms direct, 0.302 best split); batch 16 (128
// CTAs) split wins from 1024 tokens (4096: 0.090 vs 0.122 ms) and loses by 4%
// at 512; batch 1 and 4 split wins from 512 tokens (1 x 32768: 0.0535 ms at
// partition 1024, 0.0545 at 512, 0.880 direct). So: split below two waves,
// direct above. The partition: measured again with explicit plans (bench,
// median of 30, 2026-12-02), 1 x 32768 ran at 2395 / 2505 / 1954 GB/s with
// partitions 512 / 1024 / 2048 and 8 x 8192 at 2891 / 3080 / 2980: 1024 is
// best at both, although at 1 x 32768 it gives 256 CTAs, just under two
// waves (264), hence the 1/32 slack; 2048 loses wherever it is the largest
// to reach the target, hence the 1024 cap. The sweep of `tune` agrees
// (batch 1: 256 up to 8192 tokens, 512 at 16384, 1024 at 32768).
Plan choose_plan(const PlanRequest& request, const TuningTable* tuning) {
  if (tuning != nullptr) {
    const TuningEntry* best = nullptr;
    double best_distance = std::numeric_limits<double>::infinity();
    for (const auto& e : tuning->entries) {
      if (!entry_matches(e, request)) continue;
      const double d = batch_distance(e.num_seqs, request.num_seqs);
      if (d < best_distance) {
        best_distance = d;
        best = &e;
      }
    }
    if (best != nullptr) {
      if (best->threshold_tokens <= 0 || request.max_context_tokens <= best->threshold_tokens)
        return Plan{PlanKind::Direct, 0, 0, PlanSource::Tuned};
      std::int64_t partition = best->partition_tokens;
      if (!best->partition_by_context.empty()) {
        // The best partition moves with the context (H200, batch 1: 256 up
        // to 8k tokens, 1024 at 32k, where 256 is 11% slower).
        partition = best->partition_by_context.back().second;
        for (const auto& [context, p] : best->partition_by_context) {
          if (context >= request.max_context_tokens) {
            partition = p;
            break;
          }
        }
      }
      return Plan{PlanKind::SplitKv, partition, best->threshold_tokens, PlanSource::Tuned};
    }
  }

  constexpr std::int64_t kMinPartition = 256;
  constexpr std::int64_t kMaxPartition = 1024;
  const std::int64_t multiprocessors = std::max(1, request.multiprocessors);
  // A kernel of one CTA per multiprocessor (the latent MLA kernel, compute-
  // bound) is direct from one wave less 1/32: at 64 x 4096 with 128 heads
  // its 128 CTAs on 132 SMs ran in 0.199 ms direct, 0.312 split into 1024-
  // token partitions (H100, session 15).
  const bool one_per_sm = request.one_cta_per_multiprocessor;
  const std::int64_t target_ctas = (one_per_sm ? 1 : 2) * multiprocessors;
  const std::int64_t split_target_ctas = target_ctas - target_ctas / 32;
  const std::int64_t direct_ctas =
      request.direct_ctas > 0
          ? request.direct_ctas
          : std::max<std::int64_t>(1, request.num_seqs) * std::max<std::int64_t>(1, request.kv_heads);
  if (direct_ctas >= (one_per_sm ? split_target_ctas : target_ctas) || request.max_context_tokens <= kMinPartition)
    return Plan{PlanKind::Direct, 0, 0, PlanSource::Default};
  std::int64_t partition = kMinPartition;
  for (std::int64_t p = kMaxPartition; p >= kMinPartition; p /= 2) {
    const std::int64_t partitions = (request.max_context_tokens + p - 1) / p;
    if (direct_ctas * partitions >= split_target_ctas) {
      partition = p;
      break;
    }
  }
  return Plan{PlanKind::SplitKv, partition, partition, PlanSource::Default};
}

// ---- tuning files -----------------------------------------------------------
// {"format": "pagecheck-tuning", "version": 1, "device": "NVIDIA H200",
//  "entries": [{"query_heads": 32, "kv_heads": 8, "head_dim": 128,
//               "value_head_dim": 128, "num_seqs": 1,
//               "partition_tokens": 512, "threshold_tokens": 2048}, ...]}

namespace {

constexpr std::string_view kTuningFormat = "pagecheck-tuning";
constexpr int kTuningVersion = 1;

Expected<std::int64_t> read_int_field(const nlohmann::json& object, const std::string& field, const std::string& where,
                                      std::int64_t minimum) {
  const auto it = object.find(field);
  if (it == object.end()) return invalid_input(fmt::format("{}.{} is missing", where, field));
  if (!it->is_number_integer())
    return invalid_input(fmt::format("{}.{} must be an integer, got {}", where, field, it->dump()));
  const auto value = it->get<std::int64_t>();
  if (value < minimum) return invalid_input(fmt::format("{}.{} must be at least {}, got {}", where, field, minimum, value));
  return value;
}

}  // namespace

Expected<TuningTable> read_tuning_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_input("cannot open the tuning file", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::exception& e) {
    return invalid_input(fmt::format("not valid JSON: {}", e.what()), path);
  }
  auto fail = [&](std::string message) -> Error { return invalid_input(std::move(message), path); };
  if (!doc.is_object()) return fail("the top level must be a JSON object");
  const auto format = doc.find("format");
  if (format == doc.end() || !format->is_string() || format->get<std::string>() != kTuningFormat)
    return fail(fmt::format("format must be \"{}\"", kTuningFormat));
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || version->get<int>() != kTuningVersion)
    return fail(fmt::format("version must be {}, got {}", kTuningVersion,
                            version == doc.end() ? std::string("nothing") : version->dump()));
  TuningTable table;
  if (const auto device = doc.find("device"); device != doc.end()) {
    if (!device->is_string()) return fail(fmt::format("device must be a string, got {}", device->dump()));
    table.device_name = device->get<std::string>();
  }
  const auto entries = doc.find("entries");
  if (entries == doc.end() || !entries->is_array()) return fail("entries must be an array");
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const auto& e = (*entries)[i];
    const std::string where = fmt::format("entries[{}]", i);
    if (!e.is_object()) return fail(where + " must be an object");
    TuningEntry entry;
    struct Field {
      const char* name;
      std::int64_t* target;
      std::int64_t minimum;
    };
    const Field fields[] = {
        {"query_heads", &entry.query_heads, 1},       {"kv_heads", &entry.kv_heads, 1},
        {"head_dim", &entry.head_dim, 1},             {"value_head_dim", &entry.value_head_dim, 1},
        {"num_seqs", &entry.num_seqs, 0},             {"partition_tokens", &entry.partition_tokens, 1},
        {"threshold_tokens", &entry.threshold_tokens, 0},
    };
    for (const auto& f : fields) {
      auto value = read_int_field(e, f.name, where, f.minimum);
      if (!value) return fail(value.error().message);
      *f.target = *value;
    }
    if (const auto by_context = e.find("partition_by_context"); by_context != e.end()) {
      const std::string field = where + ".partition_by_context";
      if (!by_context->is_array()) return fail(field + " must be an array of [context, partition] pairs");
      std::int64_t previous = 0;
      for (std::size_t k = 0; k < by_context->size(); ++k) {
        const auto& pair = (*by_context)[k];
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer())
          return fail(fmt::format("{}[{}] must be a pair of integers [context, partition], got {}", field, k, pair.dump()));
        const auto context = pair[0].get<std::int64_t>(), partition = pair[1].get<std::int64_t>();
        if (context <= previous)
          return fail(fmt::format("{}[{}]: contexts must be positive and ascending, got {} after {}", field, k, context,
                                  previous));
        if (partition < 1) return fail(fmt::format("{}[{}]: partition must be at least 1, got {}", field, k, partition));
        previous = context;
        entry.partition_by_context.emplace_back(context, partition);
      }
    }
    if (entry.query_heads % entry.kv_heads != 0)
      return fail(fmt::format("{}.query_heads {} is not a multiple of kv_heads {}", where, entry.query_heads,
                              entry.kv_heads));
    table.entries.push_back(entry);
  }
  return table;
}

Status write_tuning_file(const std::string& path, const TuningTable& table) {
  nlohmann::json doc;
  doc["format"] = kTuningFormat;
  doc["version"] = kTuningVersion;
  doc["device"] = table.device_name;
  auto entries = nlohmann::json::array();
  for (const auto& e : table.entries) {
    entries.push_back({{"query_heads", e.query_heads},
                       {"kv_heads", e.kv_heads},
                       {"head_dim", e.head_dim},
                       {"value_head_dim", e.value_head_dim},
                       {"num_seqs", e.num_seqs},
                       {"partition_tokens", e.partition_tokens},
                       {"threshold_tokens", e.threshold_tokens}});
    if (!e.partition_by_context.empty()) {
      auto pairs = nlohmann::json::array();
      for (const auto& [context, partition] : e.partition_by_context) pairs.push_back({context, partition});
      entries.back()["partition_by_context"] = std::move(pairs);
    }
  }
  doc["entries"] = std::move(entries);
  return replace_file_with_text(path, doc.dump(2) + "\n", "tuning");
}

}  // namespace pagecheck
