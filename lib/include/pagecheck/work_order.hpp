// The warp-specialised prefill kernel's work order (attn_sm90_ws.cu): which
// (sequence, KV head, query tile) the persistent grid's work index w names.
// Pairs (pair = kv_head * num_seqs + seq) go in sections whose K/V fit in
// L2 together; inside a section, the heaviest query tiles come first (the
// latest tokens see the most keys under causal masking), one tile of every
// pair of the section before the next lighter one. CTA b takes w = b,
// b + grid, ... Written once for the kernel's producer and consumers and
// for tests/test_work_order.cpp. Host-only code may include it: it needs
// no CUDA header.
#pragma once

#include <cstdint>

#include "pagecheck/fast_div.hpp"

namespace pagecheck {

struct WorkOrder {
  std::int64_t num_work = 0;  // tiles_per_seq * pairs work tiles
  std::int64_t num_seqs = 0;
  std::int64_t pairs = 0;  // num_seqs * kv_heads
  std::int32_t tiles_per_seq = 0;
  std::int32_t pairs_per_section = 1;
  // Work tiles, pairs and a section's tiles all under 2^31: the 32-bit
  // path with fast_div (a 64-bit division is a called subroutine of about
  // 70 instructions, and three of them sat between every two work tiles).
  std::int32_t work32 = 0;
  // work32's divisors: work tiles per section, pairs per section (all
  // sections but the last, and the last), sequences.
  FastDiv div_section, div_pair, div_pair_last, div_seqs;
  std::uint32_t last_section = 0;
};

struct WorkTile {
  std::int64_t seq = 0;
  int kv_head = 0;
  int tile = 0;  // query tile, tiles_per_seq - 1 first
};

// Pairs per section: as many as have K/V (pair_bytes each, at the longest
// sequence) within half of L2, at least 1. With waves > 0, also no more than
// fill `waves` waves of work tiles on `ctas` CTAs, so that the first wave
// reads the K/V of fewer pairs at once; but that cap never goes below one
// pair per kMinCtasPerPair CTAs. Session 22 (H100, prefill_dev quick): the
// cap of four waves took 16 x 512 from 290 to 309 TFLOP/s (33 pairs
// instead of 100) and 8 x 2048 from 509 to 523 (9 instead of 25), and lost
// 2.2% at 1 x 8192 with 3 pairs instead of 6. CTA b takes work tiles b,
// b + ctas, ..., heaviest first inside a section, so the fewer the pairs,
// the more weight levels of causal work one wave spans (3 pairs of 256
// query tiles: 44 levels) and the more the first CTAs, which take the
// heaviest tile of each wave, carry. 6 pairs (22 levels) measured as fast as
// 8, hence the floor of one pair per 22 CTAs.
inline constexpr std::int64_t kMinCtasPerPair = 22;
inline std::int64_t section_pairs(std::int64_t pairs, std::int64_t pair_bytes, std::int64_t l2_bytes,
                                  std::int64_t tiles_per_seq, std::int64_t ctas, int waves) {
  std::int64_t per_section = pairs;
  if (pair_bytes > 0) {
    const std::int64_t fit = l2_bytes / 2 / pair_bytes;
    per_section = fit < 1 ? 1 : (fit < pairs ? fit : pairs);
  }
  if (waves > 0 && tiles_per_seq > 0) {
    std::int64_t cap = (waves * ctas + tiles_per_seq - 1) / tiles_per_seq;  // pairs whose tiles fill the waves
    const std::int64_t least = (ctas + kMinCtasPerPair - 1) / kMinCtasPerPair;
    if (cap < least) cap = least;
    if (cap < per_section) per_section = cap < 1 ? 1 : cap;
  }
  return per_section;
}

inline WorkOrder make_work_order(std::int64_t num_seqs, std::int64_t kv_heads, std::int32_t tiles_per_seq,
                                 std::int64_t pairs_per_section) {
  constexpr std::int64_t kMax32 = 0x7fffffff;
  WorkOrder o;
  o.num_seqs = num_seqs;
  o.pairs = num_seqs * kv_heads;
  o.tiles_per_seq = tiles_per_seq;
  o.num_work = o.pairs * tiles_per_seq;
  if (pairs_per_section < 1) pairs_per_section = 1;
  if (o.pairs > 0 && pairs_per_section > o.pairs) pairs_per_section = o.pairs;
  o.pairs_per_section = static_cast<std::int32_t>(pairs_per_section < kMax32 ? pairs_per_section : kMax32);
  o.work32 = o.num_work < kMax32 && o.pairs < kMax32 && pairs_per_section * tiles_per_seq < kMax32;
  if (o.work32 && o.pairs > 0 && tiles_per_seq > 0) {
    const std::int64_t sections = (o.pairs + pairs_per_section - 1) / pairs_per_section;
    o.last_section = static_cast<std::uint32_t>(sections - 1);
    o.div_section = fast_divisor(static_cast<std::uint32_t>(pairs_per_section * tiles_per_seq));
    o.div_pair = fast_divisor(static_cast<std::uint32_t>(pairs_per_section));
    o.div_pair_last = fast_divisor(static_cast<std::uint32_t>(o.pairs - (sections - 1) * pairs_per_section));
    o.div_seqs = fast_divisor(static_cast<std::uint32_t>(num_seqs));
  }
  return o;
}

// Work index w (0 <= w < num_work): section w / (pairs_per_section *
// tiles_per_seq); inside it, query tile tiles_per_seq - 1 - local / n of
// pair first_pair + local % n, n the section's pairs.
PAGECHECK_HOST_DEVICE inline WorkTile work_tile(const WorkOrder& o, std::int64_t w) {
  WorkTile t;
  if (o.work32) {
    const auto w32 = static_cast<std::uint32_t>(w);
    const std::uint32_t section = fast_div(w32, o.div_section);
    const std::uint32_t first_pair = section * o.div_pair.divisor;
    const FastDiv& n = section == o.last_section ? o.div_pair_last : o.div_pair;  // pairs in this section
    const std::uint32_t local = w32 - section * o.div_section.divisor;
    const std::uint32_t quot = fast_div(local, n);
    const std::uint32_t pair = first_pair + (local - quot * n.divisor);
    t.tile = o.tiles_per_seq - 1 - static_cast<int>(quot);
    const std::uint32_t head = fast_div(pair, o.div_seqs);
    t.seq = pair - head * o.div_seqs.divisor;
    t.kv_head = static_cast<int>(head);
  } else {
    const std::int64_t per_section = static_cast<std::int64_t>(o.pairs_per_section) * o.tiles_per_seq;
    const std::int64_t section = w / per_section;
    const std::int64_t first_pair = section * o.pairs_per_section;
    const std::int64_t left = o.pairs - first_pair;
    const std::int64_t n = o.pairs_per_section < left ? o.pairs_per_section : left;
    const std::int64_t local = w - section * per_section;
    const std::int64_t pair = first_pair + local % n;
    t.tile = o.tiles_per_seq - 1 - static_cast<int>(local / n);
    t.seq = pair % o.num_seqs;
    t.kv_head = static_cast<int>(pair / o.num_seqs);
  }
  return t;
}

}  // namespace pagecheck
