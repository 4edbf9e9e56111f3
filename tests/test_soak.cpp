// pagecheck soak's case drawing and failure signatures (pagecheck/soak.hpp),
// and the batch-invariance check (pagecheck/batch_invariance.hpp) against
// the reference and a stand-in path that follows the batch.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include <fmt/format.h>

#include "pagecheck/batch_invariance.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/soak.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/validate.hpp"

using namespace pagecheck;

namespace {

std::int64_t pool_elements(const SyntheticSpec& s) {
  std::int64_t pages = 0;
  for (auto len : s.seq_len_list) pages += (len + s.block_size - 1) / s.block_size;
  return pages * s.pool_factor * s.block_size * s.kv_heads * std::max(s.head_dim, s.v_head_dim);
}

std::string describe(const SoakDraw& d) {
  return fmt::format("{}: {}", d.spec.name, spec_metadata(d.spec).at("generator_settings"));
}

}  // namespace

TEST_CASE("every drawn soak case is one the generator accepts and validation passes") {
  const SoakLimits limits;
  for (std::uint64_t seed : {1ULL, 2ULL, 7ULL, 42ULL, 20261204ULL, 0xffffffffffffffffULL}) {
    for (std::uint64_t k = 0; k < 50; ++k) {
      const SoakDraw draw = draw_soak_case(seed, k, limits);
      INFO(describe(draw));
      REQUIRE(check_synthetic_spec(draw.spec).ok());
      CHECK(soak_reference_work(draw.spec) <= limits.max_reference_work);
      CHECK(draw.spec.num_seqs <= limits.max_seqs);
      CHECK(draw.spec.seq_len_max <= limits.max_seq_len);
      CHECK_FALSE(draw.huge_pool);  // not without huge_pools
      CHECK((draw.spec.pool_factor == 3 || pool_elements(draw.spec) <= limits.max_pool_elements));
      CHECK(draw.spec.k_scale != 1.0);
      CHECK(draw.spec.v_scale != 1.0);
      if (draw.plan) {
        CHECK(draw.plan->kind == PlanKind::SplitKv);
        CHECK(draw.plan->partition_tokens >= 1);
        CHECK((draw.spec.seq_len_max + draw.plan->partition_tokens - 1) / draw.plan->partition_tokens <= 512);
      }
      auto c = generate_case_sourced(draw.spec);
      REQUIRE_MESSAGE(c.ok(), c.error().describe());
      const ValidationReport v = validate_case(*c);
      CHECK_MESSAGE(v.ok(), (v.errors.empty() ? std::string() : v.errors.front()));
      CHECK(c->num_seqs() == draw.spec.num_seqs);
      for (std::int64_t s = 0; s < c->num_seqs(); ++s)
        CHECK(c->seq_lens[s] == draw.spec.seq_len_list[static_cast<std::size_t>(s)]);
    }
  }
}

TEST_CASE("huge pools: past 2^31 elements, only where the limits allow") {
  SoakLimits limits;
  limits.huge_pools = true;
  int huge = 0;
  for (std::uint64_t k = 0; k < 400; ++k) {
    const SoakDraw draw = draw_soak_case(3, k, limits);
    INFO(describe(draw));
    REQUIRE(check_synthetic_spec(draw.spec).ok());
    if (!draw.huge_pool) continue;
    ++huge;
    CHECK_FALSE(draw.spec.share_pages);
    CHECK(pool_elements(draw.spec) > (std::int64_t{1} << 31));
    const std::int64_t page_elements =
        draw.spec.block_size * draw.spec.kv_heads * std::max(draw.spec.head_dim, draw.spec.v_head_dim);
    CHECK(pool_elements(draw.spec) / page_elements <= (std::int64_t{1} << 21));  // page ids the generator shuffles
  }
  CHECK(huge > 0);
  CHECK(huge < 400 / 10);
}

TEST_CASE("huge pools of every KV dtype are made: the generator's size check counts the listed lengths' pages") {
  // Seed 1, case 1664 on an H100: 14 sequences (7..1089 tokens) over an F32
  // pool of 2.2e9 elements (8.9 GB a cache) were refused as "would exceed
  // 16 GiB" by a bound that took every sequence as long as the longest, and
  // the soak exited 3 (invalid case).
  SoakLimits limits;
  limits.huge_pools = true;
  const SoakDraw known = draw_soak_case(1, 1664, limits);
  CHECK(known.huge_pool);
  CHECK(known.spec.kv_dtype == DType::F32);
  auto made = generate_case_sourced(known.spec);
  CHECK_MESSAGE(made.ok(), (made.ok() ? std::string() : made.error().describe()));
  int huge = 0;
  for (std::uint64_t k = 0; k < 2000 && huge < 12; ++k) {
    const SoakDraw draw = draw_soak_case(1, k, limits);
    if (!draw.huge_pool) continue;
    ++huge;
    INFO(describe(draw));
    auto c = generate_case_sourced(draw.spec);
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? std::string() : c.error().describe()));
    CHECK(validate_case(*c).ok());
  }
  CHECK(huge == 12);
}

TEST_CASE("case k of seed S is reproducible alone") {
  for (std::uint64_t k : {0ULL, 1ULL, 17ULL, 999ULL, 123456789ULL}) {
    const SoakDraw a = draw_soak_case(11, k);
    // Drawing others in between changes nothing: a draw has no hidden state.
    for (std::uint64_t other = 0; other < 5; ++other) (void)draw_soak_case(11, other);
    const SoakDraw b = draw_soak_case(11, k);
    INFO(describe(a));
    CHECK(spec_metadata(a.spec) == spec_metadata(b.spec));
    CHECK(a.plan.has_value() == b.plan.has_value());
    if (a.plan && b.plan) CHECK(a.plan->to_string() == b.plan->to_string());
    CHECK(a.spec.name == fmt::format("soak-11-{}", k));
    auto ca = generate_case_sourced(a.spec), cb = generate_case_sourced(b.spec);
    REQUIRE(ca.ok());
    REQUIRE(cb.ok());
    REQUIRE(ca->query.nbytes == cb->query.nbytes);
    CHECK(std::memcmp(ca->query.data, cb->query.data, ca->query.nbytes) == 0);
    CHECK(ca->table.page_indices == cb->table.page_indices);
  }
  // Another seed, or the next case, is another case.
  CHECK(spec_metadata(draw_soak_case(11, 5).spec) != spec_metadata(draw_soak_case(12, 5).spec));
  CHECK(spec_metadata(draw_soak_case(11, 5).spec) != spec_metadata(draw_soak_case(11, 6).spec));
}

TEST_CASE("the draws reach every axis value") {
  std::set<std::string> seen;
  const auto see = [&](const std::string& axis, const std::string& value) { seen.insert(axis + "=" + value); };
  for (std::uint64_t k = 0; k < 1500; ++k) {
    const SoakDraw d = draw_soak_case(5, k);
    const SyntheticSpec& s = d.spec;
    see("q", std::string(dtype_name(s.query_dtype)));
    see("kv", std::string(dtype_name(s.kv_dtype)));
    see("layout", s.layout == KvLayout::NHD ? "NHD" : "HND");
    see("table", s.table_form == TableForm::Dense ? "dense" : "csr");
    if (s.block_size == 1) see("block", "1");
    if (s.block_size == 512) see("block", "512");
    if ((s.block_size & (s.block_size - 1)) != 0) see("block", "not a power of two");
    if (s.block_size > 256 && s.block_size < 512) see("block", "257..511");
    const std::int64_t dv = s.v_head_dim > 0 ? s.v_head_dim : s.head_dim;
    see("dims", fmt::format("{}/{}", s.head_dim, dv));
    const std::int64_t group = s.q_heads / s.kv_heads;
    see("gqa", s.kv_heads == 1 && group > 1 ? "mqa" : std::to_string(group));
    if (s.sliding_window == 0) see("window", "none");
    else if (s.sliding_window <= 8) see("window", "small");
    else see("window", "large");
    for (auto len : s.seq_len_list)
      if (s.sliding_window == len) see("window", "a sequence's length");
    see("softcap", s.softcap > 0 ? "on" : "off");
    see("scale", s.scale ? "explicit" : "default");
    see("profile", std::string(value_profile_name(s.profile)));
    see("mode", std::string(query_mode_name(s.query_mode)));
    see("causal", s.causal ? "causal" : "non-causal");
    see("sinks", s.sinks ? "on" : "off");
    see("alibi", s.alibi ? "on" : "off");
    see("latent", s.latent ? "on" : "off");
    see("shared prefix", s.share_pages ? "on" : "off");
    see("pool", s.pool_factor == 3 ? "3x" : "larger");
    see("plan", d.plan ? "explicit split" : "the run's");
    if (d.plan && d.plan->threshold_tokens == 0) see("plan", "threshold 0");
    see("seqs", s.num_seqs == 1 ? "1" : "several");
    for (auto len : s.seq_len_list) {
      if (len == 1) see("length", "1");
      const auto r = len % s.block_size;
      if (s.block_size > 2 && len > s.block_size && (r == 0 || r == 1 || r == s.block_size - 1))
        see("length", "page edge");
      for (std::int64_t p : {256, 512, 1024})
        if (len >= p - 1 && (len % p == 0 || len % p == 1 || len % p == p - 1)) see("length", fmt::format("partition {} edge", p));
      if (len > 2048) see("length", "past 2048");
    }
  }
  const std::vector<std::string> expected = {
      "q=F32", "q=F16", "q=BF16", "kv=F32", "kv=F16", "kv=BF16", "kv=F8_E4M3", "kv=F8_E5M2", "layout=NHD",
      "layout=HND", "table=dense", "table=csr", "block=1", "block=512", "block=not a power of two", "block=257..511",
      "dims=64/64", "dims=128/128", "dims=256/256", "dims=192/128", "dims=96/96", "dims=32/32", "dims=80/80", "dims=112/112", "dims=120/120", "gqa=1", "gqa=2", "gqa=3", "gqa=4",
      "gqa=8", "gqa=mqa", "window=none", "window=small", "window=large", "window=a sequence's length", "softcap=on",
      "softcap=off", "scale=explicit", "scale=default", "profile=gaussian", "profile=llm", "profile=large-logits",
      "mode=decode", "mode=prefill", "mode=chunked", "mode=mixed", "causal=causal", "causal=non-causal",
      "sinks=on", "sinks=off", "alibi=on", "alibi=off", "latent=on", "latent=off", "dims=576/512",
      "shared prefix=on", "shared prefix=off", "pool=3x", "pool=larger", "plan=explicit split", "plan=the run's",
      "plan=threshold 0", "seqs=1", "seqs=several", "length=1", "length=page edge", "length=partition 256 edge",
      "length=partition 512 edge", "length=partition 1024 edge", "length=past 2048"};
  for (const auto& value : expected) CHECK_MESSAGE(seen.count(value) == 1, value);
}

TEST_CASE("failure signatures: one per path, failure kind and kernel-visible features") {
  SyntheticSpec spec;
  spec.num_seqs = 3;
  spec.seq_len_max = 40;
  auto a = generate_case(spec);
  spec.seed = 99;
  spec.seq_len_max = 77;  // other lengths and values: the same failure
  auto b = generate_case(spec);
  spec.kv_dtype = DType::F8_E5M2;
  auto c = generate_case(spec);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  const std::string sa = failure_signature("split", "output beyond tolerance", *a);
  CHECK(sa == failure_signature("split", "output beyond tolerance", *b));
  CHECK(sa != failure_signature("auto", "output beyond tolerance", *a));
  CHECK(sa != failure_signature("split", "unwritten", *a));
  CHECK(sa != failure_signature("split", "output beyond tolerance", *c));
  CHECK(sa.find("kv=BF16") != std::string::npos);

  SignatureSet set;
  CHECK(set.insert(sa));
  CHECK_FALSE(set.insert(failure_signature("split", "output beyond tolerance", *b)));  // met again
  CHECK(set.insert(failure_signature("split", "output beyond tolerance", *c)));
  CHECK(set.size() == 2);
  CHECK(set.contains(sa));
}

namespace {

Case small_mixed_case(TableForm form, std::vector<std::int64_t> lens) {
  SyntheticSpec spec;
  spec.num_seqs = static_cast<std::int64_t>(lens.size());
  spec.seq_len_dist = LengthDist::List;
  spec.seq_len_list = std::move(lens);
  spec.query_mode = QueryMode::Mixed;
  spec.q_len_dist = LengthDist::List;
  spec.q_len_list = {3, 2};
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 16;
  spec.block_size = 4;
  spec.table_form = form;
  spec.sliding_window = 6;
  auto c = generate_case(spec);
  REQUIRE(c.ok());
  return *c;
}

BatchOutput reference_output(const Case& c) {
  auto ref = reference_attention(c, 1);
  REQUIRE(ref.ok());
  return {std::vector<float>(ref->output.begin(), ref->output.end()), std::vector<float>(ref->lse.begin(), ref->lse.end())};
}

}  // namespace

TEST_CASE("batch variants: each sequence alone, and the batch reversed and padded past two waves") {
  for (TableForm form : {TableForm::Dense, TableForm::Csr}) {
    const Case c = small_mixed_case(form, {5, 9, 13});
    const auto variants = batch_variants(c);
    REQUIRE(variants.size() == 4);
    for (std::int64_t s = 0; s < 3; ++s) CHECK(variants[static_cast<std::size_t>(s)].source == std::vector<std::int64_t>{s});
    const BatchVariant& padded = variants.back();
    CHECK(static_cast<std::int64_t>(padded.source.size()) == kInvariancePaddedCtas / c.kv_heads());
    std::vector<std::int64_t> real;
    for (auto s : padded.source)
      if (s >= 0) real.push_back(s);
    CHECK(real == std::vector<std::int64_t>{2, 1, 0});
    CHECK(padded.source.front() == -1);  // sequence 2 is not at its old place either
    for (const auto& variant : variants) {
      const Case batch = batch_case(c, variant);
      INFO(variant.name);
      const ValidationReport v = validate_case(batch);
      CHECK_MESSAGE(v.ok(), (v.errors.empty() ? std::string() : v.errors.front()));
      REQUIRE(batch.num_seqs() == static_cast<std::int64_t>(variant.source.size()));
      for (std::size_t i = 0; i < variant.source.size(); ++i) {
        const std::int64_t s = variant.source[i];
        CHECK(batch.seq_lens[i] == (s < 0 ? 1 : c.seq_lens[s]));
        CHECK(batch.q_len(static_cast<std::int64_t>(i)) == (s < 0 ? 1 : c.q_len(s)));
      }
    }
  }
}

TEST_CASE("batch variants of a larger batch: the first, last, longest and shortest sequence alone") {
  const Case c = small_mixed_case(TableForm::Dense, {9, 30, 3, 12, 7, 10});
  const auto variants = batch_variants(c);
  std::vector<std::string> names;
  for (const auto& v : variants) names.push_back(v.name);
  // First 0, last 5, longest 1 (30 keys), shortest 2 (3 keys), then the padded batch.
  REQUIRE(names.size() == 5);
  CHECK(names[0] == "alone 0");
  CHECK(names[1] == "alone 1");
  CHECK(names[2] == "alone 2");
  CHECK(names[3] == "alone 5");
  CHECK(variants.back().source.size() == static_cast<std::size_t>(kInvariancePaddedCtas / c.kv_heads()));
}

TEST_CASE("the reference is batch-invariant: every variant bitwise the full batch's") {
  for (TableForm form : {TableForm::Dense, TableForm::Csr}) {
    const Case c = small_mixed_case(form, {5, 9, 13, 2});
    const BatchOutput full = reference_output(c);
    const BatchRun run = [](const Case& batch, std::string&) -> Expected<std::optional<BatchOutput>> {
      return std::optional<BatchOutput>(reference_output(batch));
    };
    auto result = check_batch_invariance(c, full, run);
    REQUIRE(result.ok());
    CHECK(result->invariant);
    CHECK(result->variants_run == 5);
    CHECK_FALSE(result->first.has_value());
  }
}

TEST_CASE("a path that follows the batch is caught at the first sequence, token and head that differ") {
  const Case c = small_mixed_case(TableForm::Csr, {5, 9, 13});
  const BatchOutput full = reference_output(c);
  const std::int64_t heads = c.q_heads(), width = c.v_head_dim();
  // The stand-in: the reference, except that in a batch of another size than
  // the full one, the last element of each sequence longer than 8 keys moves
  // by one ulp (as a plan that splits by batch size rounds differently).
  const BatchRun follows_batch = [&](const Case& batch, std::string&) -> Expected<std::optional<BatchOutput>> {
    BatchOutput out = reference_output(batch);
    if (batch.num_seqs() == c.num_seqs()) return std::optional<BatchOutput>(out);
    for (std::int64_t s = 0; s < batch.num_seqs(); ++s) {
      if (batch.seq_lens[s] <= 8) continue;
      const std::int64_t last_token = batch.query_start_loc[s + 1] - 1;
      float& x = out.output[static_cast<std::size_t>((last_token * heads + heads - 1) * width + width - 1)];
      x = std::nextafter(x, 1e9f);
    }
    return std::optional<BatchOutput>(out);
  };
  auto result = check_batch_invariance(c, full, follows_batch);
  REQUIRE(result.ok());
  CHECK_FALSE(result->invariant);
  REQUIRE(result->first.has_value());
  const BatchDifference& d = *result->first;
  CHECK(d.variant == "alone 1");  // sequence 0 (5 keys) is untouched
  CHECK(d.seq == 1);
  CHECK(d.token == c.q_len(1) - 1);
  CHECK(d.head == heads - 1);
  CHECK(d.dim == width - 1);
  CHECK(d.full != d.other);
  CHECK(d.describe().find("seq 1 token") != std::string::npos);

  // An LSE that differs is named as such (dim -1).
  const BatchRun lse_differs = [&](const Case& batch, std::string&) -> Expected<std::optional<BatchOutput>> {
    BatchOutput out = reference_output(batch);
    if (batch.num_seqs() > c.num_seqs()) out.lse.back() = std::nextafter(out.lse.back(), -1e9f);
    return std::optional<BatchOutput>(out);
  };
  // The padded batch ends in fillers, whose LSE is not compared: move the
  // last real sequence's instead.
  const BatchRun real_lse_differs = [&](const Case& batch, std::string&) -> Expected<std::optional<BatchOutput>> {
    BatchOutput out = reference_output(batch);
    if (batch.num_seqs() > c.num_seqs()) {
      // The padded batch is reversed: sequence 0 of the full case is the
      // last real one, right after its filler.
      for (std::int64_t s = batch.num_seqs(); s-- > 0;) {
        if (batch.seq_lens[s] == c.seq_lens[0] && batch.q_len(s) == c.q_len(0)) {
          const auto row = static_cast<std::size_t>(batch.query_start_loc[s] * heads);
          out.lse[row] = std::nextafter(out.lse[row], -1e9f);
          break;
        }
      }
    }
    return std::optional<BatchOutput>(out);
  };
  auto fillers_only = check_batch_invariance(c, full, lse_differs);
  REQUIRE(fillers_only.ok());
  CHECK(fillers_only->invariant);
  auto lse = check_batch_invariance(c, full, real_lse_differs);
  REQUIRE(lse.ok());
  CHECK_FALSE(lse->invariant);
  REQUIRE(lse->first.has_value());
  CHECK(lse->first->seq == 0);
  CHECK(lse->first->token == 0);
  CHECK(lse->first->head == 0);
  CHECK(lse->first->dim == -1);

  // A variant the path does not take is skipped, with the reason.
  const BatchRun declines_padded = [&](const Case& batch, std::string& why) -> Expected<std::optional<BatchOutput>> {
    if (batch.num_seqs() > c.num_seqs()) {
      why = "n/a: too many sequences";
      return std::optional<BatchOutput>();
    }
    return std::optional<BatchOutput>(reference_output(batch));
  };
  auto skipped = check_batch_invariance(c, full, declines_padded);
  REQUIRE(skipped.ok());
  CHECK(skipped->invariant);
  CHECK(skipped->variants_run == 3);
  REQUIRE(skipped->variants_skipped.size() == 1);
  CHECK(skipped->variants_skipped.front().find("too many sequences") != std::string::npos);
}

TEST_CASE("--plan invariant: a fixed split, whatever the batch") {
  auto plan = parse_plan("invariant");
  REQUIRE(plan.ok());
  CHECK(plan->kind == PlanKind::SplitKv);
  CHECK(plan->partition_tokens == kInvariantPartitionTokens);
  CHECK(plan->threshold_tokens == kInvariantPartitionTokens);
  CHECK(plan->source == PlanSource::Explicit);
  CHECK(plan->to_string() == "split:1024:1024");
}
