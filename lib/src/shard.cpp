#include "pagecheck/shard.hpp"

#include <charconv>
#include <limits>

#include <fmt/format.h>

namespace pagecheck {

namespace {

bool parse_int(std::string_view text, int& value) {
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  return error == std::errc() && stop == end && !text.empty();
}

}  // namespace

Expected<ShardInfo> parse_shard(std::string_view text) {
  const auto slash = text.find('/');
  ShardInfo shard;
  if (slash == std::string_view::npos || !parse_int(text.substr(0, slash), shard.index) ||
      !parse_int(text.substr(slash + 1), shard.count))
    return usage_error(fmt::format("'{}' is not I/N (0-based shard I of N, e.g. 0/4)", text), "--shard");
  if (shard.count < 1) return usage_error(fmt::format("{}: N must be at least 1", text), "--shard");
  if (shard.index < 0) return usage_error(fmt::format("{}: I must be >= 0 (shards are 0-based)", text), "--shard");
  if (shard.index >= shard.count)
    return usage_error(fmt::format("{}: I must be < N (shards are 0-based: 0..{})", text, shard.count - 1), "--shard");
  return shard;
}

bool in_shard(std::int64_t k, const ShardInfo& shard) { return k % shard.count == shard.index; }

std::vector<std::int64_t> shard_indices(std::int64_t total, const ShardInfo& shard) {
  std::vector<std::int64_t> out;
  for (std::int64_t k = shard.index; k < total; k += shard.count) out.push_back(k);
  return out;
}

std::string shard_label(const ShardInfo& shard) { return fmt::format("{}/{}", shard.index, shard.count); }

}  // namespace pagecheck
