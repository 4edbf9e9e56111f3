// The direct/split-KV execution plan, as in the runtime module pagecheck
// mirrors: Direct, or SplitKv{partition_tokens, threshold_tokens} where a
// sequence longer than threshold_tokens goes to the split path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pagecheck/status.hpp"

namespace pagecheck {

enum class PlanKind : std::uint8_t { Direct, SplitKv };
enum class PlanSource : std::uint8_t { Default, Explicit, Tuned };

struct Plan {
  PlanKind kind = PlanKind::Direct;
  std::int64_t partition_tokens = 0;  // SplitKv only
  std::int64_t threshold_tokens = 0;  // SplitKv only: longer sequences split
  PlanSource source = PlanSource::Default;

  // "direct" or "split:512:2048"
  std::string to_string() const;
  // "default", "explicit", "tuned"
  std::string_view source_name() const;
};

// Parses "direct", "invariant" (batch_invariant_plan) or
// "split:PARTITION:THRESHOLD" (source = Explicit).
Expected<Plan> parse_plan(std::string_view text);

// The batch-invariant plan (`--plan invariant`): split:1024:1024, the same
// for every batch, so that a sequence's split depends on its own length
// only. The built-in heuristic chooses from the batch size (direct past two
// waves of CTAs), which makes `auto` not batch-invariant.
inline constexpr std::int64_t kInvariantPartitionTokens = 1024;
Plan batch_invariant_plan();

// What the planner looks at (the runtime module's AttentionPlanRequest).
struct PlanRequest {
  std::int64_t max_context_tokens = 0;
  std::int64_t query_heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t value_head_dim = 0;
  std::int64_t num_seqs = 0;
  int multiprocessors = 132;  // of the device the plan is for
  // The direct grid of the kernel that will run, where it is not the GQA
  // kernels' (0: num_seqs x kv_heads CTAs, several a multiprocessor, so
  // direct from two waves). The latent (MLA) kernel on Hopper: one CTA a
  // multiprocessor with 64 query heads each, so direct from one wave.
  std::int64_t direct_ctas = 0;
  bool one_cta_per_multiprocessor = false;
};

// Measured crossovers written by `pagecheck tune`, read by --tuning FILE.
struct TuningEntry {
  std::int64_t query_heads = 0, kv_heads = 0, head_dim = 0, value_head_dim = 0;
  std::int64_t num_seqs = 0;          // batch size it was measured at; 0: any (the nearest one is used)
  std::int64_t partition_tokens = 0;
  std::int64_t threshold_tokens = 0;  // 0: split never wins
  // Optional: the best partition measured at each context length (ascending
  // contexts). choose_plan takes the entry for the smallest measured context
  // at or above the request's (else the longest); partition_tokens otherwise.
  std::vector<std::pair<std::int64_t, std::int64_t>> partition_by_context;
};
struct TuningTable {
  std::string device_name;
  std::vector<TuningEntry> entries;
};
Expected<TuningTable> read_tuning_file(const std::string& path);
Status write_tuning_file(const std::string& path, const TuningTable& table);

// The built-in heuristic (source Default), or the tuned entry matching the
// request's heads and dims (source Tuned) when `tuning` has one.
Plan choose_plan(const PlanRequest& request, const TuningTable* tuning);

}  // namespace pagecheck
