// Validation of cases built by hand, case-file loading errors, and
// load(save(case)) round trips (both table forms, both layouts).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "pagecheck/case_file.hpp"
#include "pagecheck/limits.hpp"
#include "pagecheck/safetensors.hpp"
#include "scratch_dir.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/validate.hpp"

namespace fs = std::filesystem;
using namespace pagecheck;

namespace {

fs::path temp_dir() {
  static const test::ScratchDir dir("validate");
  return dir.path;
}

struct Geometry {
  TableForm form = TableForm::Dense;
  KvLayout layout = KvLayout::NHD;
  std::int64_t q_heads = 4;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 8;
  std::int64_t key_head_dim = 8;
  std::int64_t v_head_dim = 6;
  std::int64_t block_size = 2;
  std::int64_t num_blocks = 6;
  DType q_dtype = DType::F32;
  DType kv_dtype = DType::BF16;
};

Tensor random_tensor(DType dtype, std::vector<std::int64_t> shape, std::mt19937& rng) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<double> values(static_cast<std::size_t>(n));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& v : values) v = normal(rng);
  return Tensor::from_doubles(dtype, std::move(shape), values);
}

// Two sequences: seq_lens {5, 3}, q_lens {2, 1}, block_size 2.
// Sequence 0 uses pages 3, 0, 5; sequence 1 uses pages 1, 3 (page 3 is
// shared, as prefix caching does). The dense rows carry junk padding.
Case make_case(const Geometry& g = {}) {
  std::mt19937 rng(2024);
  Case c;
  c.name = "hand";
  c.params.layout = g.layout;
  c.seq_lens = {5, 3};
  c.query_start_loc = {0, 2, 3};
  c.query_start_loc_given = true;
  c.query = random_tensor(g.q_dtype, {3, g.q_heads, g.head_dim}, rng);
  const auto cache_shape = [&](std::int64_t dim) {
    return g.layout == KvLayout::NHD ? std::vector<std::int64_t>{g.num_blocks, g.block_size, g.kv_heads, dim}
                                     : std::vector<std::int64_t>{g.num_blocks, g.kv_heads, g.block_size, dim};
  };
  c.key_cache = random_tensor(g.kv_dtype, cache_shape(g.key_head_dim), rng);
  c.value_cache = random_tensor(g.kv_dtype, cache_shape(g.v_head_dim), rng);
  c.table.form = g.form;
  if (g.form == TableForm::Dense) {
    c.table.max_blocks_per_seq = 4;
    c.table.page_indices = {3, 0, 5, -1, /**/ 1, 3, 999999, -123456};
    c.table.page_indptr = {0, 4, 8};
  } else {
    c.table.page_indices = {3, 0, 5, 1, 3};
    c.table.page_indptr = {0, 3, 5};
  }
  return c;
}

bool has_message(const std::vector<std::string>& messages, const std::string& text) {
  for (const auto& m : messages)
    if (m.find(text) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& messages) {
  std::string out;
  for (const auto& m : messages) out += m + "\n";
  return out;
}

// The error list must contain `text`.
void expect_error(const Case& c, const std::string& text) {
  const auto report = validate_case(c);
  INFO("errors:\n", joined(report.errors));
  CHECK_FALSE(report.ok());
  CHECK_MESSAGE(has_message(report.errors, text), "expected an error containing: ", text);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.nbytes == b.nbytes &&
         (a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0);
}

void check_same_case(const Case& a, const Case& b) {
  CHECK(same_bytes(a.query, b.query));
  CHECK(same_bytes(a.key_cache, b.key_cache));
  CHECK(same_bytes(a.value_cache, b.value_cache));
  CHECK(a.table.form == b.table.form);
  CHECK(a.table.max_blocks_per_seq == b.table.max_blocks_per_seq);
  CHECK(a.table.page_indptr == b.table.page_indptr);
  CHECK(a.table.page_indices == b.table.page_indices);
  CHECK(a.seq_lens == b.seq_lens);
  CHECK(a.query_start_loc == b.query_start_loc);
  CHECK(a.query_start_loc_given == b.query_start_loc_given);
  CHECK(a.params.layout == b.params.layout);
  CHECK(a.params.causal == b.params.causal);
  CHECK(a.params.scale == b.params.scale);
  CHECK(a.params.sliding_window == b.params.sliding_window);
  CHECK(a.params.softcap == b.params.softcap);
  CHECK(a.params.k_scale == b.params.k_scale);
  CHECK(a.params.v_scale == b.params.v_scale);
  CHECK(a.params.table_block_size == b.params.table_block_size);
  CHECK(a.params.description == b.params.description);
  CHECK(a.params.extra_metadata == b.params.extra_metadata);
  REQUIRE(a.recorded_output.has_value() == b.recorded_output.has_value());
  if (a.recorded_output) CHECK(same_bytes(*a.recorded_output, *b.recorded_output));
  REQUIRE(a.recorded_lse.has_value() == b.recorded_lse.has_value());
  if (a.recorded_lse) CHECK(same_bytes(*a.recorded_lse, *b.recorded_lse));
}

Case round_trip(const Case& c, const std::string& stem) {
  const fs::path path = temp_dir() / (stem + ".safetensors");
  const auto saved = save_case_file(c, path);
  REQUIRE_MESSAGE(saved.ok(), saved.error().describe());
  auto loaded = load_case_file(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
  CHECK(loaded->name == stem);
  return std::move(loaded.value());
}

const std::vector<std::pair<TableForm, KvLayout>> kForms = {{TableForm::Dense, KvLayout::NHD},
                                                             {TableForm::Dense, KvLayout::HND},
                                                             {TableForm::Csr, KvLayout::NHD},
                                                             {TableForm::Csr, KvLayout::HND}};

std::string form_name(TableForm form, KvLayout layout) {
  return fmt::format("{}/{}", form == TableForm::Dense ? "dense" : "csr", layout == KvLayout::NHD ? "NHD" : "HND");
}

}  // namespace

TEST_CASE("a valid hand-built case passes in every table form and layout") {
  for (const auto& form_layout : kForms) {
    // Plain variables: clang 14 cannot capture structured bindings (INFO does).
    const TableForm form = form_layout.first;
    const KvLayout layout = form_layout.second;
    INFO(form_name(form, layout));
    Geometry g;
    g.form = form;
    g.layout = layout;
    const auto report = validate_case(make_case(g));
    INFO("errors:\n", joined(report.errors));
    CHECK(report.ok());
    CHECK(report.warnings.empty());  // page 3 is shared between sequences: legal, no warning
  }
}

TEST_CASE("table entries: out of range and negative pages name sequence, entry and value") {
  Case dense = make_case();
  dense.table.page_indices[1] = 9120;
  expect_error(dense, "block_table[0][1] = 9120 but the cache has 6 blocks");
  dense = make_case();
  dense.table.page_indices[5] = -1;
  expect_error(dense, "block_table[1][1] = -1 is negative (sequence 1 needs 2 pages for seq_len 3)");
  dense = make_case();
  dense.table.page_indices[2] = 6;  // == num_blocks: one past the last page
  expect_error(dense, "block_table[0][2] = 6 but the cache has 6 blocks");

  Geometry g;
  g.form = TableForm::Csr;
  Case csr = make_case(g);
  csr.table.page_indices[4] = 9120;
  expect_error(csr, "kv_indices[4] (sequence 1, page 1) = 9120 but the cache has 6 blocks");
}

TEST_CASE("padding entries past a sequence's needed pages are never checked") {
  Case c = make_case();
  // Row 0 needs 3 pages (seq_len 5, block 2); entry 3 is padding. Row 1
  // needs 2; entries 2 and 3 are padding.
  c.table.page_indices[3] = std::numeric_limits<std::int32_t>::min();
  c.table.page_indices[6] = std::numeric_limits<std::int32_t>::max();
  c.table.page_indices[7] = 0;
  CHECK(validate_case(c).ok());
}

TEST_CASE("a dense row too short for its seq_len") {
  Case c = make_case();
  c.seq_lens[0] = 9;  // needs 5 pages of 2, the row has 4
  expect_error(c, "sequence 0: seq_len 9 needs 5 pages of 2 tokens but block_table row 0 has only 4 (capacity 8 tokens)");
}

TEST_CASE("lengths: seq_len >= 1, 1 <= q_len <= seq_len") {
  Case c = make_case();
  c.seq_lens[1] = 0;
  expect_error(c, "seq_lens[1] = 0 but must be >= 1");
  c = make_case();
  c.seq_lens[0] = 1;  // q_len 2
  expect_error(c, "sequence 0: q_len 2 > seq_len 1");
  c = make_case();
  c.query_start_loc = {0, 0, 3};
  expect_error(c, "sequence 0 has no query tokens (query_start_loc[0] = query_start_loc[1] = 0)");
}

TEST_CASE("query_start_loc: starts at 0, never decreases, ends at num_tokens") {
  Case c = make_case();
  c.query_start_loc = {1, 2, 3};
  expect_error(c, "query_start_loc[0] = 1 but must be 0");
  c = make_case();
  c.query_start_loc = {0, 2, 4};
  expect_error(c, "query_start_loc[2] = 4 but query has 3 tokens");
  c = make_case();
  c.query_start_loc = {0, 4, 3};
  expect_error(c, "query_start_loc decreases at sequence 1: query_start_loc[1] = 4 > query_start_loc[2] = 3");
  c = make_case();
  c.query_start_loc = {0, 3};
  expect_error(c, "query_start_loc has 2 entries but there are 2 sequences; it needs 3");
}

TEST_CASE("CSR: last_page_len in [1, block_size], indptr monotone and within kv_indices") {
  Geometry g;
  g.form = TableForm::Csr;
  Case c = make_case(g);
  c.seq_lens[0] = 7;  // 3 pages of 2 hold at most 6
  expect_error(c, "kv_last_page_len[0] = 3 must be in [1, block_size = 2] (was the table built for another block size?)");
  c = make_case(g);
  c.seq_lens[0] = 4;  // 3 pages, the last one empty
  expect_error(c, "kv_last_page_len[0] = 0 must be in [1, block_size = 2]");
  c = make_case(g);
  c.table.page_indptr = {0, 3, 9};
  expect_error(c, "kv_indptr[2] = 9 is beyond the 5 entries of kv_indices");
  c = make_case(g);
  c.table.page_indptr = {0, 3, 2};
  expect_error(c, "kv_indptr decreases at sequence 1: kv_indptr[1] = 3 > kv_indptr[2] = 2");
  c = make_case(g);
  c.table.page_indptr = {0, 0, 5};
  expect_error(c, "sequence 0 has no pages (kv_indptr[0] = kv_indptr[1] = 0)");
  c = make_case(g);
  c.table.page_indptr = {-2, 3, 5};
  expect_error(c, "kv_indptr[0] = -2 is negative");
}

TEST_CASE("geometry: GQA ratio, head dims, cache agreement, recorded block size") {
  Geometry g;
  g.q_heads = 3;
  expect_error(make_case(g), "q_heads 3 is not a multiple of kv_heads 2");
  g = Geometry{};
  g.head_dim = 16;
  expect_error(make_case(g), "query head_dim 16 differs from key_cache head dim 8");
  Case c = make_case();
  c.value_cache = Tensor::zeros(DType::BF16, {7, 2, 2, 6});
  expect_error(c, "disagree on num_blocks (6 vs 7, layout NHD)");
  c = make_case();
  c.params.table_block_size = 16;
  expect_error(c, "the block table was built for block_size 16 (metadata) but the cache's block size is 2");
  c = make_case();
  c.params.table_block_size = 2;
  CHECK(validate_case(c).ok());
}

TEST_CASE("parameters: scale, window, softcap and fp8 scales are sane") {
  Case c = make_case();
  c.params.scale = std::nan("");
  expect_error(c, "scale = nan must be a finite number >= 0");
  c = make_case();
  c.params.sliding_window = -4;
  expect_error(c, "sliding_window = -4 must be >= 0");
  c = make_case();
  c.params.softcap = std::numeric_limits<double>::infinity();
  expect_error(c, "softcap = inf must be a finite number >= 0");
  c = make_case();
  c.params.k_scale = 0;
  expect_error(c, "k_scale = 0 must be a finite number > 0");
  c = make_case();
  c.params.v_scale = -1;
  expect_error(c, "v_scale = -1 must be a finite number > 0");
}

TEST_CASE("structural damage is reported, never a crash") {
  Case c = make_case();
  c.query = Tensor::zeros(DType::F32, {3, 4});
  expect_error(c, "query has shape [3, 4] F32 but must have rank 3");
  c = make_case();
  c.key_cache = Tensor::zeros(DType::I32, {6, 2, 2, 8});
  expect_error(c, "key_cache is I32 but must be one of");
  c = make_case();
  c.key_cache.nbytes -= 2;
  expect_error(c, "key_cache [6, 2, 2, 8] BF16 holds 382 bytes of data, expected 384");
  c = make_case();
  c.table.page_indptr.pop_back();
  expect_error(c, "page_indptr has 2 entries but there are 2 sequences");
  c = make_case();
  c.table.page_indices.pop_back();
  expect_error(c, "block_table holds 7 entries but 2 sequences x max_blocks_per_seq 4 need 8");
  c = make_case();
  c.recorded_lse = Tensor::zeros(DType::F32, {3, 5});
  expect_error(c, "lse has shape [3, 5] F32 but must be [num_tokens, q_heads] = [3, 4]");
  c = make_case();
  c.recorded_output = Tensor::zeros(DType::F32, {3, 4, 8});
  expect_error(c, "output has shape [3, 4, 8] F32 but must be [num_tokens, q_heads, v_head_dim] = [3, 4, 6]");
  Case empty;
  CHECK_FALSE(validate_case(empty).ok());
}

TEST_CASE("a page used twice inside one sequence is a warning, not an error") {
  Case c = make_case();
  c.table.page_indices[2] = 3;  // sequence 0: pages 3, 0, 3
  const auto report = validate_case(c);
  CHECK(report.ok());
  REQUIRE(report.warnings.size() == 1);
  CHECK(report.warnings[0] == "sequence 0 uses page 3 twice: block_table[0][0] and block_table[0][2]");
}

TEST_CASE("errors of one kind are capped with a count of the rest") {
  Case c = make_case();
  const int num_seqs = 100;
  c.seq_lens.assign(num_seqs, 1);
  c.table.max_blocks_per_seq = 1;
  c.table.page_indices.assign(num_seqs, 777);
  c.table.page_indptr.resize(num_seqs + 1);
  for (int s = 0; s <= num_seqs; ++s) c.table.page_indptr[s] = s;
  c.query = Tensor::zeros(DType::F32, {num_seqs, 4, 8});
  c.query_start_loc.resize(num_seqs + 1);
  for (int s = 0; s <= num_seqs; ++s) c.query_start_loc[s] = s;
  const auto report = validate_case(c);
  REQUIRE(report.errors.size() == 21);
  CHECK(report.errors[0] == "block_table[0][0] = 777 but the cache has 6 blocks");
  CHECK(report.errors[19] == "block_table[19][0] = 777 but the cache has 6 blocks");
  CHECK(report.errors[20] == "... and 80 more of the kind 'page' (first 20 shown)");

  const auto status = validation_status(report, "f.safetensors");
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().code == ErrorCode::InvalidInput);
  CHECK(status.error().message.find("block_table[7][0] = 777") != std::string::npos);
  CHECK(validation_status(validate_case(make_case())).ok());
}

TEST_CASE("load(save(case)) round-trips tensors, table and params exactly") {
  for (const auto& form_layout : kForms) {
    // Plain variables: clang 14 cannot capture structured bindings (INFO does).
    const TableForm form = form_layout.first;
    const KvLayout layout = form_layout.second;
    for (bool with_extras : {false, true}) {
      INFO(form_name(form, layout), " extras ", with_extras);
      Geometry g;
      g.form = form;
      g.layout = layout;
      g.kv_dtype = with_extras ? DType::F8_E4M3 : DType::F16;
      g.q_dtype = with_extras ? DType::BF16 : DType::F32;
      Case c = make_case(g);
      if (with_extras) {
        std::mt19937 rng(5);
        c.params.causal = false;
        c.params.scale = 0.1;  // not exact in binary: the text must round-trip
        c.params.sliding_window = 3;
        c.params.softcap = 30.0;
        c.params.k_scale = 0.05;
        c.params.v_scale = 1.0 / 3.0;
        c.params.table_block_size = 2;
        c.params.description = "hand-built, \xc3\xbc";
        c.params.extra_metadata = {{"seed", "11"}, {"tool", "pagecheck 0.1"}};
        c.recorded_output = random_tensor(DType::F32, {3, 4, 6}, rng);
        c.recorded_lse = random_tensor(DType::F32, {3, 4}, rng);
      }
      const Case back = round_trip(c, fmt::format("rt_{}_{}_{}", static_cast<int>(form), static_cast<int>(layout),
                                                  with_extras));
      check_same_case(c, back);
      CHECK(validate_case(back).ok());
    }
  }
}

TEST_CASE("decode without query_start_loc round-trips as derived") {
  Case c = make_case();
  c.query = Tensor::zeros(DType::F32, {2, 4, 8});
  c.query_start_loc = {0, 1, 2};
  c.query_start_loc_given = false;
  const Case back = round_trip(c, "decode_derived");
  CHECK_FALSE(back.query_start_loc_given);
  CHECK(back.query_start_loc == std::vector<std::int32_t>{0, 1, 2});
  CHECK(back.is_decode());
}

namespace {

// The tensors and metadata of a saved valid case, for damaging one thing.
SafetensorsFile saved_parts(const Case& c) {
  const fs::path path = temp_dir() / "parts.safetensors";
  REQUIRE(save_case_file(c, path).ok());
  auto file = read_safetensors(path);
  REQUIRE(file.ok());
  return std::move(file.value());
}

std::string load_error(const SafetensorsFile& parts) {
  const fs::path path = temp_dir() / "damaged.safetensors";
  REQUIRE(write_safetensors(path, parts.tensors, parts.metadata).ok());
  auto loaded = load_case_file(path);
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().code == ErrorCode::InvalidInput);
  CHECK(loaded.error().where == path.string());
  return loaded.error().message;
}

}  // namespace

TEST_CASE("case files: structural errors name the tensor or metadata key") {
  const Case dense = make_case();
  Geometry g;
  g.form = TableForm::Csr;
  const Case csr = make_case(g);

  SUBCASE("a typo in a tensor name is an error with a suggestion") {
    auto parts = saved_parts(dense);
    parts.tensors["blocktable"] = parts.tensors.at("block_table");
    parts.tensors.erase("block_table");
    CHECK(load_error(parts).find("unknown tensor 'blocktable' (did you mean 'block_table'?)") != std::string::npos);
  }
  SUBCASE("missing required tensors") {
    auto parts = saved_parts(dense);
    parts.tensors.erase("value_cache");
    CHECK(load_error(parts) == "required tensor 'value_cache' is missing");
    parts = saved_parts(dense);
    parts.tensors.erase("seq_lens");
    CHECK(load_error(parts).find("required tensor 'seq_lens' is missing (the dense table form needs it)") !=
          std::string::npos);
    parts = saved_parts(csr);
    parts.tensors.erase("kv_last_page_len");
    CHECK(load_error(parts).find("'kv_last_page_len' is missing") != std::string::npos);
    parts = saved_parts(dense);
    parts.tensors.erase("seq_lens");
    parts.tensors.erase("block_table");
    CHECK(load_error(parts).find("no block table") != std::string::npos);
  }
  SUBCASE("both table forms at once") {
    auto parts = saved_parts(dense);
    const auto csr_parts = saved_parts(csr);
    parts.tensors["kv_indptr"] = csr_parts.tensors.at("kv_indptr");
    CHECK(load_error(parts).find("both table forms") != std::string::npos);
  }
  SUBCASE("dtypes per tensor") {
    auto parts = saved_parts(dense);
    parts.tensors["query"] = Tensor::zeros(DType::I32, {3, 4, 8});
    CHECK(load_error(parts) == "tensor 'query' is I32 but must be one of: F32, F16, BF16");
    parts = saved_parts(dense);
    parts.tensors["seq_lens"] = Tensor::from_doubles(DType::I64, {2}, std::vector<double>{5, 3});
    CHECK(load_error(parts) == "tensor 'seq_lens' is I64 but must be one of: I32");
    parts = saved_parts(dense);
    parts.tensors["lse"] = Tensor::zeros(DType::F16, {3, 4});
    CHECK(load_error(parts) == "tensor 'lse' is F16 but must be one of: F32");
  }
  SUBCASE("ranks and shapes that disagree") {
    auto parts = saved_parts(dense);
    parts.tensors["key_cache"] = Tensor::zeros(DType::BF16, {6, 2, 16});
    CHECK(load_error(parts).find("tensor 'key_cache' has shape [6, 2, 16] BF16 but must have rank 4") !=
          std::string::npos);
    parts = saved_parts(dense);
    parts.tensors["value_cache"] = Tensor::zeros(DType::BF16, {6, 4, 2, 6});
    CHECK(load_error(parts).find("disagree on block_size (2 vs 4, layout NHD)") != std::string::npos);
    parts = saved_parts(dense);
    parts.tensors["seq_lens"] = Tensor::from_doubles(DType::I32, {3}, std::vector<double>{5, 3, 1});
    CHECK(load_error(parts) == "block_table has 2 rows but seq_lens has 3 entries");
    parts = saved_parts(csr);
    parts.tensors["kv_last_page_len"] = Tensor::from_doubles(DType::I32, {1}, std::vector<double>{1});
    CHECK(load_error(parts).find("kv_last_page_len has 1") != std::string::npos);
    parts = saved_parts(dense);
    parts.tensors["query_start_loc"] = Tensor::from_doubles(DType::I32, {2}, std::vector<double>{0, 3});
    CHECK(load_error(parts).find("query_start_loc has 2 entries but the table has 2 sequences") != std::string::npos);
    parts = saved_parts(dense);
    parts.tensors["output"] = Tensor::zeros(DType::F32, {3, 4, 8});
    CHECK(load_error(parts).find("output has shape [3, 4, 8] F32 but must be") != std::string::npos);
    parts = saved_parts(dense);
    parts.tensors["key_cache"] = Tensor::zeros(DType::BF16, {6, 0, 2, 8});
    parts.tensors["value_cache"] = Tensor::zeros(DType::BF16, {6, 0, 2, 6});
    CHECK(load_error(parts).find("block_size (dimension 1) must be at least 1") != std::string::npos);
  }
  SUBCASE("query_start_loc may be absent only for decode") {
    auto parts = saved_parts(dense);
    parts.tensors.erase("query_start_loc");
    CHECK(load_error(parts).find("query_start_loc is absent but query has 3 tokens for 2 sequences") !=
          std::string::npos);
  }
  SUBCASE("metadata values that do not parse") {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"causal", "maybe"}, {"scale", "abc"},     {"scale", "nan"},     {"sliding_window", "-1"},
        {"sliding_window", "4.5"}, {"kv_layout", "XYZ"}, {"softcap", "-3"},   {"k_scale", "0"},
        {"v_scale", "inf"}, {"block_size", "0"},   {"scale", " 0.5"},   {"scale", ""},
    };
    for (const auto& entry : bad) {
      const std::string& key = entry.first;  // not a binding: INFO captures it (clang 14)
      const std::string& value = entry.second;
      INFO(key, " = '", value, "'");
      auto parts = saved_parts(dense);
      parts.metadata[key] = value;
      CHECK(load_error(parts).find(fmt::format("metadata '{}' = '{}' is not", key, value)) != std::string::npos);
    }
  }
}

TEST_CASE("case files: metadata spellings and extra keys") {
  auto parts = saved_parts(make_case());
  parts.metadata["causal"] = "False";  // Python's str(False)
  parts.metadata["format"] = "pt";
  parts.metadata["scale"] = "1e-05";
  const fs::path path = temp_dir() / "spellings.safetensors";
  REQUIRE(write_safetensors(path, parts.tensors, parts.metadata).ok());
  auto loaded = load_case_file(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
  CHECK_FALSE(loaded->params.causal);
  CHECK(loaded->params.scale == 1e-05);
  CHECK(loaded->params.extra_metadata.at("format") == "pt");
  CHECK(loaded->params.extra_metadata.count("causal") == 0);
}

TEST_CASE("CSR seq_lens are derived from pages and last page lengths") {
  Geometry g;
  g.form = TableForm::Csr;
  auto parts = saved_parts(make_case(g));
  CHECK(parts.tensors.at("kv_last_page_len").as<std::int32_t>()[0] == 1);  // 5 = 2*2 + 1
  CHECK(parts.tensors.at("kv_last_page_len").as<std::int32_t>()[1] == 1);  // 3 = 1*2 + 1
  // A sequence with no pages loads (seq_len 0) and validation names it.
  parts.tensors["kv_indptr"] = Tensor::from_doubles(DType::I32, {3}, std::vector<double>{0, 0, 5});
  const fs::path path = temp_dir() / "zero_pages.safetensors";
  REQUIRE(write_safetensors(path, parts.tensors, parts.metadata).ok());
  auto loaded = load_case_file(path);
  REQUIRE(loaded.ok());
  CHECK(loaded->seq_lens[0] == 0);
  expect_error(*loaded, "sequence 0 has no pages");
}

TEST_CASE("the recorded cases in data/ (written by PyTorch) load, validate and round-trip") {
  const fs::path data_dir = PAGECHECK_DATA_DIR;
  int files = 0;
  if (fs::is_directory(data_dir)) {
    for (const auto& entry : fs::directory_iterator(data_dir)) {
      if (entry.path().extension() != ".safetensors") continue;
      ++files;
      INFO(entry.path().string());
      auto loaded = load_case_file(entry.path());
      REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
      const auto report = validate_case(*loaded);
      INFO("errors:\n", joined(report.errors));
      CHECK(report.ok());
      CHECK(loaded->recorded_output.has_value());
      const Case back = round_trip(*loaded, loaded->name);
      check_same_case(*loaded, back);
    }
  }
  MESSAGE(files, " recorded case files checked");
}

TEST_CASE("generated cases (the default suite) round-trip through case files") {
  int checked = 0;
  for (const auto& spec : default_suite()) {
    INFO(spec.name);
    auto c = generate_case(spec);
    REQUIRE(c.ok());
    const Case back = round_trip(*c, "suite_case");
    // The file stem names the loaded case; everything else is the generator's.
    check_same_case(*c, back);
    ++checked;
  }
  CHECK(checked > 0);
}

TEST_CASE("non-finite inputs are warnings that say where; unread slots may hold anything") {
  Case c = make_case();
  // query [3, 4, 8] F32: token 2 (sequence 1, token 0), head 1, dim 3.
  store_element(c.query.dtype, c.query.mutable_data(), (2 * 4 + 1) * 8 + 3, std::numeric_limits<double>::quiet_NaN());
  // key_cache NHD [6, 2, 2, 8]: sequence 0's token 3 is page 0 (block_table[0][1]), slot 1; kv head 0, dim 2.
  store_element(c.key_cache.dtype, c.key_cache.mutable_data(), ((0 * 2 + 1) * 2 + 0) * 8 + 2,
                std::numeric_limits<double>::infinity());
  // value_cache: page 5 slot 1 is past sequence 0's seq_len 5, page 2 no one's.
  store_element(c.value_cache.dtype, c.value_cache.mutable_data(), ((5 * 2 + 1) * 2 + 1) * 6,
                std::numeric_limits<double>::quiet_NaN());
  store_element(c.value_cache.dtype, c.value_cache.mutable_data(), ((2 * 2 + 0) * 2 + 0) * 6 + 4,
                std::numeric_limits<double>::quiet_NaN());
  const auto report = validate_case(c);
  INFO("warnings:\n", joined(report.warnings));
  CHECK(report.ok());
  CHECK(report.warnings.size() == 2);
  CHECK(has_message(report.warnings, "query of sequence 1 holds NaN/Inf in 1 (token, head) row; first at token 0, "
                                     "head 1, dim 3: nan"));
  CHECK(has_message(report.warnings, "key_cache holds NaN/Inf in 1 slot row that sequence 0 reads; first at token 3 "
                                     "(page 0, slot 1), kv head 0, dim 2: inf"));
  CHECK_FALSE(has_message(report.warnings, "value_cache"));

  // Every KV dtype: NaN (or, where the dtype has one, Inf) is found by its bits.
  for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
    INFO(dtype_name(kv));
    Geometry g;
    g.kv_dtype = kv;
    Case d = make_case(g);
    CHECK(validate_case(d).warnings.empty());
    // sequence 1's token 2 is page 3 (block_table[1][1]) slot 0; kv head 1, dim 5.
    store_element(kv, d.value_cache.mutable_data(), ((3 * 2 + 0) * 2 + 1) * 6 + 5, std::numeric_limits<double>::quiet_NaN());
    CHECK(has_message(validate_case(d).warnings, "value_cache holds NaN/Inf in 1 slot row that sequence 0 reads; first "
                                                 "at token 0 (page 3, slot 0), kv head 1, dim 5"));
    CHECK(has_message(validate_case(d).warnings, "value_cache holds NaN/Inf in 1 slot row that sequence 1 reads; first "
                                                 "at token 2 (page 3, slot 0), kv head 1, dim 5"));
  }
}

TEST_CASE("generated cases: the NaN poison in unreferenced pages and past seq_len never warns") {
  SyntheticSpec spec;
  spec.num_seqs = 5;
  spec.seq_len_dist = LengthDist::List;
  spec.seq_len_list = {1, 15, 17, 33, 100};
  spec.block_size = 16;
  spec.kv_dtype = DType::F8_E5M2;
  auto c = generate_case(spec);
  REQUIRE(c.ok());
  CHECK(validate_case(*c).warnings.empty());
}

namespace {

// Anonymous pages that are never touched: the bytes of a huge hostile cache,
// costing address space only.
std::shared_ptr<const void> untouched_bytes(std::size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return std::shared_ptr<const void>(p, [n](const void* q) { ::munmap(const_cast<void*>(q), n); });
}

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST_CASE("a case whose reference would need more memory than the limit is refused") {
  // The fuzzer's case: one page of INT32_MAX slots, seq_len INT32_MAX (a
  // 4 GiB sparse file); the reference would gather 16 GiB of K, 16 of V and
  // 16 of logits.
  constexpr std::int64_t kSlots = std::numeric_limits<std::int32_t>::max();
  Case c;
  c.name = "huge";
  c.query = Tensor::from_doubles(DType::F32, {1, 1, 1}, std::vector<double>{1.0});
  for (Tensor* t : {&c.key_cache, &c.value_cache}) {
    t->dtype = DType::F8_E4M3;
    t->shape = {1, kSlots, 1, 1};
    t->owner = untouched_bytes(static_cast<std::size_t>(kSlots));
    t->data = static_cast<const std::byte*>(t->owner.get());
    t->nbytes = static_cast<std::size_t>(kSlots);
  }
  c.table.form = TableForm::Dense;
  c.table.max_blocks_per_seq = 1;
  c.table.page_indices = {0};
  c.table.page_indptr = {0, 1};
  c.seq_lens = {static_cast<std::int32_t>(kSlots)};
  c.query_start_loc = {0, 1};
  {
    const ScopedEnv limit("PAGECHECK_MEMORY_LIMIT", "16G");
    expect_error(c, "running this case needs about 48.0 GiB of host memory");
    expect_error(c, "but the limit is 16.0 GiB (PAGECHECK_MEMORY_LIMIT)");
  }
  CHECK(estimate_memory(c, 1).reference_bytes > (std::uint64_t{48} << 30));
  {
    const ScopedEnv limit("PAGECHECK_MEMORY_LIMIT", "lots");
    expect_error(c, "PAGECHECK_MEMORY_LIMIT = 'lots' is not a size");
  }
  // A small case under a small limit: the estimate counts what it allocates.
  const ScopedEnv limit("PAGECHECK_MEMORY_LIMIT", "1K");
  expect_error(make_case(), "but the limit is 1.0 KiB");
}

TEST_CASE("memory sizes parse as bytes or with K, M, G, T; the device check compares with min(free, limit)") {
  CHECK(*parse_memory_size("X", "0") == 0);
  CHECK(*parse_memory_size("X", "4096") == 4096);
  CHECK(*parse_memory_size("X", "1K") == 1024);
  CHECK(*parse_memory_size("X", "3k") == 3072);
  CHECK(*parse_memory_size("X", "1M") == (std::uint64_t{1} << 20));
  CHECK(*parse_memory_size("X", "16G") == (std::uint64_t{16} << 30));
  CHECK(*parse_memory_size("X", "2T") == (std::uint64_t{2} << 40));
  CHECK(*parse_memory_size("X", "20000000T") == std::numeric_limits<std::uint64_t>::max());  // saturates
  for (const char* bad : {"", "lots", "-1", "1.5G", "1MB", "1m", "G", " 1", "1 M"}) {
    INFO("text: '" << bad << "'");
    const auto parsed = parse_memory_size("PAGECHECK_DEVICE_MEMORY_LIMIT", bad);
    REQUIRE(!parsed.ok());
    CHECK(parsed.error().code == ErrorCode::InvalidInput);
    CHECK(parsed.error().message ==
          fmt::format("PAGECHECK_DEVICE_MEMORY_LIMIT = '{}' is not a size (bytes, or a number with K, M, G or T)", bad));
  }

  ::unsetenv("PAGECHECK_DEVICE_MEMORY_LIMIT");
  REQUIRE(device_memory_limit().ok());
  CHECK(!device_memory_limit()->has_value());
  {
    const ScopedEnv limit("PAGECHECK_DEVICE_MEMORY_LIMIT", "");
    CHECK(!device_memory_limit()->has_value());
  }
  {
    const ScopedEnv limit("PAGECHECK_DEVICE_MEMORY_LIMIT", "1M");
    CHECK(device_memory_limit()->value() == (std::uint64_t{1} << 20));
  }
  {
    const ScopedEnv limit("PAGECHECK_DEVICE_MEMORY_LIMIT", "tiny");
    REQUIRE(!device_memory_limit().ok());
    CHECK(device_memory_limit().error().message.find("PAGECHECK_DEVICE_MEMORY_LIMIT = 'tiny' is not a size") == 0);
  }

  constexpr std::uint64_t kGiB = std::uint64_t{1} << 30, kMiB = std::uint64_t{1} << 20;
  const std::string need = "not run: the GPU paths need about 2.0 GiB of device memory for this case (cache, outputs, "
                           "split workspace, gathered K/V) but ";
  // Nothing known, or enough of the smaller figure: no shortfall.
  CHECK(!device_memory_shortfall(2 * kGiB, 0, std::nullopt, std::nullopt));
  CHECK(!device_memory_shortfall(2 * kGiB, 0, 2 * kGiB, std::nullopt));  // exactly what is free fits
  CHECK(!device_memory_shortfall(2 * kGiB, 0, 100 * kGiB, 3 * kGiB));
  CHECK(!device_memory_shortfall(2 * kGiB, 0, std::nullopt, 2 * kGiB));
  // The free memory decides: the message of a check without a limit.
  CHECK(device_memory_shortfall(2 * kGiB, 1, kGiB, std::nullopt) == need + "device 1 has 1.0 GiB free");
  CHECK(device_memory_shortfall(2 * kGiB, 0, kGiB, 100 * kGiB) == need + "device 0 has 1.0 GiB free");
  CHECK(device_memory_shortfall(2 * kGiB, 0, kGiB, kGiB) == need + "device 0 has 1.0 GiB free");
  // The limit decides (below the free memory, or the free memory unknown).
  CHECK(device_memory_shortfall(2 * kGiB, 0, 139 * kGiB, kMiB) ==
        need + "PAGECHECK_DEVICE_MEMORY_LIMIT allows 1.0 MiB (device 0 has 139.0 GiB free)");
  CHECK(device_memory_shortfall(2 * kGiB, 0, std::nullopt, kMiB) ==
        need + "PAGECHECK_DEVICE_MEMORY_LIMIT allows 1.0 MiB (the free memory of device 0 is unknown)");
  CHECK(device_memory_shortfall(2 * kGiB, 0, 139 * kGiB, 0).has_value());
}

TEST_CASE("a generated pool large enough for the copy-on-write NaN mapping: poison where unread, private writes") {
  // 4 x 1000 tokens, 2 KV heads, d64, BF16: caches of 3 MB, past the size
  // at which the generator maps one NaN chunk over and over.
  SyntheticSpec spec;
  spec.num_seqs = 4;
  spec.seq_len_dist = LengthDist::Fixed;
  spec.seq_len_max = 1000;
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.block_size = 16;
  auto generated = generate_case(spec);
  REQUIRE(generated.ok());
  Case& c = *generated;
  REQUIRE(c.key_cache.nbytes > (std::size_t{2} << 20));
  CHECK(validate_case(c).warnings.empty());  // every referenced slot finite
  std::vector<bool> referenced(static_cast<std::size_t>(c.num_blocks()), false);
  for (std::int64_t s = 0; s < c.num_seqs(); ++s)
    for (std::int64_t j = 0; j < (c.seq_lens[s] + 15) / 16; ++j) referenced[c.table.page_indices[c.table.page_indptr[s] + j]] = true;
  const std::int64_t per_block = c.key_cache.numel() / c.num_blocks();
  std::int64_t unreferenced = -1, other_unreferenced = -1;
  for (std::int64_t b = 0; b < c.num_blocks(); ++b) {
    if (referenced[b]) continue;
    for (std::int64_t i = 0; i < per_block; i += 97) REQUIRE(std::isnan(c.key_cache.at(b * per_block + i)));
    (unreferenced < 0 ? unreferenced : other_unreferenced) = b;
  }
  REQUIRE(other_unreferenced >= 0);
  // A write lands in this case only: the NaN chunk behind other blocks (and
  // behind another case's pool) stays NaN.
  auto again = generate_case(spec);
  REQUIRE(again.ok());
  store_element(DType::BF16, c.key_cache.mutable_data(), static_cast<std::size_t>(unreferenced * per_block), 1.5);
  CHECK(c.key_cache.at(unreferenced * per_block) == 1.5);
  CHECK(std::isnan(c.key_cache.at(other_unreferenced * per_block)));
  CHECK(std::isnan(again->key_cache.at(unreferenced * per_block)));
}
