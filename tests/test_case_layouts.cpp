// The combined cache tensors real runtimes hold, read from case files with no
// glue: vLLM's kv_cache, FlashInfer's paged_kv_cache (NHD and HND) and vLLM's
// classic paged-attention key/value caches. Each form is written by this
// test's own small writer from a known separate-form case, read back, and
// compared element by element (through PagedKvView) and by the CPU
// reference's output, bit for bit; then the errors of each form.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pagecheck/case_file.hpp"
#include "pagecheck/limits.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/validate.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using namespace pagecheck;

namespace {

fs::path temp_dir() {
  static const test::ScratchDir dir("case_layouts");
  return dir.path;
}

// A small prefill/decode mix over a shuffled, partly shared pool: GQA 4/2,
// head dim 32, block size 4, lengths 1..21. The generator fills unused pages
// and slots past seq_len with NaN, which the element checks compare too.
Case known_case(KvLayout layout, DType kv_dtype, TableForm form = TableForm::Dense) {
  SyntheticSpec spec;
  spec.name = "layouts";
  spec.seed = 7;
  spec.num_seqs = 3;
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 32;
  spec.block_size = 4;
  spec.query_dtype = DType::F32;
  spec.kv_dtype = kv_dtype;
  spec.layout = layout;
  spec.table_form = form;
  spec.seq_len_dist = LengthDist::List;
  spec.seq_len_list = {21, 5, 1};
  spec.query_mode = QueryMode::Mixed;
  spec.q_len_dist = LengthDist::List;
  spec.q_len_list = {3, 1};
  if (kv_dtype == DType::F8_E4M3) spec.k_scale = 0.5, spec.v_scale = 0.25;
  auto c = generate_case(spec);
  REQUIRE_MESSAGE(c.ok(), c.error().describe());
  return std::move(c.value());
}

// The tensors and metadata of `c` saved in the separate form.
SafetensorsFile separate_parts(const Case& c) {
  const fs::path path = temp_dir() / "separate.safetensors";
  const auto saved = save_case_file(c, path);
  REQUIRE_MESSAGE(saved.ok(), saved.error().describe());
  auto file = read_safetensors(path);
  REQUIRE_MESSAGE(file.ok(), file.error().describe());
  return std::move(file.value());
}

// Element (block, slot, head, e) of a cache tensor in `layout`, as raw bytes.
const std::byte* element(const Tensor& t, KvLayout layout, std::int64_t b, std::int64_t s, std::int64_t h,
                         std::int64_t e) {
  const std::int64_t slots = t.dim(layout == KvLayout::NHD ? 1 : 2);
  const std::int64_t heads = t.dim(layout == KvLayout::NHD ? 2 : 1);
  const CacheStrides st = cache_strides(layout, slots, heads, t.dim(3));
  return t.data + (b * st.block + s * st.slot + h * st.head + e) * static_cast<std::int64_t>(dtype_size(t.dtype));
}

// --- this test's writers of the combined forms -----------------------------

// vLLM: [2, num_blocks, block_size, kv_heads, head_dim] from an NHD case.
Tensor write_vllm_combined(const Case& c) {
  REQUIRE(c.params.layout == KvLayout::NHD);
  std::vector<std::int64_t> shape = c.key_cache.shape;
  shape.insert(shape.begin(), 2);
  Tensor out = Tensor::zeros(c.key_cache.dtype, shape);
  REQUIRE(out.nbytes == c.key_cache.nbytes + c.value_cache.nbytes);
  std::memcpy(out.mutable_data(), c.key_cache.data, c.key_cache.nbytes);
  std::memcpy(out.mutable_data() + c.key_cache.nbytes, c.value_cache.data, c.value_cache.nbytes);
  return out;
}

// FlashInfer: [num_pages, 2, ...page in the case's layout...].
Tensor write_flashinfer(const Case& c) {
  std::vector<std::int64_t> shape = c.key_cache.shape;
  shape.insert(shape.begin() + 1, 2);
  Tensor out = Tensor::zeros(c.key_cache.dtype, shape);
  const std::size_t page = c.key_cache.nbytes / static_cast<std::size_t>(c.num_blocks());
  for (std::int64_t p = 0; p < c.num_blocks(); ++p) {
    std::memcpy(out.mutable_data() + (2 * p) * page, c.key_cache.data + p * page, page);
    std::memcpy(out.mutable_data() + (2 * p + 1) * page, c.value_cache.data + p * page, page);
  }
  return out;
}

// vLLM classic: key [num_blocks, kv_heads, head_dim/x, block_size, x] and
// value [num_blocks, kv_heads, head_dim, block_size], element by element
// from a case in either layout.
std::pair<Tensor, Tensor> write_classic(const Case& c, std::int64_t x) {
  const std::int64_t nb = c.num_blocks(), bs = c.block_size(), h = c.kv_heads(), dk = c.key_head_dim(),
                     dv = c.v_head_dim();
  REQUIRE(dk % x == 0);
  const std::size_t es = dtype_size(c.key_cache.dtype);
  Tensor key = Tensor::zeros(c.key_cache.dtype, {nb, h, dk / x, bs, x});
  Tensor value = Tensor::zeros(c.value_cache.dtype, {nb, h, dv, bs});
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t head = 0; head < h; ++head)
      for (std::int64_t s = 0; s < bs; ++s) {
        for (std::int64_t e = 0; e < dk; ++e) {
          const std::int64_t at = (((b * h + head) * (dk / x) + e / x) * bs + s) * x + e % x;
          std::memcpy(key.mutable_data() + at * es, element(c.key_cache, c.params.layout, b, s, head, e), es);
        }
        for (std::int64_t e = 0; e < dv; ++e) {
          const std::int64_t at = ((b * h + head) * dv + e) * bs + s;
          std::memcpy(value.mutable_data() + at * es, element(c.value_cache, c.params.layout, b, s, head, e), es);
        }
      }
  return {std::move(key), std::move(value)};
}

// Writes `parts` and loads it as a case.
Expected<Case> load_parts(const SafetensorsFile& parts, const std::string& stem) {
  const fs::path path = temp_dir() / (stem + ".safetensors");
  const auto written = write_safetensors(path, parts.tensors, parts.metadata);
  REQUIRE_MESSAGE(written.ok(), written.error().describe());
  return load_case_file(path);
}

std::string load_error(const SafetensorsFile& parts, const std::string& stem = "bad") {
  auto loaded = load_parts(parts, stem);
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().code == ErrorCode::InvalidInput);
  return loaded.error().message;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every key and value element of every block, slot and head, compared as
// bytes through each case's own layout; then what a sequence reads, through
// PagedKvView; then the reference's output and LSE, bit for bit.
void check_same_cache(const Case& expected, const Case& got) {
  REQUIRE(got.num_blocks() == expected.num_blocks());
  REQUIRE(got.block_size() == expected.block_size());
  REQUIRE(got.kv_heads() == expected.kv_heads());
  REQUIRE(got.key_head_dim() == expected.key_head_dim());
  REQUIRE(got.v_head_dim() == expected.v_head_dim());
  REQUIRE(got.key_cache.dtype == expected.key_cache.dtype);
  REQUIRE(got.value_cache.dtype == expected.value_cache.dtype);
  const std::size_t es = dtype_size(expected.key_cache.dtype);
  std::int64_t differing = 0, compared = 0;
  for (std::int64_t b = 0; b < expected.num_blocks(); ++b)
    for (std::int64_t s = 0; s < expected.block_size(); ++s)
      for (std::int64_t h = 0; h < expected.kv_heads(); ++h) {
        for (std::int64_t e = 0; e < expected.key_head_dim(); ++e, ++compared)
          differing += std::memcmp(element(expected.key_cache, expected.params.layout, b, s, h, e),
                                   element(got.key_cache, got.params.layout, b, s, h, e), es) != 0;
        for (std::int64_t e = 0; e < expected.v_head_dim(); ++e, ++compared)
          differing += std::memcmp(element(expected.value_cache, expected.params.layout, b, s, h, e),
                                   element(got.value_cache, got.params.layout, b, s, h, e), es) != 0;
      }
  CHECK(compared == 2 * expected.key_cache.numel());
  CHECK(differing == 0);

  const PagedKvView ev = expected.host_view(), gv = got.host_view();
  const auto* ek = static_cast<const std::byte*>(ev.key_data);
  const auto* gk = static_cast<const std::byte*>(gv.key_data);
  const auto* evd = static_cast<const std::byte*>(ev.value_data);
  const auto* gvd = static_cast<const std::byte*>(gv.value_data);
  std::int64_t read = 0, read_differing = 0;
  for (std::int64_t seq = 0; seq < ev.num_seqs; ++seq)
    for (std::int64_t t = 0; t < ev.seq_len(seq); ++t)
      for (std::int64_t h = 0; h < ev.kv_heads; ++h) {
        for (std::int64_t e = 0; e < ev.head_dim; ++e, ++read)
          read_differing += std::memcmp(ek + (ev.key_offset(seq, t, h) + e) * es,
                                        gk + (gv.key_offset(seq, t, h) + e) * es, es) != 0;
        for (std::int64_t e = 0; e < ev.v_head_dim; ++e, ++read)
          read_differing += std::memcmp(evd + (ev.value_offset(seq, t, h) + e) * es,
                                        gvd + (gv.value_offset(seq, t, h) + e) * es, es) != 0;
      }
  CHECK(read > 0);
  CHECK(read_differing == 0);

  CHECK(validate_case(got).ok());
  const auto want = reference_attention(expected, 1);
  const auto have = reference_attention(got, 1);
  REQUIRE(want.ok());
  REQUIRE(have.ok());
  REQUIRE(want->output.size() == have->output.size());
  REQUIRE(want->lse.size() == have->lse.size());
  CHECK(std::memcmp(want->output.data(), have->output.data(), want->output.size() * sizeof(double)) == 0);
  CHECK(std::memcmp(want->lse.data(), have->lse.data(), want->lse.size() * sizeof(double)) == 0);
}

// The file in `parts` rewritten with a header one byte longer (a trailing
// space), so the data section, and every tensor in it, starts at an odd
// offset: misaligned for every dtype wider than a byte.
fs::path write_misaligned(const SafetensorsFile& parts, const std::string& stem) {
  const fs::path aligned = temp_dir() / (stem + "_aligned.safetensors");
  REQUIRE(write_safetensors(aligned, parts.tensors, parts.metadata).ok());
  std::ifstream in(aligned, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  bytes.insert(8 + n, " ");
  ++n;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  const fs::path path = temp_dir() / (stem + "_misaligned.safetensors");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  const char* name_;
};

}  // namespace

TEST_CASE("vLLM's kv_cache [2, num_blocks, block_size, kv_heads, head_dim] is read in place") {
  for (DType kv : {DType::BF16, DType::F8_E4M3, DType::F32}) {
    for (TableForm form : {TableForm::Dense, TableForm::Csr}) {
      INFO(dtype_name(kv), (form == TableForm::Dense ? " dense" : " csr"));
      const Case c = known_case(KvLayout::NHD, kv, form);
      auto parts = separate_parts(c);
      parts.tensors.erase("key_cache");
      parts.tensors.erase("value_cache");
      parts.tensors["kv_cache"] = write_vllm_combined(c);
      parts.metadata.erase("kv_layout");  // vLLM's form is NHD: no metadata needed
      auto loaded = load_parts(parts, "vllm_combined");
      REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
      CHECK(loaded->cache_form == CacheForm::VllmCombined);
      CHECK(loaded->params.layout == KvLayout::NHD);
      CHECK(loaded->key_cache.shape == c.key_cache.shape);
      // Two views of the one mapped tensor, no copy: value right after key.
      CHECK(loaded->value_cache.data == loaded->key_cache.data + loaded->key_cache.nbytes);
      CHECK(loaded->key_cache.owner == loaded->query.owner);
      CHECK(estimate_memory(*loaded, 1).case_bytes == 0);
      check_same_cache(c, *loaded);

      parts.metadata["kv_layout"] = "NHD";  // also accepted when said
      auto said = load_parts(parts, "vllm_combined_nhd");
      REQUIRE_MESSAGE(said.ok(), said.error().describe());
      check_same_cache(c, *said);
    }
  }
}

TEST_CASE("FlashInfer's paged_kv_cache, NHD [num_pages, 2, page_size, ...] and HND [num_pages, 2, kv_heads, ...]") {
  for (KvLayout layout : {KvLayout::NHD, KvLayout::HND}) {
    for (DType kv : {DType::BF16, DType::F8_E5M2}) {
      INFO((layout == KvLayout::NHD ? "NHD " : "HND "), dtype_name(kv));
      const Case c = known_case(layout, kv, TableForm::Csr);
      auto parts = separate_parts(c);
      parts.tensors.erase("key_cache");
      parts.tensors.erase("value_cache");
      parts.tensors["paged_kv_cache"] = write_flashinfer(c);
      if (layout == KvLayout::NHD) parts.metadata.erase("kv_layout");  // NHD is the default
      else CHECK(parts.metadata.at("kv_layout") == "HND");
      auto loaded = load_parts(parts, "flashinfer");
      REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
      CHECK(loaded->cache_form == CacheForm::FlashInferPaged);
      CHECK(loaded->params.layout == layout);
      CHECK(loaded->key_cache.shape == c.key_cache.shape);
      CHECK(loaded->value_cache.shape == c.value_cache.shape);
      // The copy is counted by the memory check.
      CHECK(estimate_memory(*loaded, 1).case_bytes == c.key_cache.nbytes + c.value_cache.nbytes);
      check_same_cache(c, *loaded);
    }
  }
}

TEST_CASE("vLLM's classic key [.., head_dim/x, block_size, x] and value [.., head_dim, block_size]") {
  // x = 16 / element bytes as vLLM picks it, and any other x dividing head_dim.
  struct Variant {
    DType kv;
    std::int64_t x;
    KvLayout source;
    bool declared;  // kv_layout = vllm-classic in the metadata
  };
  const Variant variants[] = {
      {DType::BF16, 8, KvLayout::NHD, false},  {DType::F16, 8, KvLayout::HND, true},
      {DType::F8_E4M3, 16, KvLayout::NHD, true}, {DType::F32, 4, KvLayout::HND, false},
      {DType::BF16, 2, KvLayout::NHD, false},  {DType::BF16, 32, KvLayout::HND, false},
      {DType::BF16, 1, KvLayout::NHD, true},
  };
  for (const Variant& v : variants) {
    INFO(dtype_name(v.kv), " x=", v.x, (v.source == KvLayout::NHD ? " from NHD" : " from HND"),
         (v.declared ? " declared" : " by shape"));
    const Case c = known_case(v.source, v.kv, TableForm::Dense);
    auto parts = separate_parts(c);
    auto [key, value] = write_classic(c, v.x);
    parts.tensors["key_cache"] = key;
    parts.tensors["value_cache"] = value;
    if (v.declared) parts.metadata["kv_layout"] = "vllm-classic";
    else parts.metadata.erase("kv_layout");
    auto loaded = load_parts(parts, "classic");
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
    CHECK(loaded->cache_form == CacheForm::VllmClassic);
    CHECK(loaded->params.layout == KvLayout::HND);  // the model holds it as HND
    CHECK(loaded->key_cache.shape == std::vector<std::int64_t>{c.num_blocks(), c.kv_heads(), c.block_size(), 32});
    CHECK(estimate_memory(*loaded, 1).case_bytes == c.key_cache.nbytes + c.value_cache.nbytes);
    check_same_cache(c, *loaded);
  }
}

TEST_CASE("combined forms read from misaligned data (an odd header length)") {
  const Case nhd = known_case(KvLayout::NHD, DType::BF16);
  const Case hnd = known_case(KvLayout::HND, DType::BF16, TableForm::Csr);
  SUBCASE("kv_cache") {
    auto parts = separate_parts(nhd);
    parts.tensors.erase("key_cache");
    parts.tensors.erase("value_cache");
    parts.tensors["kv_cache"] = write_vllm_combined(nhd);
    auto loaded = load_case_file(write_misaligned(parts, "vllm"));
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
    CHECK_FALSE(loaded->key_cache.aligned());
    check_same_cache(nhd, *loaded);
  }
  SUBCASE("paged_kv_cache") {
    auto parts = separate_parts(hnd);
    parts.tensors.erase("key_cache");
    parts.tensors.erase("value_cache");
    parts.tensors["paged_kv_cache"] = write_flashinfer(hnd);
    auto loaded = load_case_file(write_misaligned(parts, "flashinfer"));
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
    check_same_cache(hnd, *loaded);
  }
  SUBCASE("classic") {
    auto parts = separate_parts(nhd);
    auto [key, value] = write_classic(nhd, 8);
    parts.tensors["key_cache"] = key;
    parts.tensors["value_cache"] = value;
    parts.metadata.erase("kv_layout");
    auto loaded = load_case_file(write_misaligned(parts, "classic"));
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
    check_same_cache(nhd, *loaded);
  }
}

TEST_CASE("a case read from a combined form is written back in the separate form") {
  const Case c = known_case(KvLayout::NHD, DType::BF16);
  auto parts = separate_parts(c);
  auto [key, value] = write_classic(c, 8);
  parts.tensors["key_cache"] = key;
  parts.tensors["value_cache"] = value;
  parts.metadata["kv_layout"] = "vllm-classic";
  auto loaded = load_parts(parts, "classic_to_save");
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
  const fs::path saved = temp_dir() / "classic_saved.safetensors";
  REQUIRE(save_case_file(*loaded, saved).ok());
  auto file = read_safetensors(saved);
  REQUIRE(file.ok());
  CHECK(file->tensors.at("key_cache").rank() == 4);
  CHECK(file->tensors.at("value_cache").rank() == 4);
  CHECK(file->metadata.at("kv_layout") == "HND");
  auto back = load_case_file(saved);
  REQUIRE_MESSAGE(back.ok(), back.error().describe());
  CHECK(back->cache_form == CacheForm::Separate);
  check_same_cache(c, *back);
}

TEST_CASE("combined forms: errors name the tensor and the problem") {
  const Case c = known_case(KvLayout::NHD, DType::BF16);
  const auto combined_parts = [&] {
    auto parts = separate_parts(c);
    parts.tensors.erase("key_cache");
    parts.tensors.erase("value_cache");
    parts.tensors["kv_cache"] = write_vllm_combined(c);
    return parts;
  };
  const auto flashinfer_parts = [&] {
    auto parts = separate_parts(c);
    parts.tensors.erase("key_cache");
    parts.tensors.erase("value_cache");
    parts.tensors["paged_kv_cache"] = write_flashinfer(c);
    return parts;
  };
  const auto classic_parts = [&](std::int64_t x) {
    auto parts = separate_parts(c);
    auto kv = write_classic(c, x);
    parts.tensors["key_cache"] = kv.first;
    parts.tensors["value_cache"] = kv.second;
    parts.metadata.erase("kv_layout");
    return parts;
  };
  const std::int64_t nb = c.num_blocks();

  SUBCASE("kv_cache: dimension 0 must be 2, rank 5, a KV dtype") {
    auto parts = combined_parts();
    parts.tensors["kv_cache"] = Tensor::zeros(DType::BF16, {3, nb, 4, 2, 32});
    CHECK(load_error(parts) ==
          fmt::format("tensor 'kv_cache' has shape [3, {}, 4, 2, 32] BF16: dimension 0 must be 2 (keys, values)", nb));
    parts.tensors["kv_cache"] = Tensor::zeros(DType::BF16, {2 * nb, 4, 2, 32});
    CHECK(contains(load_error(parts), "tensor 'kv_cache' has shape [" + std::to_string(2 * nb) +
                                          ", 4, 2, 32] BF16 but must have rank 5: [2, num_blocks, block_size, "
                                          "kv_heads, head_dim] (vLLM, NHD)"));
    parts.tensors["kv_cache"] = Tensor::zeros(DType::I32, {2, nb, 4, 2, 32});
    CHECK(contains(load_error(parts), "tensor 'kv_cache' is I32 but must be one of: F32, F16, BF16, F8_E4M3"));
    parts.tensors["kv_cache"] = Tensor::zeros(DType::BF16, {2, nb, 0, 2, 32});
    CHECK(contains(load_error(parts), "tensor 'kv_cache' has shape [2, " + std::to_string(nb) +
                                          ", 0, 2, 32] BF16: block_size (dimension 2) must be at least 1"));
  }
  SUBCASE("kv_cache is NHD: kv_layout HND or vllm-classic contradicts it") {
    auto parts = combined_parts();
    parts.metadata["kv_layout"] = "HND";
    CHECK(contains(load_error(parts), "kv_layout is 'HND' but kv_cache is vLLM's NHD cache"));
    parts.metadata["kv_layout"] = "vllm-classic";
    CHECK(contains(load_error(parts), "kv_layout is 'vllm-classic' but kv_cache is vLLM's NHD cache"));
  }
  SUBCASE("paged_kv_cache: dimension 1 must be 2, shapes per layout") {
    auto parts = flashinfer_parts();
    parts.tensors["paged_kv_cache"] = Tensor::zeros(DType::BF16, {nb, 1, 4, 2, 32});
    CHECK(load_error(parts) == fmt::format("tensor 'paged_kv_cache' has shape [{}, 1, 4, 2, 32] BF16: dimension 1 "
                                           "must be 2 (keys, values)",
                                           nb));
    parts.tensors["paged_kv_cache"] = Tensor::zeros(DType::BF16, {nb, 2, 4, 64});
    parts.metadata["kv_layout"] = "HND";
    CHECK(contains(load_error(parts), "must have rank 5: [num_pages, 2, kv_heads, page_size, head_dim] (FlashInfer, "
                                      "HND)"));
    parts = flashinfer_parts();
    parts.metadata["kv_layout"] = "vllm-classic";
    CHECK(contains(load_error(parts), "kv_layout 'vllm-classic' describes a rank-5 key_cache"));
  }
  SUBCASE("two cache forms at once, or none") {
    auto parts = combined_parts();
    parts.tensors["key_cache"] = c.key_cache;
    CHECK(contains(load_error(parts), "the file holds 2 KV cache forms (key_cache + value_cache and kv_cache); give "
                                      "exactly one of key_cache + value_cache, kv_cache (vLLM) or paged_kv_cache "
                                      "(FlashInfer)"));
    parts = combined_parts();
    parts.tensors["paged_kv_cache"] = write_flashinfer(c);
    CHECK(contains(load_error(parts), "the file holds 2 KV cache forms (kv_cache and paged_kv_cache)"));
    parts.tensors["value_cache"] = c.value_cache;
    CHECK(contains(load_error(parts), "3 KV cache forms (key_cache + value_cache, kv_cache and paged_kv_cache)"));
    parts = combined_parts();
    parts.tensors.erase("kv_cache");
    CHECK(load_error(parts) == "required tensor 'key_cache' is missing; the KV cache is key_cache + value_cache, "
                               "kv_cache (vLLM) or paged_kv_cache (FlashInfer); for MLA kv_c_and_k_pe_cache (vLLM) "
                               "or ckv_cache + kpe_cache (FlashInfer)");
  }
  SUBCASE("a typo in a combined name suggests it") {
    auto parts = combined_parts();
    parts.tensors["kv_cach"] = parts.tensors.at("kv_cache");
    parts.tensors.erase("kv_cache");
    CHECK(contains(load_error(parts), "unknown tensor 'kv_cach' (did you mean 'kv_cache'?)"));
    CHECK(contains(load_error(parts), "kv_cache, paged_kv_cache"));  // in the list of known names
    parts = flashinfer_parts();
    parts.tensors["paged_kvcache"] = parts.tensors.at("paged_kv_cache");
    parts.tensors.erase("paged_kv_cache");
    CHECK(contains(load_error(parts), "(did you mean 'paged_kv_cache'?)"));
  }
  SUBCASE("classic: x must split the head dim the query has") {
    auto parts = classic_parts(8);
    parts.tensors["key_cache"] = Tensor::zeros(DType::BF16, {nb, 2, 3, 4, 8});  // 3 x 8 = 24, query has 32
    CHECK(contains(load_error(parts), fmt::format("key_cache [{}, 2, 3, 4, 8] BF16 is vLLM's classic layout "
                                                  "[num_blocks, kv_heads, head_dim/x, block_size, x] (vLLM classic): "
                                                  "head_dim/x = 3 groups of x = 8 elements make a key head_dim of 24, "
                                                  "but query has head_dim 32",
                                                  nb)));
    parts.tensors["key_cache"] = Tensor::zeros(DType::BF16, {nb, 2, 4, 4, 0});
    CHECK(contains(load_error(parts), "x (dimension 4) must be at least 1"));
  }
  SUBCASE("classic: key and value agree on blocks, heads and block size") {
    auto parts = classic_parts(8);
    parts.tensors["value_cache"] = Tensor::zeros(DType::BF16, {nb, 2, 32, 8});
    CHECK(contains(load_error(parts), "disagree on block_size (4 vs 8, layout vllm-classic)"));
    parts.tensors["value_cache"] = Tensor::zeros(DType::BF16, {nb + 1, 2, 32, 4});
    CHECK(contains(load_error(parts), fmt::format("disagree on num_blocks ({} vs {}, layout vllm-classic)", nb, nb + 1)));
  }
  SUBCASE("classic: an explicit NHD/HND contradicts the shapes; vllm-classic needs them") {
    auto parts = classic_parts(8);
    parts.metadata["kv_layout"] = "NHD";
    CHECK(contains(load_error(parts), "have the shapes of vLLM's classic layout"));
    CHECK(contains(load_error(parts), "but kv_layout is 'NHD'; for the classic layout leave kv_layout out or set it "
                                      "to 'vllm-classic'"));
    parts = separate_parts(c);
    parts.metadata["kv_layout"] = "vllm-classic";
    CHECK(contains(load_error(parts), "tensor 'key_cache' has shape [" + std::to_string(nb) +
                                          ", 4, 2, 32] BF16 but must have rank 5: [num_blocks, kv_heads, head_dim/x, "
                                          "block_size, x] (vLLM classic)"));
    parts = classic_parts(8);
    parts.metadata["kv_layout"] = "vllm-classic";
    parts.tensors["value_cache"] = Tensor::zeros(DType::BF16, {nb, 2, 32, 4, 1});
    CHECK(contains(load_error(parts), "tensor 'value_cache' has shape"));
    CHECK(contains(load_error(parts), "but must have rank 4: [num_blocks, kv_heads, head_dim, block_size] (vLLM "
                                      "classic)"));
  }
  SUBCASE("a rank-5 key_cache without a rank-4 value_cache says what classic needs") {
    auto parts = classic_parts(8);
    parts.tensors["value_cache"] = Tensor::zeros(DType::BF16, {nb, 2, 4, 4, 8});
    CHECK(contains(load_error(parts), "a rank-5 key_cache is vLLM's classic layout [num_blocks, kv_heads, head_dim/x, "
                                      "block_size, x], which needs a rank-4 value_cache"));
  }
  SUBCASE("a copy that does not fit the host memory limit is refused before it is made") {
    const ScopedEnv limit("PAGECHECK_MEMORY_LIMIT", "1K");
    auto parts = flashinfer_parts();
    const std::string message = load_error(parts);
    CHECK(contains(message, "converting paged_kv_cache ["));
    CHECK(contains(message, "to separate key and value tensors at read time needs"));
    CHECK(contains(message, "but the limit is 1.0 KiB (PAGECHECK_MEMORY_LIMIT); set PAGECHECK_MEMORY_LIMIT"));
    parts = classic_parts(8);
    CHECK(contains(load_error(parts), "converting key_cache ["));
    // kv_cache is viewed in place: nothing to convert, and validation's
    // estimate (here over the limit anyway) is what refuses the run.
    parts = combined_parts();
    auto loaded = load_parts(parts, "in_place");
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
  }
  SUBCASE("validation counts the converted copy against the limit") {
    auto parts = flashinfer_parts();
    auto loaded = load_parts(parts, "counted");
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().describe());
    const MemoryEstimate e = estimate_memory(*loaded);
    REQUIRE(e.case_bytes > 0);
    CHECK(e.host_bytes() == e.reference_bytes + e.harness_bytes + e.case_bytes);
    // A limit between the estimate without the copy and with it.
    const std::string limit_text = std::to_string(e.reference_bytes + e.harness_bytes + e.case_bytes / 2);
    const ScopedEnv limit("PAGECHECK_MEMORY_LIMIT", limit_text.c_str());
    const auto report = validate_case(*loaded);
    REQUIRE_FALSE(report.ok());
    bool named = false;
    for (const auto& error : report.errors)
      named = named || contains(error, "the KV cache converted from paged_kv_cache (FlashInfer): ");
    CHECK(named);
  }
}
