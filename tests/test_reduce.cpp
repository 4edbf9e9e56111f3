// The cuts of `pagecheck reduce` (lib reduce.hpp): every kept element is the
// one it was, pages renumber without changing what the table reaches, and a
// cut that keeps the answers keeps the recorded output as the matching slice
// of the original's (while the reference of the cut case agrees with it).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pagecheck/reduce.hpp"
#include "pagecheck/reducer.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/validate.hpp"

namespace {

using namespace pagecheck;

SyntheticSpec chunked_spec(KvLayout layout, TableForm form) {
  SyntheticSpec spec;
  spec.num_seqs = 4;
  spec.q_heads = 8;
  spec.kv_heads = 2;
  spec.head_dim = 16;
  spec.block_size = 7;
  spec.layout = layout;
  spec.table_form = form;
  spec.seq_len_dist = LengthDist::List;
  spec.seq_len_list = {30, 9, 22, 15};
  spec.query_mode = QueryMode::Chunked;
  spec.q_len_dist = LengthDist::List;
  spec.q_len_list = {6, 1, 22, 4};
  spec.kv_dtype = DType::F32;
  spec.query_dtype = DType::F32;
  return spec;
}

Case generated(const SyntheticSpec& spec) {
  auto c = generate_case(spec);
  REQUIRE(c.ok());
  REQUIRE(validate_case(*c).ok());
  return *c;
}

// The reference's output as the recorded output, as `gen --with-output` does.
Case with_recorded(Case c) {
  auto ref = reference_attention(c, 1);
  REQUIRE(ref.ok());
  c.recorded_output = Tensor::from_doubles(DType::F32, {c.num_tokens(), c.q_heads(), c.v_head_dim()}, ref->output);
  c.recorded_lse = Tensor::from_doubles(DType::F32, {c.num_tokens(), c.q_heads()}, ref->lse);
  return c;
}

// The cut case's reference agrees with its recorded output (the recorded
// output is still the right answer).
void check_recorded_still_right(const Case& c) {
  REQUIRE(validate_case(c).ok());
  REQUIRE(c.recorded_output.has_value());
  auto ref = reference_attention(c, 1);
  REQUIRE(ref.ok());
  REQUIRE(ref->output.size() == static_cast<std::size_t>(c.recorded_output->numel()));
  for (std::size_t i = 0; i < ref->output.size(); ++i)
    REQUIRE(std::abs(ref->output[i] - c.recorded_output->at(i)) <= 1e-6 * (1 + std::abs(ref->output[i])));
  for (std::size_t i = 0; i < ref->lse.size(); ++i)
    REQUIRE(std::abs(ref->lse[i] - c.recorded_lse->at(i)) <= 1e-6 * (1 + std::abs(ref->lse[i])));
}

}  // namespace

TEST_CASE("select_elements picks indices along each axis, row-major, bytes exact") {
  std::vector<float> values(2 * 3 * 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const Tensor t = Tensor::from_vector<float>(DType::F32, {2, 3, 4}, values);
  const Tensor s = select_elements(t, {{1}, {2, 0}});
  REQUIRE(s.shape == std::vector<std::int64_t>{1, 2, 4});
  const std::vector<double> want = {20, 21, 22, 23, 12, 13, 14, 15};
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(s.at(i) == want[i]);
  const Tensor inner = select_elements(t, {{}, {}, {3, 1}});
  REQUIRE(inner.shape == std::vector<std::int64_t>{2, 3, 2});
  CHECK(inner.at(0) == 3);
  CHECK(inner.at(1) == 1);
  CHECK(inner.at(11) == 21);
  CHECK_THROWS_AS(select_elements(t, {{2}}), std::out_of_range);
}

TEST_CASE("compact_pages keeps every referenced key and value, and the answers") {
  for (const KvLayout layout : {KvLayout::NHD, KvLayout::HND}) {
    for (const TableForm form : {TableForm::Dense, TableForm::Csr}) {
      CAPTURE(static_cast<int>(layout));
      CAPTURE(static_cast<int>(form));
      SyntheticSpec spec = chunked_spec(layout, form);
      spec.kv_dtype = DType::F8_E4M3;  // one-byte elements: the byte copy, not a float copy
      const Case c = generated(spec);
      const Case compact = compact_pages(c);
      REQUIRE(validate_case(compact).ok());
      CHECK(compact.num_blocks() == referenced_pages(c));
      CHECK(compact.num_blocks() < c.num_blocks());
      CHECK(referenced_pages(compact) == compact.num_blocks());
      const PagedKvView before = c.host_view(), after = compact.host_view();
      for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
        CHECK(compact.seq_lens[s] == c.seq_lens[s]);
        for (std::int64_t t = 0; t < c.seq_lens[s]; ++t)
          for (std::int64_t h = 0; h < c.kv_heads(); ++h)
            for (std::int64_t d = 0; d < c.head_dim(); ++d) {
              const auto k0 = static_cast<std::size_t>(before.key_offset(s, t, h) + d);
              const auto k1 = static_cast<std::size_t>(after.key_offset(s, t, h) + d);
              const auto v0 = static_cast<std::size_t>(before.value_offset(s, t, h) + d);
              const auto v1 = static_cast<std::size_t>(after.value_offset(s, t, h) + d);
              REQUIRE(std::memcmp(c.key_cache.data + k0, compact.key_cache.data + k1, 1) == 0);
              REQUIRE(std::memcmp(c.value_cache.data + v0, compact.value_cache.data + v1, 1) == 0);
            }
      }
      // Sharing survives renumbering: two entries name one page before iff after.
      for (std::int64_t s = 0; s < c.num_seqs(); ++s)
        for (std::int64_t r = 0; r < c.num_seqs(); ++r)
          for (std::int64_t t = 0; t < c.seq_lens[s]; t += c.block_size())
            for (std::int64_t u = 0; u < c.seq_lens[r]; u += c.block_size())
              REQUIRE((before.page(s, t) == before.page(r, u)) == (after.page(s, t) == after.page(r, u)));
      auto ref0 = reference_attention(c, 1), ref1 = reference_attention(compact, 1);
      REQUIRE(ref0.ok());
      REQUIRE(ref1.ok());
      CHECK(ref0->output == ref1->output);
      CHECK(ref0->lse == ref1->lse);
    }
  }
}

TEST_CASE("keep_sequences and keep_heads slice the query and the recorded output consistently") {
  const Case c = with_recorded(generated(chunked_spec(KvLayout::HND, TableForm::Csr)));
  const Case seqs = keep_sequences(c, {0, 2});
  CHECK(seqs.num_seqs() == 2);
  CHECK(seqs.num_tokens() == 6 + 22);
  check_recorded_still_right(seqs);
  // Sequence 2's first token is row 6 of the cut case and row 7 of the original.
  const std::int64_t row = c.q_heads() * c.v_head_dim();
  CHECK(seqs.recorded_output->at(6 * row) == c.recorded_output->at(7 * row));
  CHECK(seqs.query.at(6 * c.q_heads() * c.head_dim()) == c.query.at(7 * c.q_heads() * c.head_dim()));

  // KV head 1 and the third query head of its group: original query head 6.
  const Case heads = keep_heads(c, {1}, {2});
  CHECK(heads.q_heads() == 1);
  CHECK(heads.kv_heads() == 1);
  check_recorded_still_right(heads);
  for (std::int64_t t = 0; t < c.num_tokens(); ++t)
    for (std::int64_t d = 0; d < c.v_head_dim(); ++d)
      REQUIRE(heads.recorded_output->at(static_cast<std::size_t>(t * c.v_head_dim() + d)) ==
              c.recorded_output->at(static_cast<std::size_t>((t * c.q_heads() + 6) * c.v_head_dim() + d)));
  // Two KV heads, two members each: GQA group 2 kept.
  const Case group = keep_heads(c, {0, 1}, {1, 3});
  CHECK(group.q_heads() == 4);
  CHECK(group.kv_heads() == 2);
  check_recorded_still_right(group);
}

TEST_CASE("cut_sequence keeps the recorded output only where the answers stay the same") {
  for (const TableForm form : {TableForm::Dense, TableForm::Csr}) {
    const Case c = with_recorded(generated(chunked_spec(KvLayout::NHD, form)));
    // Sequence 0: seq_len 30, q_len 6 (positions 24..29). Its third token
    // (position 26) alone, causal: keys 0..26 are all it sees.
    const SequenceCut one{27, 2, 1};
    CHECK(cut_keeps_answers(c, 0, one));
    const Case cut = cut_sequence(c, 0, one);
    CHECK(cut.seq_lens[0] == 27);
    CHECK(cut.q_len(0) == 1);
    CHECK(cut.num_tokens() == c.num_tokens() - 5);
    check_recorded_still_right(cut);
    const std::int64_t row = c.q_heads() * c.v_head_dim();
    for (std::int64_t i = 0; i < row; ++i) REQUIRE(cut.recorded_output->at(i) == c.recorded_output->at(2 * row + i));
    // The later sequences' rows follow unchanged.
    CHECK(cut.recorded_output->at(row) == c.recorded_output->at(6 * row));

    // A shorter context under the same token moves it: the answer changes,
    // the recorded output and LSE go.
    const SequenceCut moved{10, 2, 1};
    CHECK_FALSE(cut_keeps_answers(c, 0, moved));
    const Case shorter = cut_sequence(c, 0, moved);
    REQUIRE(validate_case(shorter).ok());
    CHECK_FALSE(shorter.recorded_output.has_value());
    CHECK_FALSE(shorter.recorded_lse.has_value());
    if (form == TableForm::Csr) CHECK(shorter.table.page_indptr[1] - shorter.table.page_indptr[0] == 2);
  }
  // Without a causal mask every key is seen: any tokens, but the whole context.
  SyntheticSpec spec = chunked_spec(KvLayout::NHD, TableForm::Dense);
  spec.causal = false;
  const Case open = with_recorded(generated(spec));
  CHECK(cut_keeps_answers(open, 0, {30, 0, 2}));
  CHECK_FALSE(cut_keeps_answers(open, 0, {26, 0, 2}));
  check_recorded_still_right(cut_sequence(open, 0, {30, 0, 2}));
  // A window makes the position matter again.
  spec.sliding_window = 5;
  const Case windowed = generated(spec);
  CHECK_FALSE(cut_keeps_answers(windowed, 0, {30, 0, 2}));
  CHECK(cut_keeps_answers(windowed, 0, {30, 4, 2}));
}

// ---- feature simplifications (reduce after its cuts, on recomputed paths) ----

namespace {

// A softcap of 20, a window of 5 keys, sinks and ALiBi.
SyntheticSpec with_logit_features(SyntheticSpec spec) {
  spec.softcap = 20;
  spec.sliding_window = 5;
  spec.sinks = true;
  spec.alibi = true;
  return spec;
}

}  // namespace

TEST_CASE("simplify: layout, table and an fp8 cache in BF16 keep the answers bit for bit") {
  SyntheticSpec spec = chunked_spec(KvLayout::HND, TableForm::Csr);
  spec.kv_dtype = DType::F8_E4M3;
  spec.k_scale = 0.37;
  spec.v_scale = 2.5;
  const Case c = with_recorded(generated(spec));
  auto ref0 = reference_attention(c, 1);
  REQUIRE(ref0.ok());
  for (const Simplification s : {Simplification::Layout, Simplification::Table, Simplification::KvDtype}) {
    CAPTURE(describe_simplification(c, s));
    const auto simple = simplify(c, s);
    REQUIRE(simple.has_value());
    REQUIRE(validate_case(*simple).ok());
    CHECK_FALSE(simple->recorded_output.has_value());  // a simplification drops the recorded answer
    CHECK_FALSE(simplify(*simple, s).has_value());     // already plain
    auto ref1 = reference_attention(*simple, 1);
    REQUIRE(ref1.ok());
    CHECK(ref0->output == ref1->output);  // E4M3 values are exact in BF16; the pages move, not the keys
    CHECK(ref0->lse == ref1->lse);
  }
  CHECK(simplify(c, Simplification::Layout)->params.layout == KvLayout::NHD);
  CHECK(simplify(c, Simplification::Table)->table.form == TableForm::Dense);
  CHECK(simplify(c, Simplification::KvDtype)->key_cache.dtype == DType::BF16);
}

TEST_CASE("simplify: the logit features and the mask turn off; plain cases have nothing to simplify") {
  SyntheticSpec spec = with_logit_features(chunked_spec(KvLayout::NHD, TableForm::Dense));
  spec.causal = false;
  const Case c = generated(spec);
  const auto off = [&](Simplification s) {
    auto simple = simplify(c, s);
    REQUIRE(simple.has_value());
    CHECK(validate_case(*simple).ok());
    return *simple;
  };
  CHECK(off(Simplification::Softcap).params.softcap == 0);
  CHECK(off(Simplification::Window).params.sliding_window == 0);
  CHECK_FALSE(off(Simplification::Sinks).has_sinks());
  CHECK_FALSE(off(Simplification::Alibi).has_alibi());
  CHECK(off(Simplification::Causal).params.causal);
  const Case q = off(Simplification::QueryDtype);
  CHECK(q.query.dtype == DType::BF16);
  for (std::int64_t i = 0; i < q.query.numel(); ++i)  // rounded to BF16
    CHECK(std::abs(q.query.at(static_cast<std::size_t>(i)) - c.query.at(static_cast<std::size_t>(i))) <=
          std::abs(c.query.at(static_cast<std::size_t>(i))) * 0x1p-8);
  // Each simplification changes only its feature.
  CHECK(off(Simplification::Softcap).params.sliding_window == 5);
  CHECK(off(Simplification::Window).has_sinks());

  SyntheticSpec plain = chunked_spec(KvLayout::NHD, TableForm::Dense);
  plain.kv_dtype = plain.query_dtype = DType::BF16;
  const Case p = generated(plain);
  for (const Simplification s : kSimplifications) CHECK_FALSE(simplify(p, s).has_value());
}

TEST_CASE("the reducer keeps the features a failure needs and simplifies the rest") {
  // A fake path that fails ("output beyond tolerance") on any case that has
  // a softcap and at least one sequence of 20 tokens or more: the reduction
  // must keep the softcap, drop the window, sinks and ALiBi, make the
  // query and cache BF16, NHD and dense, and cut to one sequence and head.
  const Case c = generated(with_logit_features(chunked_spec(KvLayout::HND, TableForm::Csr)));
  int runs = 0;
  const ReduceRun run = [&](const Case& candidate) -> std::optional<PathReport> {
    ++runs;
    if (!validate_case(candidate).ok()) return std::nullopt;
    PathReport row;
    row.path = "fake";
    bool long_seq = false;
    for (std::int64_t s = 0; s < candidate.num_seqs(); ++s) long_seq = long_seq || candidate.seq_lens[s] >= 20;
    if (candidate.params.softcap > 0 && long_seq) {
      row.status = PathStatus::Fail;
      row.reason = "output: 1 of 8 elements beyond atol 0.01 + rtol 0.01·|ref|";
    } else {
      row.status = PathStatus::Pass;
    }
    return row;
  };
  auto reduced = reduce_failure(c, 400, run);
  REQUIRE(reduced.has_value());
  CHECK(reduced->kind == "output beyond tolerance");
  CHECK(reduced->tests == runs);
  const Case& r = reduced->reduced;
  CHECK(r.num_seqs() == 1);
  CHECK(r.seq_lens[0] == 20);
  CHECK(r.q_heads() == 1);
  CHECK(r.params.softcap == 20);
  CHECK(r.params.sliding_window == 0);
  CHECK_FALSE(r.has_sinks());
  CHECK_FALSE(r.has_alibi());
  CHECK(r.params.causal);
  CHECK(r.query.dtype == DType::BF16);
  CHECK(r.key_cache.dtype == DType::BF16);
  CHECK(r.params.layout == KvLayout::NHD);
  CHECK(r.table.form == TableForm::Dense);
  CHECK(std::find(reduced->simplified.begin(), reduced->simplified.end(), "softcap off") == reduced->simplified.end());
  CHECK(reduced->simplified.size() == 7);  // window, sinks, ALiBi, KV, query, layout, table (causal was on)

  // sound_only (a recorded output's failure): cuts only, no simplification.
  Reducer sound(true, 400, run);
  REQUIRE(sound.start(c).has_value());
  const Case kept = sound.reduce(c);
  CHECK(kept.params.layout == KvLayout::HND);
  CHECK(kept.table.form == TableForm::Csr);
  CHECK(kept.has_sinks());
  CHECK(sound.simplified().empty());
}
