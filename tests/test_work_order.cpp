// The warp-specialised prefill kernel's work order
// (lib/include/pagecheck/work_order.hpp): every (sequence, KV head, query
// tile) once, sections of whole pairs in order, heaviest tiles first inside
// a section, the 32-bit path equal to the 64-bit one; and the pairs a
// section takes by L2 and by the waves cap.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "pagecheck/work_order.hpp"

using pagecheck::make_work_order;
using pagecheck::section_pairs;
using pagecheck::work_tile;
using pagecheck::WorkOrder;
using pagecheck::WorkTile;

namespace {

void check_order(std::int64_t seqs, std::int64_t heads, std::int32_t tiles, std::int64_t per_section) {
  CAPTURE(seqs);
  CAPTURE(heads);
  CAPTURE(tiles);
  CAPTURE(per_section);
  const WorkOrder o = make_work_order(seqs, heads, tiles, per_section);
  REQUIRE(o.num_work == seqs * heads * tiles);
  REQUIRE(o.work32 == 1);
  WorkOrder wide = o;
  wide.work32 = 0;
  const std::int64_t pairs = seqs * heads;
  const std::int64_t n_sec = o.pairs_per_section;
  std::set<std::tuple<std::int64_t, int, int>> seen;
  int last_tile = tiles;
  std::int64_t last_section = 0;
  for (std::int64_t w = 0; w < o.num_work; ++w) {
    CAPTURE(w);
    const WorkTile t = work_tile(o, w);
    const WorkTile t64 = work_tile(wide, w);
    CHECK(t.seq == t64.seq);
    CHECK(t.kv_head == t64.kv_head);
    CHECK(t.tile == t64.tile);
    REQUIRE(t.seq >= 0);
    REQUIRE(t.seq < seqs);
    REQUIRE(t.kv_head >= 0);
    REQUIRE(t.kv_head < heads);
    REQUIRE(t.tile >= 0);
    REQUIRE(t.tile < tiles);
    CHECK(seen.insert({t.seq, t.kv_head, t.tile}).second);
    // Sections of whole pairs, in order; inside one, tiles never grow.
    const std::int64_t pair = t.kv_head * seqs + t.seq;
    const std::int64_t section = pair / n_sec;
    CHECK(section >= last_section);
    if (section != last_section) last_tile = tiles;
    CHECK(t.tile <= last_tile);
    last_tile = t.tile;
    last_section = section;
  }
  CHECK(static_cast<std::int64_t>(seen.size()) == o.num_work);
  CHECK(last_section == (pairs + n_sec - 1) / n_sec - 1);
}

}  // namespace

TEST_CASE("work order: each work tile once, in sections of whole pairs, heaviest first") {
  // Sections that divide the pairs, a shorter last section, one pair a
  // section, one section, a single tile a pair, a single sequence.
  for (const auto& [seqs, heads, tiles] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int32_t>>{
           {16, 8, 16}, {8, 8, 64}, {1, 8, 256}, {3, 5, 7}, {1, 1, 1}, {7, 1, 3}, {2, 3, 1}}) {
    const std::int64_t pairs = seqs * heads;
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, pairs / 2, pairs - 1, pairs, pairs + 5}) {
      if (n < 1) continue;
      check_order(seqs, heads, tiles, n);
    }
  }
}

TEST_CASE("work order: the first wave of 16 x 512's sections") {
  // 16 sequences, 8 KV heads, 16 query tiles: sections of 100 pairs put
  // tile 15 of 100 different pairs into a 132-CTA first wave; sections of
  // 33 put tiles 15-12 of 33 pairs there.
  for (const auto& [per_section, first_wave_pairs] :
       std::vector<std::pair<std::int64_t, std::size_t>>{{100, 100}, {33, 33}}) {
    const WorkOrder o = make_work_order(16, 8, 16, per_section);
    std::set<std::int64_t> pairs;
    for (std::int64_t w = 0; w < 132; ++w) {
      const WorkTile t = work_tile(o, w);
      pairs.insert(t.kv_head * 16 + t.seq);
      CHECK(t.tile >= (per_section == 100 ? 14 : 12));
    }
    CHECK(pairs.size() == first_wave_pairs);
  }
}

TEST_CASE("work order: pairs a section by L2, and the waves cap") {
  const std::int64_t l2 = 50LL << 20;  // an H100's 50 MB
  // K/V per pair at head dim 128, BF16: 512 bytes a key.
  const std::int64_t kb512 = 512 * 512, kb2048 = 2048 * 512, kb8192 = 8192 * 512;
  CHECK(section_pairs(128, kb512, l2, 16, 132, 0) == 100);
  CHECK(section_pairs(64, kb2048, l2, 64, 132, 0) == 25);
  CHECK(section_pairs(8, kb8192, l2, 256, 132, 0) == 6);
  // The cap of four waves: ceil(4 x 132 / tiles a pair), never below one
  // pair per 22 CTAs (6 on 132): 1 x 8192's cap of 3 rises to 6, which L2
  // allows too.
  CHECK(section_pairs(128, kb512, l2, 16, 132, 4) == 33);
  CHECK(section_pairs(64, kb2048, l2, 64, 132, 4) == 9);
  CHECK(section_pairs(8, kb8192, l2, 256, 132, 4) == 6);
  // Where L2 would take more pairs than the floor: the floor, not the cap.
  CHECK(section_pairs(32, kb8192, 1LL << 30, 256, 132, 4) == 6);
  CHECK(section_pairs(32, kb8192, 1LL << 30, 256, 132, 0) == 32);
  // The floor follows the CTAs: 78 SMs take ceil(78 / 22) = 4.
  CHECK(section_pairs(32, kb8192, 1LL << 30, 256, 78, 4) == 4);
  // The cap only lowers: few pairs, or pairs above half of L2 each.
  CHECK(section_pairs(4, kb512, l2, 16, 132, 4) == 4);
  CHECK(section_pairs(8, 64LL << 20, l2, 4, 132, 4) == 1);
  // No K/V bytes (nothing to fit): one section of all pairs.
  CHECK(section_pairs(10, 0, l2, 16, 132, 0) == 10);
  // make_work_order keeps a section within [1, pairs].
  CHECK(make_work_order(2, 2, 3, 0).pairs_per_section == 1);
  CHECK(make_work_order(2, 2, 3, 99).pairs_per_section == 4);
}
