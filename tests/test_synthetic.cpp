// The generator: reproducible bytes, the page pool, shared pages, poison,
// query lengths, table forms, metadata, presets and the default suite.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pagecheck/case_file.hpp"
#include "pagecheck/limits.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/validate.hpp"
#include "scratch_dir.hpp"

using namespace pagecheck;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.nbytes == b.nbytes &&
         std::memcmp(a.data, b.data, a.nbytes) == 0;
}

bool same_case(const Case& a, const Case& b) {
  return same_bytes(a.query, b.query) && same_bytes(a.key_cache, b.key_cache) &&
         same_bytes(a.value_cache, b.value_cache) && a.table.page_indices == b.table.page_indices &&
         a.table.page_indptr == b.table.page_indptr && a.seq_lens == b.seq_lens &&
         a.query_start_loc == b.query_start_loc && a.params.extra_metadata == b.params.extra_metadata;
}

// Physical pages each sequence uses (the first ceil(seq_len / block_size) entries).
std::vector<std::vector<std::int32_t>> used_pages(const Case& c) {
  std::vector<std::vector<std::int32_t>> rows(c.num_seqs());
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    const std::int64_t pages = (c.seq_lens[s] + c.block_size() - 1) / c.block_size();
    for (std::int64_t p = 0; p < pages; ++p) rows[s].push_back(c.table.page_indices[c.table.page_indptr[s] + p]);
  }
  return rows;
}

SyntheticSpec small_spec() {
  SyntheticSpec s;
  s.name = "small";
  s.seed = 5;
  s.num_seqs = 6;
  s.q_heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.block_size = 8;
  s.seq_len_dist = LengthDist::Uniform;
  s.seq_len_min = 1;
  s.seq_len_max = 70;
  s.query_mode = QueryMode::Mixed;
  s.q_len_dist = LengthDist::Uniform;
  s.q_len_min = 1;
  s.q_len_max = 20;
  return s;
}

std::string describe(const SyntheticSpec& s) {
  return fmt::format("{} seed {} kv {} q {} layout {} bs {}", s.name, s.seed, dtype_name(s.kv_dtype),
                     dtype_name(s.query_dtype), s.layout == KvLayout::NHD ? "NHD" : "HND", s.block_size);
}

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("gen's lazily written file is generate_case's, byte for byte, on any threads, direct or plain") {
  // Chunks of a few blocks with odd block sizes: chunks straddle file pages,
  // so the O_DIRECT writes of whole pages meet plain writes of their ends;
  // the thread counts change which thread makes and writes each chunk.
  const test::ScratchDir dir("lazy_gen");
  std::vector<SyntheticSpec> specs;
  for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
    auto spec = small_spec();
    spec.kv_dtype = kv;
    spec.profile = ValueProfile::LlmLike;
    specs.push_back(spec);
  }
  {
    auto spec = small_spec();
    spec.layout = KvLayout::HND;
    spec.table_form = TableForm::Csr;
    spec.block_size = 7;
    spec.head_dim = 24;
    spec.v_head_dim = 40;
    specs.push_back(spec);
  }
  {
    auto spec = small_spec();
    spec.poison_unused = false;  // stale values from their own engines instead of NaN
    spec.kv_dtype = DType::F8_E5M2;
    spec.block_size = 5;
    specs.push_back(spec);
  }
  {
    auto spec = small_spec();
    spec.query_mode = QueryMode::Prefill;
    spec.num_seqs = 40;
    spec.seq_len_max = 300;
    spec.profile = ValueProfile::LargeLogits;
    spec.query_dtype = DType::F32;
    specs.push_back(spec);
  }
  for (const auto& spec : specs) {
    auto whole = generate_case(spec);
    REQUIRE(whole.ok());
    const auto expected_path = dir.path / "expected.safetensors";
    REQUIRE(save_case_file(*whole, expected_path).ok());
    const std::string expected = file_bytes(expected_path);
    for (const bool plain : {false, true}) {
      if (plain) ::setenv("PAGECHECK_NO_DIRECT_IO", "1", 1);
      for (const int threads : {1, 2, 5}) {
        for (const std::int64_t chunk_bytes : {std::int64_t{1}, std::int64_t{9000}, std::int64_t{32} << 20}) {
          CAPTURE(describe(spec));
          CAPTURE(plain);
          CAPTURE(threads);
          CAPTURE(chunk_bytes);
          auto sourced = generate_case_sourced(spec);
          REQUIRE(sourced.ok());
          CHECK(sourced->key_cache.data == nullptr);
          CHECK_FALSE(sourced->caches_held());
          CHECK(validate_case(*sourced, ValueScan::Skip).ok());
          // The value scan leaves caches made on demand alone (finite by
          // construction) and still scans the query.
          CHECK(validate_case(*sourced).ok());
          const auto path = dir.path / "lazy.safetensors";
          const LazyTensors chunks = cache_chunks(*sourced, threads, chunk_bytes);
          REQUIRE(save_case_file(*sourced, path, &chunks).ok());
          const std::string written = file_bytes(path);
          CHECK(written.size() == expected.size());
          CHECK(written == expected);
        }
      }
      if (plain) ::unsetenv("PAGECHECK_NO_DIRECT_IO");
    }
    auto back = load_case_file(dir.path / "lazy.safetensors");
    REQUIRE(back.ok());
    CHECK(same_bytes(back->key_cache, whole->key_cache));
    CHECK(same_bytes(back->value_cache, whole->value_cache));
    // A case with caches made on demand, saved as a held one is (what run's
    // --save-failing does with a generated case).
    auto sourced = generate_case_sourced(spec);
    REQUIRE(sourced.ok());
    const auto sourced_path = dir.path / "sourced.safetensors";
    REQUIRE(save_case_file(*sourced, sourced_path).ok());
    CHECK(file_bytes(sourced_path) == expected);
  }
}

TEST_CASE("a sourced case's blocks are generate_case's, in any ranges") {
  for (const bool poison : {true, false}) {
    auto spec = small_spec();
    spec.poison_unused = poison;
    spec.kv_dtype = DType::F16;
    spec.layout = KvLayout::HND;
    CAPTURE(poison);
    auto whole = generate_case(spec);
    auto sourced = generate_case_sourced(spec);
    REQUIRE(whole.ok());
    REQUIRE(sourced.ok());
    REQUIRE(whole->caches_held());
    REQUIRE_FALSE(sourced->caches_held());
    CHECK(same_bytes(sourced->query, whole->query));
    CHECK(sourced->table.page_indices == whole->table.page_indices);
    CHECK(sourced->seq_lens == whole->seq_lens);
    CHECK(sourced->key_cache.shape == whole->key_cache.shape);
    CHECK(sourced->key_cache.nbytes == whole->key_cache.nbytes);
    CHECK(validate_case(*sourced).ok());
    // The memory estimate counts the pieces of the caches held at once.
    CHECK(estimate_memory(*whole).case_bytes == 0);
    const std::uint64_t pool = whole->key_cache.nbytes + whole->value_cache.nbytes;
    CHECK(estimate_memory(*sourced).case_bytes > 0);
    CHECK(estimate_memory(*sourced).case_bytes <= pool);  // a small case: at most its pool at once
    const std::int64_t blocks = whole->num_blocks();
    const std::int64_t kb = whole->key_block_bytes(), vb = whole->value_block_bytes();
    CHECK(kb * blocks == static_cast<std::int64_t>(whole->key_cache.nbytes));
    CHECK(vb * blocks == static_cast<std::int64_t>(whole->value_cache.nbytes));
    // Single blocks, odd ranges and the whole pool, from both kinds of case.
    for (const auto& range : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {0, 1}, {blocks - 1, blocks}, {3, 10}, {0, blocks}, {5, 5}}) {
      const std::int64_t begin = range.first, end = range.second;  // not bindings: CAPTURE's lambda (clang 14)
      CAPTURE(begin);
      CAPTURE(end);
      const auto n = static_cast<std::size_t>(std::max<std::int64_t>(end - begin, 0));
      std::vector<std::byte> key(n * kb), value(n * vb), held_key(n * kb), held_value(n * vb);
      fill_cache_blocks(*sourced, begin, end, key.data(), value.data());
      fill_cache_blocks(*whole, begin, end, held_key.data(), held_value.data());
      CHECK(key == held_key);
      CHECK(value == held_value);
      if (n > 0) CHECK(std::memcmp(held_key.data(), whole->key_cache.data + begin * kb, n * kb) == 0);
    }
  }
}

TEST_CASE("the same spec gives the same bytes; another seed gives others") {
  for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
    auto spec = small_spec();
    spec.kv_dtype = kv;
    spec.profile = ValueProfile::LlmLike;
    CAPTURE(describe(spec));
    auto a = generate_case(spec);
    auto b = generate_case(spec);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(same_case(*a, *b));
    spec.seed += 1;
    auto other = generate_case(spec);
    REQUIRE(other.ok());
    CHECK_FALSE(same_bytes(a->query, other->query));
    CHECK_FALSE(same_case(*a, *other));
  }
}

TEST_CASE("the pool holds at least pool_factor times the pages needed, shuffled") {
  for (std::int64_t factor : {3, 5}) {
    auto spec = small_spec();
    spec.pool_factor = factor;
    spec.share_pages = false;
    auto c = generate_case(spec);
    REQUIRE(c.ok());
    std::set<std::int32_t> pages;
    std::vector<std::int32_t> in_order;
    for (const auto& row : used_pages(*c))
      for (auto p : row) {
        pages.insert(p);
        in_order.push_back(p);
      }
    CHECK(c->num_blocks() >= factor * static_cast<std::int64_t>(pages.size()));
    CHECK_FALSE(std::is_sorted(in_order.begin(), in_order.end()));  // not handed out in order
  }
  auto spec = small_spec();
  spec.pool_factor = 2;
  auto refused = generate_case(spec);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("pool_factor") != std::string::npos);
}

TEST_CASE("share_pages: some pages are used by two sequences, never twice by one") {
  auto spec = small_spec();
  spec.seq_len_min = 20;  // every sequence has full pages to share
  spec.share_pages = true;
  auto c = generate_case(spec);
  REQUIRE(c.ok());
  std::map<std::int32_t, int> users;
  for (const auto& row : used_pages(*c)) {
    std::set<std::int32_t> own(row.begin(), row.end());
    CHECK(own.size() == row.size());
    for (auto p : own) ++users[p];
  }
  CHECK(std::any_of(users.begin(), users.end(), [](auto& kv) { return kv.second > 1; }));

  spec.share_pages = false;
  auto unshared = generate_case(spec);
  REQUIRE(unshared.ok());
  users.clear();
  for (const auto& row : used_pages(*unshared))
    for (auto p : row) ++users[p];
  CHECK(std::all_of(users.begin(), users.end(), [](auto& kv) { return kv.second == 1; }));
}

TEST_CASE("poison: NaN exactly where no sequence reads; finite everywhere it does") {
  for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
    for (KvLayout layout : {KvLayout::NHD, KvLayout::HND}) {
      auto spec = small_spec();
      spec.kv_dtype = kv;
      spec.layout = layout;
      spec.v_head_dim = 8;
      spec.k_scale = is_fp8(kv) ? 0.05 : 1.0;
      CAPTURE(describe(spec));
      auto c = generate_case(spec);
      REQUIRE(c.ok());
      // Slots that hold a token of some sequence.
      std::set<std::pair<std::int64_t, std::int64_t>> live;  // (page, slot)
      const auto rows = used_pages(*c);
      for (std::int64_t s = 0; s < c->num_seqs(); ++s)
        for (std::int64_t j = 0; j < c->seq_lens[s]; ++j) live.insert({rows[s][j / c->block_size()], j % c->block_size()});
      const auto ks = cache_strides(layout, c->block_size(), c->kv_heads(), c->key_head_dim());
      const auto vs = cache_strides(layout, c->block_size(), c->kv_heads(), c->v_head_dim());
      std::int64_t wrong = 0;
      for (std::int64_t page = 0; page < c->num_blocks(); ++page)
        for (std::int64_t slot = 0; slot < c->block_size(); ++slot) {
          const bool is_live = live.count({page, slot}) > 0;
          for (std::int64_t h = 0; h < c->kv_heads(); ++h) {
            for (std::int64_t d = 0; d < c->key_head_dim(); ++d)
              wrong += std::isfinite(c->key_cache.at(page * ks.block + slot * ks.slot + h * ks.head + d)) != is_live;
            for (std::int64_t d = 0; d < c->v_head_dim(); ++d)
              wrong += std::isfinite(c->value_cache.at(page * vs.block + slot * vs.slot + h * vs.head + d)) != is_live;
          }
        }
      CHECK(wrong == 0);
      if (is_fp8(kv)) {
        // The NaN code 0x7F fills unused fp8 slots.
        std::int64_t nan_codes = 0;
        for (auto b : c->key_cache.as<std::uint8_t>()) nan_codes += b == 0x7F;
        CHECK(nan_codes > 0);
      }
    }
  }
  auto spec = small_spec();
  spec.poison_unused = false;
  auto clean = generate_case(spec);
  REQUIRE(clean.ok());
  for (std::int64_t i = 0; i < clean->key_cache.numel(); ++i) REQUIRE(std::isfinite(clean->key_cache.at(i)));
}

TEST_CASE("query lengths follow the mode and never exceed the sequence") {
  for (QueryMode mode : {QueryMode::Decode, QueryMode::Prefill, QueryMode::Chunked, QueryMode::Mixed}) {
    auto spec = small_spec();
    spec.query_mode = mode;
    spec.q_len_max = 200;  // longer than many sequences: clamped to seq_len
    CAPTURE(query_mode_name(mode));
    auto c = generate_case(spec);
    REQUIRE(c.ok());
    REQUIRE(c->query_start_loc.size() == static_cast<std::size_t>(c->num_seqs() + 1));
    CHECK(c->query_start_loc.front() == 0);
    CHECK(c->query_start_loc.back() == c->num_tokens());
    for (std::int64_t s = 0; s < c->num_seqs(); ++s) {
      CHECK(c->q_len(s) >= 1);
      CHECK(c->q_len(s) <= c->seq_lens[s]);
      if (mode == QueryMode::Decode || (mode == QueryMode::Mixed && s % 2 == 0)) CHECK(c->q_len(s) == 1);
      if (mode == QueryMode::Prefill) CHECK(c->q_len(s) == c->seq_lens[s]);
    }
    CHECK(c->query_start_loc_given == (mode != QueryMode::Decode));
  }
}

TEST_CASE("length distributions: fixed, list, boundary") {
  auto spec = small_spec();
  spec.seq_len_dist = LengthDist::List;
  spec.seq_len_list = {3, 17};
  spec.num_seqs = 5;
  auto c = generate_case(spec);
  REQUIRE(c.ok());
  CHECK(c->seq_lens == std::vector<std::int32_t>{3, 17, 3, 17, 3});
  spec.seq_len_dist = LengthDist::Fixed;
  spec.seq_len_max = 9;
  c = generate_case(spec);
  REQUIRE(c.ok());
  CHECK(std::all_of(c->seq_lens.begin(), c->seq_lens.end(), [](auto l) { return l == 9; }));

  const auto boundary = boundary_lengths(16, 1, 600);
  for (std::int64_t len : {1, 15, 16, 17, 511, 512, 513}) CHECK(std::count(boundary.begin(), boundary.end(), len) == 1);
  CHECK(std::all_of(boundary.begin(), boundary.end(), [](auto l) { return l >= 1 && l <= 600; }));
  CHECK(boundary_lengths(7, 5, 9) == std::vector<std::int64_t>{6, 7, 8});
}

TEST_CASE("table forms: dense rows carry junk padding; CSR holds exactly the pages") {
  auto spec = small_spec();
  spec.table_form = TableForm::Dense;
  auto dense = generate_case(spec);
  REQUIRE(dense.ok());
  const auto width = dense->table.max_blocks_per_seq;
  CHECK(dense->table.page_indices.size() == static_cast<std::size_t>(width * dense->num_seqs()));
  std::int64_t junk_minus_one = 0, junk_outside = 0;
  for (std::int64_t s = 0; s < dense->num_seqs(); ++s) {
    CHECK(dense->table.page_indptr[s] == s * width);
    const std::int64_t pages = (dense->seq_lens[s] + dense->block_size() - 1) / dense->block_size();
    CHECK(pages < width);
    for (std::int64_t j = pages; j < width; ++j) {
      const auto entry = dense->table.page_indices[s * width + j];
      junk_minus_one += entry == -1;
      junk_outside += entry >= dense->num_blocks();
    }
  }
  CHECK(junk_minus_one > 0);
  CHECK(junk_outside > 0);

  spec.table_form = TableForm::Csr;
  auto csr = generate_case(spec);
  REQUIRE(csr.ok());
  std::int64_t total = 0;
  for (std::int64_t s = 0; s < csr->num_seqs(); ++s) {
    const std::int64_t pages = (csr->seq_lens[s] + csr->block_size() - 1) / csr->block_size();
    CHECK(csr->table.page_indptr[s + 1] - csr->table.page_indptr[s] == pages);
    total += pages;
  }
  CHECK(static_cast<std::int64_t>(csr->table.page_indices.size()) == total);
  // Same seed, same pages: only the form differs.
  CHECK(used_pages(*dense) == used_pages(*csr));
}

TEST_CASE("fp8 caches store x / scale; parameters carry the scales") {
  auto spec = small_spec();
  spec.kv_dtype = DType::F8_E4M3;
  spec.k_scale = 0.05;
  spec.v_scale = 0.02;
  auto c = generate_case(spec);
  REQUIRE(c.ok());
  CHECK(c->params.k_scale == 0.05);
  CHECK(c->params.v_scale == 0.02);
  // Stored values are N(0,1) / 0.05: their spread is about 20.
  double sum_sq = 0;
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < c->key_cache.numel(); ++i) {
    const double x = c->key_cache.at(i);
    if (!std::isfinite(x)) continue;
    sum_sq += x * x;
    ++n;
  }
  REQUIRE(n > 100);
  const double rms = std::sqrt(sum_sq / n);
  CHECK(rms > 15);
  CHECK(rms < 25);
}

TEST_CASE("the fp8 preset's scales keep the LLM-like outlier channels out of saturation") {
  auto spec = preset("llama3-8b-fp8");
  REQUIRE(spec.ok());
  auto c = generate_case(*spec);
  REQUIRE(c.ok());
  REQUIRE(c->key_cache.dtype == DType::F8_E4M3);
  for (const Tensor* t : {&c->key_cache, &c->value_cache}) {
    std::int64_t finite = 0, saturated = 0;
    for (std::int64_t i = 0; i < t->numel(); ++i) {
      const double x = t->at(i);
      if (!std::isfinite(x)) continue;  // unreferenced pages and tail slots hold NaN
      ++finite;
      saturated += std::fabs(x) >= 448.0;
    }
    REQUIRE(finite > 1000);
    CHECK(static_cast<double>(saturated) / static_cast<double>(finite) < 1e-4);
  }
}

TEST_CASE("a latent (MLA) cache keeps its outlier channels in the rope columns, out of the values") {
  // V is the latent's first dv columns: one scale there, the LLM-like
  // outlier channels (15x) among the rope columns after it.
  auto spec = preset("deepseek-v3");
  REQUIRE(spec.ok());
  auto c = generate_case(*spec);
  REQUIRE(c.ok());
  REQUIRE(c->params.kv_lora_rank == 512);
  const PagedKvView kv = c->host_view();
  const std::int64_t dk = c->head_dim(), dv = 512;
  std::vector<double> sum_sq(static_cast<std::size_t>(dk), 0.0);
  std::int64_t rows = 0;
  for (std::int64_t s = 0; s < c->num_seqs(); ++s)
    for (std::int64_t j = 1; j < c->seq_lens[s]; ++j, ++rows)  // token 0: the sink
      for (std::int64_t d = 0; d < dk; ++d) {
        const double x = c->key_cache.at(kv.key_offset(s, j, 0) + d);
        sum_sq[d] += x * x;
      }
  REQUIRE(rows > 1000);
  double latent_max = 0, rope_max = 0;
  for (std::int64_t d = 0; d < dk; ++d) {
    const double rms = std::sqrt(sum_sq[d] / static_cast<double>(rows));
    (d < dv ? latent_max : rope_max) = std::max(d < dv ? latent_max : rope_max, rms);
  }
  CHECK(latent_max < 2.0);   // unit normals, none of them 15x
  CHECK(rope_max > 10.0);    // the outlier channels are there
}

TEST_CASE("value profiles: large logits reach the hundreds; LLM-like has a sink") {
  auto spec = small_spec();
  spec.head_dim = 64;
  spec.query_mode = QueryMode::Decode;
  spec.seq_len_min = 30;
  spec.query_dtype = DType::F32;
  spec.kv_dtype = DType::F32;
  // Largest |logit| and the mean logit of key 0 minus the mean of the others.
  auto logits = [](const Case& c, double& max_abs, double& sink_gap) {
    const PagedKvView kv = c.host_view();
    const std::int64_t group = c.q_heads() / c.kv_heads(), d = c.head_dim();
    max_abs = 0;
    double first = 0, rest = 0;
    std::int64_t n_first = 0, n_rest = 0;
    for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
      const std::int64_t token = c.query_start_loc[s];
      for (std::int64_t h = 0; h < c.q_heads(); ++h)
        for (std::int64_t j = 0; j < c.seq_lens[s]; ++j) {
          double dot = 0;
          for (std::int64_t k = 0; k < d; ++k)
            dot += c.query.at((token * c.q_heads() + h) * d + k) * c.key_cache.at(kv.key_offset(s, j, h / group) + k);
          const double logit = dot * c.scale();
          max_abs = std::max(max_abs, std::fabs(logit));
          if (j == 0) first += logit, ++n_first;
          else rest += logit, ++n_rest;
        }
    }
    sink_gap = first / n_first - rest / n_rest;
  };
  double max_abs = 0, sink_gap = 0;
  spec.profile = ValueProfile::LargeLogits;
  auto large = generate_case(spec);
  REQUIRE(large.ok());
  logits(*large, max_abs, sink_gap);
  CHECK(max_abs > 100);
  spec.profile = ValueProfile::Gaussian;
  auto gaussian = generate_case(spec);
  REQUIRE(gaussian.ok());
  logits(*gaussian, max_abs, sink_gap);
  CHECK(max_abs < 10);
  CHECK(std::fabs(sink_gap) < 2);
  spec.profile = ValueProfile::LlmLike;
  auto llm = generate_case(spec);
  REQUIRE(llm.ok());
  logits(*llm, max_abs, sink_gap);
  CHECK(sink_gap > 5);
}

TEST_CASE("metadata records the seed, the settings and the tool version") {
  auto spec = small_spec();
  spec.seed = 123456789;
  auto c = generate_case(spec);
  REQUIRE(c.ok());
  const auto& meta = c->params.extra_metadata;
  REQUIRE(meta.count("seed"));
  CHECK(meta.at("seed") == "123456789");
  CHECK(meta.at("tool_version") == PAGECHECK_VERSION);
  const auto settings = nlohmann::json::parse(meta.at("generator_settings"));
  CHECK(settings.at("seed") == 123456789);
  CHECK(settings.at("query_mode") == "mixed");
  CHECK(settings.at("seq_len").at("dist") == "uniform");
  CHECK(settings.at("kv_dtype") == "BF16");
}

TEST_CASE("names of distributions, modes and profiles round-trip") {
  for (auto d : {LengthDist::Fixed, LengthDist::Uniform, LengthDist::List, LengthDist::Boundary})
    CHECK(parse_length_dist(length_dist_name(d)) == d);
  for (auto m : {QueryMode::Decode, QueryMode::Prefill, QueryMode::Chunked, QueryMode::Mixed})
    CHECK(parse_query_mode(query_mode_name(m)) == m);
  for (auto p : {ValueProfile::Gaussian, ValueProfile::LlmLike, ValueProfile::LargeLogits})
    CHECK(parse_value_profile(value_profile_name(p)) == p);
  CHECK_FALSE(parse_query_mode("sideways").has_value());
}

TEST_CASE("bad specs are errors that name the setting") {
  struct Bad {
    const char* what;
    void (*change)(SyntheticSpec&);
  };
  const Bad cases[] = {
      {"kv_heads", [](SyntheticSpec& s) { s.kv_heads = 3; }},
      {"num_seqs", [](SyntheticSpec& s) { s.num_seqs = 0; }},
      {"block_size", [](SyntheticSpec& s) { s.block_size = 0; }},
      {"query dtype", [](SyntheticSpec& s) { s.query_dtype = DType::F8_E4M3; }},
      {"KV dtype", [](SyntheticSpec& s) { s.kv_dtype = DType::I32; }},
      {"seq_len", [](SyntheticSpec& s) { s.seq_len_min = 0; }},
      {"list", [](SyntheticSpec& s) { s.seq_len_dist = LengthDist::List; }},
      {"k_scale", [](SyntheticSpec& s) { s.k_scale = 0; }},
      {"softcap", [](SyntheticSpec& s) { s.softcap = -1; }},
      {"exceed", [](SyntheticSpec& s) { s.head_dim = std::int64_t{1} << 40; }},
  };
  for (const auto& bad : cases) {
    auto spec = small_spec();
    bad.change(spec);
    CAPTURE(bad.what);
    auto c = generate_case(spec);
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().describe().find(bad.what) != std::string::npos);
  }
}

TEST_CASE("presets: real geometries, each valid") {
  const auto names = preset_names();
  for (const char* wanted : {"llama3-8b", "llama3-70b", "mistral-7b-window", "gemma2-9b-softcap", "deepseek-192-128", "mqa"})
    CHECK(std::count(names.begin(), names.end(), std::string(wanted)) == 1);
  auto llama = preset("llama3-8b");
  REQUIRE(llama.ok());
  CHECK(llama->q_heads == 32);
  CHECK(llama->kv_heads == 8);
  CHECK(llama->head_dim == 128);
  auto mistral = preset("mistral-7b-window");
  REQUIRE(mistral.ok());
  CHECK(mistral->sliding_window == 4096);
  CHECK(mistral->seq_len_min > 4096);  // contexts longer than the window
  auto gemma = preset("gemma2-9b-softcap");
  REQUIRE(gemma.ok());
  CHECK(gemma->softcap == 50);
  CHECK(gemma->head_dim == 256);
  auto deepseek = preset("deepseek-192-128");
  REQUIRE(deepseek.ok());
  CHECK(deepseek->head_dim == 192);
  CHECK(deepseek->v_head_dim == 128);
  auto unknown = preset("gpt-17");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.find("llama3-8b") != std::string::npos);  // lists the known ones

  for (const auto& name : names) {
    auto spec = preset(name);
    REQUIRE(spec.ok());
    CAPTURE(name);
    auto c = generate_case(*spec);
    REQUIRE(c.ok());
    const auto report = validate_case(*c);
    CHECK_MESSAGE(report.errors.empty(), (report.errors.empty() ? "" : report.errors.front()));
    CHECK(report.warnings.empty());
  }
}

// The default suite has its own tests: test_suite.cpp.

TEST_CASE("the query's size bound counts one token a sequence at decode (MLA decode at 64 x 4096, 128 heads)") {
  // 64 sequences of 4096 tokens over a 576-column latent cache: the query
  // is 64 x 128 x 576 elements at decode; the bound once took every token
  // as a query token (38.6 GB) and refused the case.
  SyntheticSpec spec;
  spec.name = "mla-decode-bound";
  spec.latent = true;
  spec.head_dim = 576;
  spec.v_head_dim = 512;
  spec.q_heads = 128;
  spec.kv_heads = 1;
  spec.block_size = 64;
  spec.scale = 0.07;
  spec.num_seqs = 64;
  spec.seq_len_dist = LengthDist::List;
  spec.seq_len_list = {4096};
  spec.query_mode = QueryMode::Decode;
  auto c = generate_case_sourced(spec);
  REQUIRE(c.ok());
  CHECK(c->num_tokens() == 64);
  // Whole prompts of the same lengths would need that query: refused.
  spec.query_mode = QueryMode::Prefill;
  auto refused = generate_case_sourced(spec);
  REQUIRE(!refused.ok());
  CHECK(refused.error().message.find("the query would exceed") != std::string::npos);
}
