// The case features of issue 23 on the harness side: attention sinks, ALiBi,
// head sizes 32/80/96/112/120, latent (MLA) caches. For
// each: the case-file round trip and its errors, the reference against a
// small case worked by hand, the generator, the external-kernel ABI's version
// rules (pagecheck/external_abi.hpp) and the built-in paths' n/a reasons.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pagecheck/case_file.hpp"
#include "pagecheck/content_hash.hpp"
#include "pagecheck/external_abi.hpp"
#include "pagecheck/features.hpp"
#include "pagecheck/reduce.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/validate.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using namespace pagecheck;

namespace {

fs::path temp_dir() {
  static const test::ScratchDir dir("features");
  return dir.path;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A small mixed batch: GQA 4/2, d64, block 4, F32 query, BF16 cache.
SyntheticSpec small_spec() {
  SyntheticSpec spec;
  spec.name = "features";
  spec.seed = 23;
  spec.num_seqs = 3;
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.block_size = 4;
  spec.query_dtype = DType::F32;
  spec.kv_dtype = DType::BF16;
  spec.seq_len_dist = LengthDist::List;
  spec.seq_len_list = {21, 5, 1};
  spec.query_mode = QueryMode::Mixed;
  spec.q_len_dist = LengthDist::List;
  spec.q_len_list = {3, 1};
  return spec;
}

Case generate(const SyntheticSpec& spec) {
  auto c = generate_case(spec);
  REQUIRE_MESSAGE(c.ok(), c.error().describe());
  return std::move(c.value());
}

// The case saved, then loaded back.
Case round_trip(const Case& c, const std::string& stem) {
  const fs::path path = temp_dir() / (stem + ".safetensors");
  const auto saved = save_case_file(c, path);
  REQUIRE_MESSAGE(saved.ok(), saved.error().describe());
  auto loaded = load_case_file(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
  return std::move(loaded.value());
}

// The tensors and metadata of `c` as a file holds them, for editing.
SafetensorsFile parts_of(const Case& c) {
  const fs::path path = temp_dir() / "parts.safetensors";
  const auto saved = save_case_file(c, path);
  REQUIRE_MESSAGE(saved.ok(), saved.error().describe());
  auto file = read_safetensors(path);
  REQUIRE_MESSAGE(file.ok(), file.error().describe());
  return std::move(file.value());
}

std::string load_error(const SafetensorsFile& parts) {
  const fs::path path = temp_dir() / "bad.safetensors";
  const auto written = write_safetensors(path, parts.tensors, parts.metadata);
  REQUIRE_MESSAGE(written.ok(), written.error().describe());
  auto loaded = load_case_file(path);
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().code == ErrorCode::InvalidInput);
  return loaded.error().message;
}

// One sequence of `seq_len` keys, the last `q_len` of them queries; every
// query [1, 0, 0, 0] and every key [1, 0, 0, 0] (each logit 1 * 1/sqrt(4) =
// 0.5), value j = [10 j, 10 j + 1, 10 j + 2, 10 j + 3]; F32, NHD, block 2,
// pages in reverse order after a NaN page; `q_heads` query heads over one KV
// head.
Case hand_case(std::int64_t q_heads, std::int64_t seq_len, std::int64_t q_len) {
  Case c;
  c.name = "by-hand";
  const std::int64_t pages = (seq_len + 1) / 2, blocks = pages + 1;
  c.table.form = TableForm::Csr;
  c.table.page_indptr = {0, pages};
  for (std::int64_t p = 0; p < pages; ++p) c.table.page_indices.push_back(static_cast<std::int32_t>(blocks - 1 - p));
  c.seq_lens = {static_cast<std::int32_t>(seq_len)};
  c.query_start_loc = {0, static_cast<std::int32_t>(q_len)};
  c.query_start_loc_given = true;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> key(static_cast<std::size_t>(blocks * 2 * 4), nan), value(key.size(), nan);
  for (std::int64_t j = 0; j < seq_len; ++j) {
    const std::int64_t row = c.table.page_indices[j / 2] * 2 + j % 2;
    for (int d = 0; d < 4; ++d) {
      key[row * 4 + d] = d == 0 ? 1.0 : 0.0;
      value[row * 4 + d] = static_cast<double>(j * 10 + d);
    }
  }
  c.key_cache = Tensor::from_doubles(DType::F32, {blocks, 2, 1, 4}, key);
  c.value_cache = Tensor::from_doubles(DType::F32, {blocks, 2, 1, 4}, value);
  std::vector<double> query(static_cast<std::size_t>(q_len * q_heads * 4), 0.0);
  for (std::int64_t i = 0; i < q_len * q_heads; ++i) query[i * 4] = 1.0;
  c.query = Tensor::from_doubles(DType::F32, {q_len, q_heads, 4}, query);
  return c;
}

Case two_keys(std::int64_t q_heads) { return hand_case(q_heads, 2, 1); }

// An entry that takes everything its mask says (supports is never called
// here: external_refusal decides before it).
pagecheck_kernel_entry entry_with(std::uint32_t features) {
  pagecheck_kernel_entry e{};
  e.name = "test";
  e.features = features;
  return e;
}

std::string refusal(const pagecheck_kernel_entry& e, std::uint32_t minor, const Case& c) {
  return external_refusal(e, minor, c, describe_external_case(c));
}

}  // namespace

// --- attention sinks ----------------------------------------------------------

TEST_CASE("sinks: the reference against a case worked by hand") {
  // Head 0: sink 0.5 + ln 2, so exp(sink - 0.5) = 2 next to the two keys'
  // exp(0) each: weights 1/4, 1/4 (and 2/4 for the sink, which holds no
  // value): output = (v0 + v1) / 4 = [2.5, 3, 3.5, 4], LSE = 0.5 + ln 4.
  // Head 1: sink -30: exp(-30.5) next to 2, so the plain softmax remains:
  // output = (v0 + v1) / 2, LSE = 0.5 + ln 2 (within 1e-13).
  // Head 2: sink 0.5 + ln 2 + 20: the sink takes all but e^-20 of the mass;
  // LSE ~ the sink, output ~ 0.
  Case c = two_keys(3);
  const double ln2 = std::log(2.0);
  c.sinks = {static_cast<float>(0.5 + ln2), -30.0f, static_cast<float>(0.5 + ln2 + 20.0)};
  auto r = reference_attention(c, 1);
  REQUIRE(r.ok());
  const auto out = [&](int h, int d) { return r->output[static_cast<std::size_t>(h * 4 + d)]; };
  // The sink as stored (float), worked in double: s0 - 0.5 = ln 2 + tiny.
  const double s0 = static_cast<double>(c.sinks[0]), s2 = static_cast<double>(c.sinks[2]);
  const double norm0 = 2.0 + std::exp(s0 - 0.5);
  for (int d = 0; d < 4; ++d) {
    CHECK(out(0, d) == doctest::Approx((d + (10 + d)) / norm0).epsilon(1e-12));
    CHECK(out(0, d) == doctest::Approx((10.0 + 2 * d) / 4.0).epsilon(1e-6));
    CHECK(out(1, d) == doctest::Approx((10.0 + 2 * d) / 2.0).epsilon(1e-12));
    CHECK(std::fabs(out(2, d)) < 16.0 * std::exp(-20.0));
  }
  CHECK(r->lse[0] == doctest::Approx(0.5 + std::log(norm0)).epsilon(1e-12));
  CHECK(r->lse[0] == doctest::Approx(0.5 + std::log(4.0)).epsilon(1e-6));
  CHECK(r->lse[1] == doctest::Approx(0.5 + ln2).epsilon(1e-12));
  CHECK(r->lse[2] == doctest::Approx(s2 + std::log1p(2.0 * std::exp(0.5 - s2))).epsilon(1e-12));

  // Without sinks: the plain softmax for every head.
  Case plain = two_keys(3);
  auto p = reference_attention(plain, 1);
  REQUIRE(p.ok());
  for (int h = 0; h < 3; ++h) CHECK(p->lse[static_cast<std::size_t>(h)] == doctest::Approx(0.5 + ln2));
}

TEST_CASE("sinks: the reference matches a float64 scalar derivation on a generated case") {
  SyntheticSpec spec = small_spec();
  spec.sinks = true;
  spec.sliding_window = 3;
  const Case c = generate(spec);
  REQUIRE(c.sinks.size() == 4);
  auto r = reference_attention(c, 2);
  REQUIRE(r.ok());
  // Scalar loops, written apart from the reference: per token and head, the
  // logits over the visible keys, the sink in the normaliser only.
  const PagedKvView kv = c.host_view();
  const std::int64_t hq = c.q_heads(), dk = c.head_dim(), dv = c.v_head_dim(), group = hq / c.kv_heads();
  double worst = 0;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s)
    for (std::int64_t i = 0; i < c.q_len(s); ++i) {
      const std::int64_t token = c.query_start_loc[s] + i, pos = c.seq_lens[s] - c.q_len(s) + i;
      for (std::int64_t h = 0; h < hq; ++h) {
        std::vector<double> weight(static_cast<std::size_t>(c.seq_lens[s]), 0.0);
        double sum = std::exp(static_cast<double>(c.sinks[h]));  // no shift: the values here are small
        for (std::int64_t j = 0; j < c.seq_lens[s]; ++j) {
          if (!key_visible(j, pos, c.params.causal, c.params.sliding_window)) continue;
          double dot = 0;
          for (std::int64_t d = 0; d < dk; ++d)
            dot += c.query.at((token * hq + h) * dk + d) * c.key_cache.at(kv.key_offset(s, j, h / group) + d);
          weight[j] = std::exp(dot * c.scale());
          sum += weight[j];
        }
        worst = std::max(worst, std::fabs(r->lse[token * hq + h] - std::log(sum)));
        for (std::int64_t d = 0; d < dv; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j < c.seq_lens[s]; ++j)
            if (weight[j] > 0) o += weight[j] * c.value_cache.at(kv.value_offset(s, j, h / group) + d);
          worst = std::max(worst, std::fabs(r->output[(token * hq + h) * dv + d] - o / sum));
        }
      }
    }
  CHECK(worst < 1e-9);
}

TEST_CASE("sinks: a case file round-trips them bit for bit; F16/BF16 sinks are read and widened") {
  SyntheticSpec spec = small_spec();
  spec.sinks = true;
  const Case c = generate(spec);
  const Case back = round_trip(c, "sinks");
  REQUIRE(back.sinks.size() == c.sinks.size());
  CHECK(std::memcmp(back.sinks.data(), c.sinks.data(), c.sinks.size() * sizeof(float)) == 0);
  CHECK(case_content_hash(back) == case_content_hash(c));
  Case without = c;
  without.sinks.clear();
  CHECK(case_content_hash(without) != case_content_hash(c));
  CHECK(round_trip(without, "no-sinks").sinks.empty());

  SafetensorsFile parts = parts_of(c);
  CHECK(parts.tensors.at("sinks").dtype == DType::F32);
  parts.tensors["sinks"] = Tensor::from_doubles(DType::BF16, {4}, std::vector<double>{0.5, -1.25, 3.0, 8.0});
  const fs::path path = temp_dir() / "bf16-sinks.safetensors";
  REQUIRE(write_safetensors(path, parts.tensors, parts.metadata).ok());
  auto loaded = load_case_file(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
  CHECK(loaded->sinks == std::vector<float>{0.5f, -1.25f, 3.0f, 8.0f});
}

TEST_CASE("sinks: bad input names the tensor and the shape it must have") {
  const Case c = generate(small_spec());
  SafetensorsFile parts = parts_of(c);
  parts.tensors["sinks"] = Tensor::from_doubles(DType::F32, {3}, std::vector<double>{1, 2, 3});
  std::string why = load_error(parts);
  CHECK_MESSAGE(contains(why, "tensor 'sinks' has shape [3] F32 but must be [q_heads] = [4]"), why);
  parts.tensors["sinks"] = Tensor::from_doubles(DType::F32, {2, 2}, std::vector<double>{1, 2, 3, 4});
  why = load_error(parts);
  CHECK_MESSAGE((contains(why, "'sinks'") && contains(why, "[q_heads] = [4]")), why);
  parts.tensors["sinks"] = Tensor::from_vector(DType::I32, {4}, std::vector<std::int32_t>{1, 2, 3, 4});
  why = load_error(parts);
  CHECK_MESSAGE(contains(why, "tensor 'sinks' is I32"), why);
  parts.tensors.erase("sinks");
  parts.tensors["sink"] = Tensor::from_doubles(DType::F32, {4}, std::vector<double>{1, 2, 3, 4});
  why = load_error(parts);
  CHECK_MESSAGE(contains(why, "did you mean 'sinks'"), why);

  // Validation: a sink that is not finite, or a vector of the wrong length.
  Case bad = c;
  bad.sinks = {0.0f, std::numeric_limits<float>::infinity(), 1.0f, 2.0f};
  auto report = validate_case(bad);
  REQUIRE_FALSE(report.errors.empty());
  CHECK_MESSAGE(contains(report.errors.front(), "sinks[1] = inf must be finite"), report.errors.front());
  bad.sinks = {0.0f, 1.0f};
  report = validate_case(bad);
  REQUIRE_FALSE(report.errors.empty());
  CHECK_MESSAGE(contains(report.errors.front(), "sinks has 2 entries but must be [q_heads] = [4]"),
                report.errors.front());
}

TEST_CASE("sinks: the generator draws them from their own stream; reduce keeps those of the kept heads") {
  SyntheticSpec spec = small_spec();
  const Case plain = generate(spec);
  spec.sinks = true;
  const Case with = generate(spec);
  // Everything else is byte for byte the case without sinks.
  CHECK(plain.sinks.empty());
  REQUIRE(with.sinks.size() == 4);
  CHECK(std::memcmp(plain.query.data, with.query.data, plain.query.nbytes) == 0);
  CHECK(std::memcmp(plain.key_cache.data, with.key_cache.data, plain.key_cache.nbytes) == 0);
  for (float s : with.sinks) CHECK((s >= -2.0f && s <= 6.0f));
  CHECK(with.sinks[0] != with.sinks[1]);
  CHECK(with.params.extra_metadata.at("generator_settings").find("\"sinks\":true") != std::string::npos);

  const Case kept = keep_heads(with, {1}, {1});  // KV head 1's second query head: query head 3
  REQUIRE(kept.q_heads() == 1);
  CHECK(kept.sinks == std::vector<float>{with.sinks[3]});
}

TEST_CASE("sinks: every built-in path takes them; with ALiBi, fmha reports the ALiBi n/a") {
  SyntheticSpec spec = small_spec();
  CHECK(builtin_feature_refusal(generate(spec), "split").empty());
  spec.sinks = true;
  const Case c = generate(spec);
  for (const char* path : {"direct", "split", "auto", "prefill", "fmha"})
    CHECK_MESSAGE(builtin_feature_refusal(c, path).empty(), path);
  spec.alibi = true;
  const Case both = generate(spec);
  CHECK(builtin_feature_refusal(both, "prefill").empty());
  const std::string why = builtin_feature_refusal(both, "fmha");
  CHECK_MESSAGE((contains(why, "ALiBi") && contains(why, "fmha")), why);
}

TEST_CASE("sinks through the external ABI: only to a 1.2 library whose entry declares them") {
  SyntheticSpec spec = small_spec();
  const Case plain = generate(spec);
  spec.sinks = true;
  const Case sinks = generate(spec);
  const pagecheck_case_desc desc = describe_external_case(sinks);
  CHECK(desc.abi_minor == 2);
  CHECK(desc.has_sinks == 1);
  CHECK(desc.struct_size == sizeof(pagecheck_case_desc));
  CHECK(PAGECHECK_DESC_SIZE_1_2 == sizeof(pagecheck_case_desc));
  CHECK(PAGECHECK_DESC_SIZE_1_1 < PAGECHECK_DESC_SIZE_1_2);
  CHECK(describe_external_case(plain).has_sinks == 0);

  // A 1.1 library: never given a sinks case, whatever its mask says ("0:
  // everything" meant everything of 1.1); its plain cases are as before.
  for (std::uint32_t minor : {0u, 1u}) {
    CAPTURE(minor);
    for (std::uint32_t mask : {0u, ~0u}) {
      const std::string why = refusal(entry_with(mask), minor, sinks);
      CHECK_MESSAGE((contains(why, "attention sinks") && contains(why, fmt::format("ABI 1.{}", minor))), why);
      CHECK(refusal(entry_with(mask), minor, plain).empty());
    }
  }
  // A 1.2 library: only with the bit.
  std::string why = refusal(entry_with(0), 2, sinks);
  CHECK_MESSAGE(contains(why, "PAGECHECK_FEATURE_SINKS"), why);
  why = refusal(entry_with(PAGECHECK_FEATURE_DECODE | PAGECHECK_FEATURE_PREFILL), 2, sinks);
  CHECK_MESSAGE(contains(why, "PAGECHECK_FEATURE_SINKS"), why);
  const std::uint32_t all = PAGECHECK_FEATURE_DECODE | PAGECHECK_FEATURE_PREFILL | PAGECHECK_FEATURE_SINKS;
  CHECK(refusal(entry_with(all), 2, sinks).empty());
  CHECK(refusal(entry_with(0), 2, plain).empty());
}

TEST_CASE("presets: gpt-oss-20b is its window layer and its full layer, with sinks") {
  auto group = preset_cases("gpt-oss-20b");
  REQUIRE(group.ok());
  REQUIRE(group->size() == 2);
  const SyntheticSpec& window = (*group)[0];
  const SyntheticSpec& full = (*group)[1];
  CHECK(window.name == "gpt-oss-20b-window");
  CHECK(full.name == "gpt-oss-20b-full");
  for (const SyntheticSpec* s : {&window, &full}) {
    CHECK(s->q_heads == 64);
    CHECK(s->kv_heads == 8);
    CHECK(s->head_dim == 64);
    CHECK(s->sinks);
    const Case c = generate(*s);
    CHECK(c.sinks.size() == 64);
    CHECK(validate_case(c).errors.empty());
  }
  CHECK(window.sliding_window == 128);
  CHECK(window.seq_len_max > 128);
  CHECK(full.sliding_window == 0);
  auto single = preset_cases("llama3-8b");
  REQUIRE(single.ok());
  CHECK(single->size() == 1);
  auto unknown = preset_cases("gpt-oss-17b");
  REQUIRE_FALSE(unknown.ok());
  CHECK(contains(unknown.error().message, "gpt-oss-20b"));
}

// --- ALiBi --------------------------------------------------------------------

TEST_CASE("alibi: the reference against cases worked by hand, positions absolute in chunked prefill") {
  // Every logit is 0.5; ALiBi adds slope * (j - pos). With slope ln 3 a key
  // one place back weighs 1/3 of the query's own, two places back 1/9.
  const double ln3 = std::log(3.0);
  Case decode = two_keys(2);  // position 1 over keys 0, 1
  decode.alibi_slopes = {static_cast<float>(ln3), 0.0f};
  auto r = reference_attention(decode, 1);
  REQUIRE(r.ok());
  // Head 0: weights 1/3 : 1 -> (v0 + 3 v1) / 4 = [7.5, 8.5, 9.5, 10.5]; LSE = 0.5 + ln(4/3).
  // Head 1 (slope 0): (v0 + v1) / 2; LSE = 0.5 + ln 2.
  const double w = std::exp(-static_cast<double>(decode.alibi_slopes[0]));  // 1/3 up to float rounding
  for (int d = 0; d < 4; ++d) {
    CHECK(r->output[static_cast<std::size_t>(d)] == doctest::Approx((w * d + (10 + d)) / (1 + w)).epsilon(1e-12));
    CHECK(r->output[static_cast<std::size_t>(d)] == doctest::Approx(7.5 + d).epsilon(1e-6));
    CHECK(r->output[static_cast<std::size_t>(4 + d)] == doctest::Approx(5.0 + d).epsilon(1e-12));
  }
  CHECK(r->lse[0] == doctest::Approx(0.5 + std::log(1 + w)).epsilon(1e-12));
  CHECK(r->lse[0] == doctest::Approx(0.5 + std::log(4.0 / 3.0)).epsilon(1e-6));
  CHECK(r->lse[1] == doctest::Approx(0.5 + std::log(2.0)).epsilon(1e-12));

  // Chunked prefill: 3 keys, the last 2 are queries at positions 1 and 2.
  // Token 0 (pos 1) sees keys 0, 1: as above. Token 1 (pos 2) sees keys 0,
  // 1, 2 with weights 1/9 : 1/3 : 1 -> (v0 + 3 v1 + 9 v2) / 13, LSE = 0.5 +
  // ln(13/9). A kernel that took the chunk's own index as the position would
  // give token 0 the weights of position 0 (key 0 alone).
  Case chunk = hand_case(1, 3, 2);
  chunk.alibi_slopes = {static_cast<float>(ln3)};
  auto rc = reference_attention(chunk, 1);
  REQUIRE(rc.ok());
  for (int d = 0; d < 4; ++d) {
    CHECK(rc->output[static_cast<std::size_t>(d)] == doctest::Approx(7.5 + d).epsilon(1e-6));
    CHECK(rc->output[static_cast<std::size_t>(4 + d)] ==
          doctest::Approx((d + 3.0 * (10 + d) + 9.0 * (20 + d)) / 13.0).epsilon(1e-6));
  }
  CHECK(rc->lse[1] == doctest::Approx(0.5 + std::log(13.0 / 9.0)).epsilon(1e-6));

  // Non-causal: keys after the position get a positive bias. Token 0 (pos 1)
  // now also sees key 2, one place ahead: weights 1/3 : 1 : 3.
  chunk.params.causal = false;
  auto rn = reference_attention(chunk, 1);
  REQUIRE(rn->lse.size() == 2);
  CHECK(rn->lse[0] == doctest::Approx(0.5 + std::log(1.0 / 3.0 + 1.0 + 3.0)).epsilon(1e-6));
}

TEST_CASE("alibi: the slopes of BLOOM and MPT") {
  // 8 heads: 2^-1 ... 2^-8.
  const auto eight = alibi_slopes(8);
  REQUIRE(eight.size() == 8);
  for (int i = 0; i < 8; ++i) CHECK(eight[static_cast<std::size_t>(i)] == doctest::Approx(std::exp2(-(i + 1))));
  // 12 heads: the 8 of 8 heads, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  const auto twelve = alibi_slopes(12);
  REQUIRE(twelve.size() == 12);
  for (int i = 0; i < 8; ++i) CHECK(twelve[static_cast<std::size_t>(i)] == eight[static_cast<std::size_t>(i)]);
  for (int i = 0; i < 4; ++i)
    CHECK(twelve[static_cast<std::size_t>(8 + i)] == doctest::Approx(std::exp2(-0.5 - i)));
  CHECK(alibi_slopes(1) == std::vector<float>{std::exp2(-8.0f)});
}

TEST_CASE("alibi: round trip, bad input, the generator, taken by decode and n/a on prefill and fmha, the ABI") {
  SyntheticSpec spec = small_spec();
  spec.alibi = true;
  spec.sinks = true;  // both at once
  const Case c = generate(spec);
  REQUIRE(c.alibi_slopes == alibi_slopes(4));
  const Case back = round_trip(c, "alibi");
  CHECK(back.alibi_slopes == c.alibi_slopes);
  CHECK(back.sinks == c.sinks);
  CHECK(case_content_hash(back) == case_content_hash(c));
  Case without = c;
  without.alibi_slopes.clear();
  CHECK(case_content_hash(without) != case_content_hash(c));

  SafetensorsFile parts = parts_of(c);
  parts.tensors["alibi_slopes"] = Tensor::from_doubles(DType::F32, {8}, std::vector<double>(8, 0.5));
  const std::string why = load_error(parts);
  CHECK_MESSAGE(contains(why, "tensor 'alibi_slopes' has shape [8] F32 but must be [q_heads] = [4]: one ALiBi slope"),
                why);
  Case bad = c;
  bad.alibi_slopes[2] = std::numeric_limits<float>::quiet_NaN();
  const auto report = validate_case(bad);
  REQUIRE_FALSE(report.errors.empty());
  CHECK_MESSAGE(contains(report.errors.front(), "alibi_slopes[2] = nan must be finite"), report.errors.front());

  // The reference with ALiBi differs from the one without, and a flipped
  // sign differs again.
  auto with = reference_attention(c);
  auto none = reference_attention(without);
  Case flipped = c;
  for (auto& s : flipped.alibi_slopes) s = -s;
  auto wrong = reference_attention(flipped);
  REQUIRE((with.ok() && none.ok() && wrong.ok()));
  double differs = 0, flips = 0;
  for (std::size_t i = 0; i < with->output.size(); ++i) {
    differs = std::max(differs, std::fabs(with->output[i] - none->output[i]));
    flips = std::max(flips, std::fabs(with->output[i] - wrong->output[i]));
  }
  CHECK(differs > 0.05);
  CHECK(flips > 0.05);

  const Case kept = keep_heads(c, {0}, {1});
  CHECK(kept.alibi_slopes == std::vector<float>{c.alibi_slopes[1]});

  Case alibi_only = c;
  alibi_only.sinks.clear();
  for (const char* path : {"direct", "split", "auto", "prefill"})
    CHECK_MESSAGE(builtin_feature_refusal(alibi_only, path).empty(), path);
  const std::string reason = builtin_feature_refusal(alibi_only, "fmha");
  CHECK_MESSAGE((contains(reason, "ALiBi") && contains(reason, "fmha")), reason);
  const pagecheck_case_desc desc = describe_external_case(alibi_only);
  CHECK(desc.has_alibi == 1);
  CHECK(desc.has_sinks == 0);
  for (std::uint32_t minor : {0u, 1u}) {
    const std::string reason = refusal(entry_with(0), minor, alibi_only);
    CHECK_MESSAGE((contains(reason, "ALiBi") && contains(reason, fmt::format("ABI 1.{}", minor))), reason);
  }
  const std::uint32_t decode_prefill = PAGECHECK_FEATURE_DECODE | PAGECHECK_FEATURE_PREFILL;
  CHECK(contains(refusal(entry_with(decode_prefill | PAGECHECK_FEATURE_SINKS), 2, alibi_only), "PAGECHECK_FEATURE_ALIBI"));
  CHECK(refusal(entry_with(decode_prefill | PAGECHECK_FEATURE_ALIBI), 2, alibi_only).empty());
  // Both features: both bits.
  CHECK(contains(refusal(entry_with(decode_prefill | PAGECHECK_FEATURE_ALIBI), 2, c), "PAGECHECK_FEATURE_SINKS"));
  CHECK(refusal(entry_with(decode_prefill | PAGECHECK_FEATURE_ALIBI | PAGECHECK_FEATURE_SINKS), 2, c).empty());
}

// --- head sizes -----------------------------------------------------------------

TEST_CASE("head sizes 32, 80, 96, 112, 120: the reference, a round trip, and a 1.1 library that declares no list") {
  for (std::int64_t dim : {32, 80, 96, 112, 120}) {
    CAPTURE(dim);
    SyntheticSpec spec = small_spec();
    spec.head_dim = dim;
    spec.query_dtype = DType::F32;
    spec.kv_dtype = DType::F32;
    const Case c = generate(spec);
    REQUIRE(c.head_dim() == dim);
    CHECK(validate_case(c).errors.empty());
    const Case back = round_trip(c, "dim");
    CHECK(case_content_hash(back) == case_content_hash(c));
    auto r = reference_attention(c);
    REQUIRE(r.ok());
    // Every output row is a convex combination of the value rows: inside their range.
    for (double v : r->output) CHECK(std::isfinite(v));

    CHECK(head_dim_added_in_1_2(dim, dim));
    // A 1.0/1.1 entry with no head_dims list ("any" in its day): not given the size.
    for (std::uint32_t minor : {0u, 1u}) {
      const std::string why = refusal(entry_with(0), minor, c);
      CHECK_MESSAGE(contains(why, fmt::format("head_dim {}/{}", dim, dim)), why);
      CHECK_MESSAGE(contains(why, "head_dims"), why);
    }
    // ... given it when its list names it; a 1.2 entry that declares nothing takes it.
    pagecheck_kernel_entry listed = entry_with(0);
    const std::int32_t pair[2] = {static_cast<std::int32_t>(dim), static_cast<std::int32_t>(dim)};
    listed.head_dim_count = 1;
    listed.head_dims = pair;
    CHECK(refusal(listed, 1, c).empty());
    CHECK(refusal(entry_with(0), 2, c).empty());
  }
  // The sizes of ABI 1.1's suite still reach an old library that declares nothing.
  for (std::int64_t dim : {64, 128, 256}) CHECK_FALSE(head_dim_added_in_1_2(dim, dim));
  CHECK_FALSE(head_dim_added_in_1_2(192, 128));
  CHECK_FALSE(head_dim_added_in_1_2(16, 16));  // soak's unbuilt size, never in ABI 1.1's rule set either
  auto phi = preset("phi3-mini");
  REQUIRE(phi.ok());
  CHECK(phi->head_dim == 96);
}

// --- latent (MLA) caches ------------------------------------------------------

namespace {

// One sequence of two tokens over a latent cache of rows [latent a, latent b,
// rope r, rope s]: token 0 = [1, 0, 0, 0], token 1 = [0, 1, 0, 1]; V is the
// latent, [1, 0] and [0, 1]. Three query heads, scale 1 (explicit):
//   head 0: q = 0                  logits 0, 0      -> V = [1/2, 1/2], LSE ln 2
//   head 1: q = [0, 0, 0, ln 3]    logits 0, ln 3   -> V = [1/4, 3/4], LSE ln 4 (the rope column decides)
//   head 2: q = [ln 3, 0, 0, 0]    logits ln 3, 0   -> V = [3/4, 1/4], LSE ln 4
// A kernel that read V from the rope columns would give [0, 0], [0, 3/4], [0, 1/4].
SafetensorsFile latent_parts() {
  SafetensorsFile f;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // [num_blocks 2, block_size 2, 4]; block 1 holds the sequence, block 0 NaN.
  f.tensors["kv_c_and_k_pe_cache"] = Tensor::from_doubles(
      DType::F32, {2, 2, 4}, std::vector<double>{nan, nan, nan, nan, nan, nan, nan, nan, 1, 0, 0, 0, 0, 1, 0, 1});
  const double ln3 = std::log(3.0);
  f.tensors["query"] =
      Tensor::from_doubles(DType::F32, {1, 3, 4}, std::vector<double>{0, 0, 0, 0, 0, 0, 0, ln3, ln3, 0, 0, 0});
  f.tensors["block_table"] = Tensor::from_vector(DType::I32, {1, 1}, std::vector<std::int32_t>{1});
  f.tensors["seq_lens"] = Tensor::from_vector(DType::I32, {1}, std::vector<std::int32_t>{2});
  f.metadata = {{"kv_lora_rank", "2"}, {"scale", "1.0"}};
  return f;
}

Case load_parts(const SafetensorsFile& parts, const std::string& stem) {
  const fs::path path = temp_dir() / (stem + ".safetensors");
  REQUIRE(write_safetensors(path, parts.tensors, parts.metadata).ok());
  auto loaded = load_case_file(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
  return std::move(loaded.value());
}

void check_latent_answer(const Case& c, double v_factor) {
  auto r = reference_attention(c, 1);
  REQUIRE(r.ok());
  REQUIRE(r->output.size() == 6);
  const double want[3][2] = {{0.5, 0.5}, {0.25, 0.75}, {0.75, 0.25}};
  for (int h = 0; h < 3; ++h)
    for (int d = 0; d < 2; ++d)
      CHECK(r->output[static_cast<std::size_t>(h * 2 + d)] == doctest::Approx(v_factor * want[h][d]).epsilon(1e-6));
  CHECK(r->lse[0] == doctest::Approx(std::log(2.0)).epsilon(1e-6));
  CHECK(r->lse[1] == doctest::Approx(std::log(4.0)).epsilon(1e-6));
  CHECK(r->lse[2] == doctest::Approx(std::log(4.0)).epsilon(1e-6));
}

}  // namespace

TEST_CASE("latent (MLA): vLLM's kv_c_and_k_pe_cache, the reference against a case worked by hand") {
  const Case c = load_parts(latent_parts(), "latent");
  CHECK(c.has_latent());
  CHECK(c.cache_form == CacheForm::VllmLatent);
  CHECK(c.kv_heads() == 1);
  CHECK(c.key_head_dim() == 4);
  CHECK(c.v_head_dim() == 2);
  CHECK(c.value_cache.data == c.key_cache.data);  // one tensor, viewed in place
  const PagedKvView view = c.host_view();
  CHECK(view.value_strides.slot == view.key_strides.slot);
  CHECK(validate_case(c).errors.empty());
  check_latent_answer(c, 1.0);
  // The stored latent means x * v_scale as V (and x * k_scale as K).
  SafetensorsFile scaled = latent_parts();
  scaled.metadata["v_scale"] = "2.0";
  check_latent_answer(load_parts(scaled, "latent-v-scale"), 2.0);
  // FlashMLA's rank-4 form [num_blocks, block_size, 1, head_dim] is the same cache.
  SafetensorsFile rank4 = latent_parts();
  rank4.tensors["kv_c_and_k_pe_cache"].shape = {2, 2, 1, 4};
  check_latent_answer(load_parts(rank4, "latent-rank4"), 1.0);
}

TEST_CASE("latent (MLA): FlashInfer's ckv_cache + kpe_cache and q_nope + q_pe give the same case; written as vLLM's") {
  const SafetensorsFile vllm = latent_parts();
  SafetensorsFile fi;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  fi.tensors["ckv_cache"] = Tensor::from_doubles(DType::F32, {2, 2, 2}, std::vector<double>{nan, nan, nan, nan, 1, 0, 0, 1});
  fi.tensors["kpe_cache"] = Tensor::from_doubles(DType::F32, {2, 2, 2}, std::vector<double>{nan, nan, nan, nan, 0, 0, 0, 1});
  const double ln3 = std::log(3.0);
  fi.tensors["q_nope"] = Tensor::from_doubles(DType::F32, {1, 3, 2}, std::vector<double>{0, 0, 0, 0, ln3, 0});
  fi.tensors["q_pe"] = Tensor::from_doubles(DType::F32, {1, 3, 2}, std::vector<double>{0, 0, 0, ln3, 0, 0});
  fi.tensors["kv_indptr"] = Tensor::from_vector(DType::I32, {2}, std::vector<std::int32_t>{0, 1});
  fi.tensors["kv_indices"] = Tensor::from_vector(DType::I32, {1}, std::vector<std::int32_t>{1});
  fi.tensors["kv_last_page_len"] = Tensor::from_vector(DType::I32, {1}, std::vector<std::int32_t>{2});
  fi.metadata = {{"scale", "1.0"}};
  const Case c = load_parts(fi, "latent-flashinfer");
  CHECK(c.cache_form == CacheForm::FlashInferLatent);
  CHECK(c.v_head_dim() == 2);
  CHECK(c.params.kv_lora_rank == 2);  // from ckv_cache's width
  check_latent_answer(c, 1.0);
  const Case from_vllm = load_parts(vllm, "latent-again");
  // Same key rows of the referenced page (page 0 is NaN in both), same query.
  CHECK(std::memcmp(c.key_cache.data + 8 * 4, from_vllm.key_cache.data + 8 * 4, 8 * 4) == 0);
  CHECK(std::memcmp(c.query.data, from_vllm.query.data, c.query.nbytes) == 0);

  // Written back in vLLM's form, read back the same, bit for bit.
  const Case back = round_trip(c, "latent-written");
  CHECK(back.cache_form == CacheForm::VllmLatent);
  CHECK(back.params.kv_lora_rank == 2);
  CHECK(back.key_cache.nbytes == c.key_cache.nbytes);
  CHECK(std::memcmp(back.key_cache.data, c.key_cache.data, c.key_cache.nbytes) == 0);
  CHECK(case_content_hash(back) == case_content_hash(c));
  SafetensorsFile written = parts_of(c);
  CHECK(written.tensors.count("kv_c_and_k_pe_cache") == 1);
  CHECK(written.tensors.count("key_cache") == 0);
  CHECK(written.tensors.at("kv_c_and_k_pe_cache").shape == std::vector<std::int64_t>{2, 2, 4});
  CHECK(written.metadata.at("kv_lora_rank") == "2");
}

TEST_CASE("latent (MLA): bad input names the tensor, the metadata key and what they must be") {
  SafetensorsFile parts = latent_parts();
  parts.metadata.erase("kv_lora_rank");
  std::string why = load_error(parts);
  CHECK_MESSAGE(contains(why, "metadata 'kv_lora_rank' is missing"), why);
  parts = latent_parts();
  parts.metadata["kv_lora_rank"] = "5";
  why = load_error(parts);
  CHECK_MESSAGE(contains(why, "kv_lora_rank 5 is wider than the latent cache's rows (4 columns)"), why);
  parts = latent_parts();
  parts.tensors["kv_c_and_k_pe_cache"].shape = {2, 1, 2, 4};
  why = load_error(parts);
  CHECK_MESSAGE(contains(why, "dimension 2 must be 1"), why);
  parts = latent_parts();
  parts.metadata["kv_layout"] = "HND";
  why = load_error(parts);
  CHECK_MESSAGE(contains(why, "latent (MLA) cache has one KV head"), why);
  parts = latent_parts();
  parts.tensors["key_cache"] = parts.tensors.at("kv_c_and_k_pe_cache");
  why = load_error(parts);
  CHECK_MESSAGE(contains(why, "KV cache forms"), why);
  // kv_lora_rank with an ordinary cache.
  SafetensorsFile ordinary = parts_of(generate(small_spec()));
  ordinary.metadata["kv_lora_rank"] = "32";
  why = load_error(ordinary);
  CHECK_MESSAGE(contains(why, "not a latent (MLA) cache"), why);
  // FlashInfer's form: the two halves must agree; q_nope needs q_pe.
  SafetensorsFile fi;
  fi.tensors["ckv_cache"] = Tensor::from_doubles(DType::F32, {2, 2, 2}, std::vector<double>(8, 0.0));
  fi.tensors["kpe_cache"] = Tensor::from_doubles(DType::F32, {3, 2, 2}, std::vector<double>(12, 0.0));
  fi.tensors["query"] = Tensor::from_doubles(DType::F32, {1, 1, 4}, std::vector<double>(4, 0.0));
  fi.tensors["block_table"] = Tensor::from_vector(DType::I32, {1, 1}, std::vector<std::int32_t>{1});
  fi.tensors["seq_lens"] = Tensor::from_vector(DType::I32, {1}, std::vector<std::int32_t>{2});
  why = load_error(fi);
  CHECK_MESSAGE(contains(why, "disagree on num_pages or page_size"), why);
  fi.tensors.erase("kpe_cache");
  why = load_error(fi);
  CHECK_MESSAGE(contains(why, "required tensor 'kpe_cache' is missing"), why);
  SafetensorsFile nope = latent_parts();
  nope.tensors["q_nope"] = nope.tensors.at("query");
  nope.tensors.erase("query");
  why = load_error(nope);
  CHECK_MESSAGE(contains(why, "required tensor 'q_pe' is missing"), why);
  // Validation: the scale must be explicit.
  SafetensorsFile no_scale = latent_parts();
  no_scale.metadata.erase("scale");
  const Case unscaled = load_parts(no_scale, "latent-no-scale");
  const auto report = validate_case(unscaled);
  REQUIRE_FALSE(report.errors.empty());
  CHECK_MESSAGE(contains(report.errors.front(), "needs an explicit scale"), report.errors.front());
}

TEST_CASE("latent (MLA): the shared-latent reference equals the general one over separate K and V") {
  // A generated latent case against the same numbers as an ordinary
  // one-head case whose value_cache is a copy of the keys' first dv columns.
  SyntheticSpec spec = small_spec();
  spec.latent = true;
  spec.kv_heads = 1;
  spec.q_heads = 16;
  spec.head_dim = 72;
  spec.v_head_dim = 64;
  spec.scale = 0.11;
  spec.k_scale = 0.6, spec.v_scale = 1.7;
  spec.profile = ValueProfile::LlmLike;
  const Case latent = generate(spec);
  REQUIRE(latent.has_latent());
  CHECK(validate_case(latent).errors.empty());
  Case separate = latent;
  separate.params.kv_lora_rank.reset();
  const std::int64_t blocks = latent.num_blocks(), bs = latent.block_size(), dk = 72, dv = 64;
  std::vector<double> values(static_cast<std::size_t>(blocks * bs * dv));
  for (std::int64_t row = 0; row < blocks * bs; ++row)
    for (std::int64_t d = 0; d < dv; ++d) values[row * dv + d] = latent.key_cache.at(row * dk + d);
  separate.value_cache = Tensor::from_doubles(latent.key_cache.dtype, {blocks, bs, 1, dv}, values);
  auto a = reference_attention(latent);
  auto b = reference_attention(separate);
  REQUIRE((a.ok() && b.ok()));
  double worst = 0;
  for (std::size_t i = 0; i < a->output.size(); ++i) worst = std::max(worst, std::fabs(a->output[i] - b->output[i]));
  for (std::size_t i = 0; i < a->lse.size(); ++i) worst = std::max(worst, std::fabs(a->lse[i] - b->lse[i]));
  CHECK(worst < 1e-9);
  // The sourced case (what pagecheck run makes) gives the held case's answer.
  auto sourced = generate_case_sourced(spec);
  REQUIRE(sourced.ok());
  auto c = reference_attention(*sourced);
  REQUIRE(c.ok());
  CHECK(c->output == a->output);
  // Reduce keeps V inside K.
  const Case kept = keep_heads(latent, {0}, {1, 5});
  CHECK(kept.value_cache.data == kept.key_cache.data);
  CHECK(validate_case(kept).errors.empty());
}

TEST_CASE("latent (MLA): the deepseek-v3 preset, n/a on prefill and fmha, the ABI's one pointer") {
  auto deepseek = preset("deepseek-v3");
  REQUIRE(deepseek.ok());
  CHECK(deepseek->q_heads == 128);
  CHECK(deepseek->kv_heads == 1);
  CHECK(deepseek->block_size == 64);
  CHECK(deepseek->head_dim == 576);
  CHECK(deepseek->v_head_dim == 512);
  REQUIRE(deepseek->scale.has_value());
  CHECK(*deepseek->scale == doctest::Approx(0.1352).epsilon(1e-3));
  // A smaller copy of it (the reference of the preset takes seconds).
  SyntheticSpec small = *deepseek;
  small.q_heads = 16;
  small.num_seqs = 2;
  small.seq_len_max = 300;
  const Case c = generate(small);
  CHECK(c.has_latent());
  CHECK(validate_case(c).errors.empty());

  // The decode paths take it (their CUDA-core loop); prefill and fmha not.
  for (const char* path : {"direct", "split", "auto"}) CHECK_MESSAGE(builtin_feature_refusal(c, path).empty(), path);
  for (const char* path : {"prefill", "fmha"}) {
    const std::string why = builtin_feature_refusal(c, path);
    CHECK_MESSAGE((contains(why, "latent (MLA)") && contains(why, path)), why);
  }
  // Nor ALiBi over a latent cache, on any built-in path (fmha names the
  // ALiBi it never takes).
  SyntheticSpec alibi = small;
  alibi.alibi = true;
  const Case with_alibi = generate(alibi);
  for (const char* path : {"direct", "split", "auto", "prefill"}) {
    const std::string why = builtin_feature_refusal(with_alibi, path);
    CHECK_MESSAGE(contains(why, "latent (MLA)"), why);
  }
  CHECK(!builtin_feature_refusal(with_alibi, "fmha").empty());
  const pagecheck_case_desc desc = describe_external_case(c);
  CHECK(desc.value_in_key == 1);
  CHECK(desc.head_dim == 576);
  CHECK(desc.v_head_dim == 512);
  CHECK(desc.kv_heads == 1);
  CHECK(desc.value_stride_block == desc.key_stride_block);
  CHECK(desc.value_stride_slot == desc.key_stride_slot);
  CHECK(desc.output_stride_head == 512);
  for (std::uint32_t minor : {0u, 1u}) {
    const std::string why = refusal(entry_with(0), minor, c);
    CHECK_MESSAGE((contains(why, "latent (MLA)") && contains(why, fmt::format("ABI 1.{}", minor))), why);
  }
  const std::uint32_t decode_prefill = PAGECHECK_FEATURE_DECODE | PAGECHECK_FEATURE_PREFILL | PAGECHECK_FEATURE_KV_SCALES;
  CHECK(contains(refusal(entry_with(decode_prefill), 2, c), "PAGECHECK_FEATURE_LATENT"));
  CHECK(refusal(entry_with(decode_prefill | PAGECHECK_FEATURE_LATENT), 2, c).empty());
  CHECK(describe_external_case(generate(small_spec())).value_in_key == 0);
}
