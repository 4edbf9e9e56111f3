// CLI smoke test of the combined cache forms (docs/case-format.md, "The KV
// cache: four forms"): a small case is written as vLLM's kv_cache,
// FlashInfer's HND paged_kv_cache and vLLM's classic caches, with the
// reference's own output recorded, and `pagecheck replay` must pass each
// (the recorded output agrees, so the cache was read right); a recorded
// output of the wrong case fails; `inspect` names the form; a broken
// kv_cache is invalid input (exit 3) with the message.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "pagecheck/case_file.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/synthetic.hpp"

#include "cli_run.hpp"

namespace fs = std::filesystem;
using namespace pagecheck;

namespace {

using namespace cli_test;

Case known_case(KvLayout layout, std::uint64_t seed) {
  SyntheticSpec spec;
  spec.name = "cli_layouts";
  spec.seed = seed;
  spec.num_seqs = 2;
  spec.q_heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 16;
  spec.block_size = 4;
  spec.query_dtype = DType::BF16;
  spec.kv_dtype = DType::BF16;
  spec.layout = layout;
  spec.seq_len_dist = LengthDist::List;
  spec.seq_len_list = {13, 6};
  auto c = generate_case(spec);
  REQUIRE_MESSAGE(c.ok(), c.error().describe());
  return std::move(c.value());
}

// The case's tensors in the separate form with `output` = the reference's
// output of `recorded_from` (F32).
SafetensorsFile parts_with_output(const Case& c, const Case& recorded_from) {
  const fs::path path = work_dir() / "separate.safetensors";
  REQUIRE(save_case_file(c, path).ok());
  auto file = read_safetensors(path);
  REQUIRE(file.ok());
  const auto ref = reference_attention(recorded_from, 1);
  REQUIRE(ref.ok());
  file->tensors["output"] = Tensor::from_doubles(
      DType::F32, {recorded_from.num_tokens(), recorded_from.q_heads(), recorded_from.v_head_dim()}, ref->output);
  return std::move(file.value());
}

std::byte* at(Tensor& t, std::int64_t index) { return t.mutable_data() + index * 2; }  // BF16
const std::byte* at(const Tensor& t, std::int64_t index) { return t.data + index * 2; }

fs::path write(const SafetensorsFile& parts, const std::string& name) {
  const fs::path path = work_dir() / name;
  const auto written = write_safetensors(path, parts.tensors, parts.metadata);
  REQUIRE_MESSAGE(written.ok(), written.error().describe());
  return path;
}

}  // namespace

TEST_CASE("pagecheck replay and inspect read kv_cache, paged_kv_cache and the classic caches") {
  const Case nhd = known_case(KvLayout::NHD, 3);
  const Case hnd = known_case(KvLayout::HND, 3);
  const std::size_t half = nhd.key_cache.nbytes;

  // vLLM: [2, num_blocks, block_size, kv_heads, head_dim].
  auto vllm = parts_with_output(nhd, nhd);
  vllm.tensors.erase("key_cache");
  vllm.tensors.erase("value_cache");
  std::vector<std::int64_t> shape = nhd.key_cache.shape;
  shape.insert(shape.begin(), 2);
  Tensor kv = Tensor::zeros(DType::BF16, shape);
  std::memcpy(kv.mutable_data(), nhd.key_cache.data, half);
  std::memcpy(kv.mutable_data() + half, nhd.value_cache.data, half);
  vllm.tensors["kv_cache"] = kv;
  const fs::path vllm_file = write(vllm, "vllm_kv_cache.safetensors");

  // FlashInfer HND: [num_pages, 2, kv_heads, page_size, head_dim].
  auto flashinfer = parts_with_output(hnd, hnd);
  flashinfer.tensors.erase("key_cache");
  flashinfer.tensors.erase("value_cache");
  shape = hnd.key_cache.shape;
  shape.insert(shape.begin() + 1, 2);
  Tensor paged = Tensor::zeros(DType::BF16, shape);
  const std::size_t page = half / static_cast<std::size_t>(hnd.num_blocks());
  for (std::int64_t p = 0; p < hnd.num_blocks(); ++p) {
    std::memcpy(paged.mutable_data() + 2 * p * page, hnd.key_cache.data + p * page, page);
    std::memcpy(paged.mutable_data() + (2 * p + 1) * page, hnd.value_cache.data + p * page, page);
  }
  flashinfer.tensors["paged_kv_cache"] = paged;
  const fs::path flashinfer_file = write(flashinfer, "flashinfer_hnd.safetensors");

  // vLLM classic, x = 8 (BF16), from the HND case.
  auto classic = parts_with_output(hnd, hnd);
  const std::int64_t nb = hnd.num_blocks(), heads = 2, bs = 4, d = 16, x = 8;
  Tensor key = Tensor::zeros(DType::BF16, {nb, heads, d / x, bs, x});
  Tensor value = Tensor::zeros(DType::BF16, {nb, heads, d, bs});
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t s = 0; s < bs; ++s)
        for (std::int64_t e = 0; e < d; ++e) {
          const std::int64_t hnd_at = ((b * heads + h) * bs + s) * d + e;
          std::memcpy(at(key, (((b * heads + h) * (d / x) + e / x) * bs + s) * x + e % x), at(hnd.key_cache, hnd_at), 2);
          std::memcpy(at(value, ((b * heads + h) * d + e) * bs + s), at(hnd.value_cache, hnd_at), 2);
        }
  classic.tensors["key_cache"] = key;
  classic.tensors["value_cache"] = value;
  classic.metadata.erase("kv_layout");
  const fs::path classic_file = write(classic, "vllm_classic.safetensors");

  for (const fs::path& file : {vllm_file, flashinfer_file, classic_file}) {
    INFO(file.string());
    const Result r = run_tool("replay '" + file.string() + "' --no-color");
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    CHECK(r.rc == 0);
    CHECK(contains(r.out, "reference  pass"));
  }
  const Result vi = run_tool("inspect '" + vllm_file.string() + "'");
  CHECK(vi.rc == 0);
  CHECK(contains(vi.out, "cache:     given as kv_cache (vLLM); viewed in place as NHD key_cache/value_cache"));
  const Result fi = run_tool("inspect '" + flashinfer_file.string() + "'");
  CHECK(contains(fi.out, "cache:     given as paged_kv_cache (FlashInfer); copied at read time into HND"));
  const Result ci = run_tool("inspect '" + classic_file.string() + "'");
  CHECK(contains(ci.out, "cache:     given as key_cache + value_cache (vLLM classic); copied at read time into HND"));

  // The output of another case recorded with the kv_cache: replay fails (1).
  auto wrong = parts_with_output(nhd, known_case(KvLayout::NHD, 4));
  wrong.tensors.erase("key_cache");
  wrong.tensors.erase("value_cache");
  wrong.tensors["kv_cache"] = kv;
  const Result w = run_tool("replay '" + write(wrong, "vllm_wrong_output.safetensors").string() + "' --no-color");
  INFO("stdout:\n", w.out, "\nstderr:\n", w.err);
  CHECK(w.rc == 1);

  // A kv_cache whose first dimension is not 2: invalid input (3).
  vllm.tensors["kv_cache"] = Tensor::zeros(DType::BF16, {3, nb, bs, heads, d});
  const Result bad = run_tool("replay '" + write(vllm, "vllm_bad.safetensors").string() + "' --no-color");
  CHECK(bad.rc == 3);
  CHECK(contains(bad.err, "tensor 'kv_cache' has shape [3, "));
  CHECK(contains(bad.err, "dimension 0 must be 2 (keys, values)"));
}
