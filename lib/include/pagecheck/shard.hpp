// --shard I/N: a deterministic share of a run's cases, for sweeps spread over
// CI jobs, hosts or GPUs (docs/cli.md "Sharding").
//
// Shards are 0-based: I in 0..N-1. Case k of the invocation's case list (the
// declared order: the default suite as built, presets and --seqs variants in
// command-line order, replay files sorted by their bytes) goes to shard
// k mod N. The shards of one case list partition it exactly: every case in
// one shard, sizes within one of each other.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pagecheck/status.hpp"

namespace pagecheck {

struct ShardInfo {
  int index = 0;                 // I, 0-based
  int count = 1;                 // N
  std::int64_t cases_total = 0;  // cases of the whole list (all shards)
};

// Parses "I/N" ("--shard 3/2: I must be < N"); usage errors name the option.
Expected<ShardInfo> parse_shard(std::string_view text);

// Whether case `k` of the full list belongs to `shard`.
bool in_shard(std::int64_t k, const ShardInfo& shard);

// The positions in 0..total-1 that belong to `shard`, ascending.
std::vector<std::int64_t> shard_indices(std::int64_t total, const ShardInfo& shard);

// "2/4"
std::string shard_label(const ShardInfo& shard);

}  // namespace pagecheck
