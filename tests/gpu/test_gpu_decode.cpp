// Decode sweeps of issue 3 through direct, split and auto, each against the
// CPU reference with the harness's checks (unwritten elements, bitwise
// repeatability, graph replay with changed tables); issue 23's attention
// sinks, ALiBi, head sizes and latent (MLA) caches through the same paths.
#include <doctest/doctest.h>

#include <cmath>

#include "gpu_test_util.hpp"
#include "pagecheck/batch_invariance.hpp"

using namespace pagecheck;
using namespace pagecheck::test;

namespace {

const std::vector<std::string> kDecodePaths = {"direct", "split", "auto"};

SyntheticSpec decode_spec(std::string name, std::uint64_t seed) {
  SyntheticSpec s;
  s.name = std::move(name);
  s.seed = seed;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.block_size = 16;
  s.query_mode = QueryMode::Decode;
  s.seq_len_dist = LengthDist::List;
  return s;
}


// Direct, then split and auto under `plan`.
void check_decode(const SyntheticSpec& s, const char* plan) {
  check_spec(s, {"direct"});
  check_spec(s, {"split", "auto"}, with_plan(plan));
}

// A head geometry, checked at lengths 5, 129, 1030 through direct and
// through split and auto with 512-token partitions.
struct Geometry {
  std::int64_t q_heads, kv_heads, head_dim, v_head_dim;
};
void check_geometry(SyntheticSpec s, const Geometry& g) {
  s.q_heads = g.q_heads;
  s.kv_heads = g.kv_heads;
  s.head_dim = g.head_dim;
  s.v_head_dim = g.v_head_dim;
  s.seq_len_list = {5, 129, 1030};
  s.num_seqs = 3;
  check_decode(s, "split:512:512");
}

}  // namespace

TEST_CASE("decode: block sizes 1, 7, 16, 32, 256 with lengths 1, block +-1, partition +-1") {
  std::uint64_t seed = 100;
  for (std::int64_t bs : {1, 7, 16, 32, 256}) {
    auto s = decode_spec(fmt::format("block-{}", bs), seed++);
    s.block_size = bs;
    s.seq_len_list = {1, std::max<std::int64_t>(1, bs - 1), bs, bs + 1, 511, 512, 513, 1000};
    s.num_seqs = static_cast<std::int64_t>(s.seq_len_list.size());
    // Partition 512: lengths 511/512/513 sit at the partition edge; the
    // threshold 512 sends the longer ones to split in auto.
    check_decode(s, "split:512:512");
    check_spec(s, {"auto"});  // the default plan
  }
}

TEST_CASE("decode: small partitions, partition +-1, contexts shorter than one partition") {
  auto s = decode_spec("partition-64", 7);
  s.seq_len_list = {1, 63, 64, 65, 127, 128, 129, 700};
  s.num_seqs = 8;
  check_spec(s, {"split", "auto"}, with_plan("split:64:64"));
  check_spec(s, {"split", "auto"}, with_plan("split:256:0"));  // threshold 0: auto splits everything
}

TEST_CASE("decode: auto around its threshold, capacity = threshold, threshold + 1, threshold + partition") {
  // Fused auto launches one partition row when no sequence can exceed the
  // threshold (capacity <= threshold) and the whole partition grid
  // otherwise; a batch whose longest sequence is threshold + 1 needs the
  // second row, and one of exactly the threshold must be attended whole.
  std::uint64_t seed = 300;
  for (std::int64_t longest : {100, 101, 164, 165}) {
    auto s = decode_spec(fmt::format("auto-threshold-{}", longest), seed++);
    s.seq_len_list = {1, 63, 64, 65, 99, 100, longest};
    s.num_seqs = static_cast<std::int64_t>(s.seq_len_list.size());
    check_spec(s, {"split", "auto"}, with_plan("split:64:100"));
  }
}

TEST_CASE("decode: every query and KV dtype") {
  std::uint64_t seed = 200;
  for (DType q : {DType::F32, DType::F16, DType::BF16}) {
    for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
      auto s = decode_spec(fmt::format("dtype-{}-{}", dtype_name(q), dtype_name(kv)), seed++);
      s.query_dtype = q;
      s.kv_dtype = kv;
      if (is_fp8(kv)) {
        s.k_scale = 0.5;
        s.v_scale = 2.0;
      }
      s.seq_len_list = {1, 17, 300, 777};
      s.num_seqs = 4;
      check_decode(s, "split:256:256");
    }
  }
}

TEST_CASE("decode: GQA 1, 4, 8 and MQA; head dims 64, 128, 256, 192/128") {
  const Geometry geometries[] = {
      {8, 8, 128, 128},   // MHA, GQA 1
      {8, 2, 128, 128},   // GQA 4
      {32, 4, 128, 128},  // GQA 8
      {8, 1, 128, 128},   // MQA
      {32, 8, 128, 128},  // the benchmark geometry
      {8, 2, 64, 64},     {8, 2, 256, 256}, {16, 2, 192, 128},
  };
  std::uint64_t seed = 300;
  for (const auto& g : geometries) {
    check_geometry(decode_spec(fmt::format("heads-{}-{}-d{}-{}", g.q_heads, g.kv_heads, g.head_dim, g.v_head_dim), seed++),
                   g);
  }
}

TEST_CASE("decode: sliding window edges, empty partitions, softcap, scale") {
  // Lengths at the window's edges; with partition 64 and window 100 most
  // partitions of the 1000-token sequence are empty.
  auto s = decode_spec("window-100", 400);
  s.sliding_window = 100;
  s.seq_len_list = {1, 99, 100, 101, 164, 1000};
  s.num_seqs = 6;
  check_decode(s, "split:64:64");
  check_spec(s, {"split"}, with_plan("split:512:0"));

  auto c = decode_spec("softcap-scale", 401);
  c.softcap = 30.0;
  c.scale = 0.3;
  c.profile = ValueProfile::LargeLogits;
  c.seq_len_list = {3, 257, 600};
  c.num_seqs = 3;
  check_decode(c, "split:128:128");
}

TEST_CASE("decode: HND layout, CSR table, LLM-like values") {
  auto s = decode_spec("hnd-csr", 500);
  s.layout = KvLayout::HND;
  s.table_form = TableForm::Csr;
  s.profile = ValueProfile::LlmLike;
  s.seq_len_list = {1, 33, 513, 2049};
  s.num_seqs = 4;
  check_decode(s, "split:512:512");
}

TEST_CASE("decode: a long context split into many partitions agrees with direct") {
  auto s = decode_spec("long", 600);
  s.q_heads = 32;
  s.kv_heads = 8;
  s.seq_len_list = {32768};
  s.num_seqs = 1;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  check_paths(*c, describe_spec(s), {"direct"});
  check_paths(*c, describe_spec(s), {"split"}, with_plan("split:512:512"));
  check_paths(*c, describe_spec(s), {"auto"});  // default plan: split at 1 x 32768
}

// ---- issue 23: attention sinks and ALiBi through direct, split and auto -------
// Sinks: the partitions leave the sink out and the merge adds it once; ALiBi:
// each key biased by slope * (key - (seq_len - 1)) (the CUDA-core loop takes
// ALiBi cases, the tensor-core loop none). Each check_paths run includes the
// harness's checks: unwritten elements, a bitwise repeat, and a CUDA graph
// replayed after the lengths and a page change.

namespace {

enum class Logit23 { Sinks, Alibi, Both };
const char* logit23_name(Logit23 f) { return f == Logit23::Sinks ? "sinks" : f == Logit23::Alibi ? "alibi" : "both"; }
void set_logit23(SyntheticSpec& s, Logit23 f) {
  s.sinks = f != Logit23::Alibi;
  s.alibi = f != Logit23::Sinks;
}

}  // namespace

TEST_CASE("decode: sinks, ALiBi and both, block sizes 1, 7, 16, 32 with lengths 1, block +-1, partition +-1") {
  std::uint64_t seed = 2300;
  for (Logit23 f : {Logit23::Sinks, Logit23::Alibi, Logit23::Both}) {
    for (std::int64_t bs : {1, 7, 16, 32}) {
      auto s = decode_spec(fmt::format("{}-block-{}", logit23_name(f), bs), seed++);
      set_logit23(s, f);
      s.block_size = bs;
      s.seq_len_list = {1, std::max<std::int64_t>(1, bs - 1), bs, bs + 1, 63, 64, 65, 129, 700};
      s.num_seqs = static_cast<std::int64_t>(s.seq_len_list.size());
      check_spec(s, {"direct"});
      // Partition 64: up to 11 partitions per sequence, each of which must
      // leave the sink to the merge; threshold 64 mixes whole and split
      // sequences in auto's one launch.
      check_spec(s, {"split", "auto"}, with_plan("split:64:64"));
      check_spec(s, {"auto"});  // the default plan
    }
  }
}

TEST_CASE("decode: sinks and ALiBi with a window that empties partitions, softcap, large logits") {
  std::uint64_t seed = 2400;
  for (Logit23 f : {Logit23::Sinks, Logit23::Alibi, Logit23::Both}) {
    // Window 100 with partition 64: most partitions of the 1000-token
    // sequence are empty; with a sink the merge still adds it exactly once
    // and an empty partition weighs 0, never NaN.
    auto w = decode_spec(fmt::format("{}-window-100", logit23_name(f)), seed++);
    set_logit23(w, f);
    w.sliding_window = 100;
    w.seq_len_list = {1, 99, 100, 101, 164, 1000};
    w.num_seqs = 6;
    check_decode(w, "split:64:64");
    check_spec(w, {"split"}, with_plan("split:512:0"));
    check_spec(w, {"auto"}, with_plan("split:64:0"));  // threshold 0: every sequence split

    auto c = decode_spec(fmt::format("{}-softcap", logit23_name(f)), seed++);
    set_logit23(c, f);
    c.softcap = 30.0;
    c.scale = 0.3;
    c.profile = ValueProfile::LargeLogits;
    c.seq_len_list = {1, 3, 257, 600};
    c.num_seqs = 4;
    check_decode(c, "split:128:128");

    auto l = decode_spec(fmt::format("{}-llm-like-hnd-csr", logit23_name(f)), seed++);
    set_logit23(l, f);
    l.profile = ValueProfile::LlmLike;
    l.layout = KvLayout::HND;
    l.table_form = TableForm::Csr;
    l.seq_len_list = {2, 33, 513, 2049};
    l.num_seqs = 4;
    check_decode(l, "split:512:512");
  }
}

TEST_CASE("decode: sinks and ALiBi over every KV dtype, GQA 1/4/8/MQA and head dims 64, 128, 256, 192/128") {
  // BF16/F16 and fp8 at d128/d256 take the tensor-core loop for sinks, the
  // CUDA-core loop for ALiBi; F32 and the other dims the CUDA-core loop.
  std::uint64_t seed = 2500;
  int variant = 0;
  for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
    for (Logit23 f : {Logit23::Sinks, Logit23::Alibi, Logit23::Both}) {
      auto s = decode_spec(fmt::format("{}-{}", logit23_name(f), dtype_name(kv)), seed++);
      set_logit23(s, f);
      s.kv_dtype = kv;
      s.query_dtype = variant++ % 2 ? DType::F16 : DType::BF16;
      s.head_dim = is_fp8(kv) ? 128 : 64;
      if (is_fp8(kv)) {
        s.k_scale = 0.5;
        s.v_scale = 2.0;
      }
      s.seq_len_list = {1, 17, 300, 777};
      s.num_seqs = 4;
      check_decode(s, "split:256:256");
    }
  }
  const Geometry geometries[] = {
      {8, 8, 128, 128}, {8, 2, 128, 128}, {32, 4, 128, 128}, {8, 1, 128, 128},
      {8, 2, 256, 256}, {16, 2, 192, 128}, {12, 3, 64, 64},  // 12 heads: ALiBi's slopes past a power of two
  };
  for (const auto& g : geometries) {
    for (Logit23 f : {Logit23::Sinks, Logit23::Alibi, Logit23::Both}) {
      auto s = decode_spec(
          fmt::format("{}-heads-{}-{}-d{}-{}", logit23_name(f), g.q_heads, g.kv_heads, g.head_dim, g.v_head_dim),
          seed++);
      set_logit23(s, f);
      check_geometry(s, g);
    }
  }
}

TEST_CASE("decode: sink logits far above and below the keys' (no overflow, LSE = the sink where it dominates)") {
  // Sinks of +-100 (base 2: +-144) would overflow a denominator that did not
  // take the sink into its max; +100 makes the output ~0 and the LSE ~100.
  auto s = decode_spec("sinks-extreme", 2600);
  s.sinks = true;
  s.seq_len_list = {1, 64, 65, 1000};
  s.num_seqs = 4;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  for (std::size_t h = 0; h < c->sinks.size(); ++h) c->sinks[h] = h % 2 ? 100.0f : -100.0f;
  auto ref = reference_attention(*c);
  REQUIRE(ref.ok());
  CHECK(ref->lse[1] == doctest::Approx(100.0).epsilon(1e-6));  // token 0, head 1
  check_paths(*c, describe_spec(s) + " (sinks +-100)", {"direct"});
  check_paths(*c, describe_spec(s) + " (sinks +-100)", {"split", "auto"}, with_plan("split:64:64"));
  // The generator's sinks with ALiBi, every sequence split into 64-key partitions.
  s.alibi = true;
  auto a = generate_case(s);
  REQUIRE(a.ok());
  check_paths(*a, describe_spec(s) + " (sinks, ALiBi)", {"split", "auto"}, with_plan("split:64:0"));
}

TEST_CASE("decode: a long context with sinks and ALiBi split into many partitions agrees with the reference") {
  auto s = decode_spec("long-sinks-alibi", 2700);
  s.q_heads = 32;
  s.kv_heads = 8;
  s.sinks = true;
  s.alibi = true;
  s.seq_len_list = {8192};
  s.num_seqs = 1;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  check_paths(*c, describe_spec(s), {"direct"});
  check_paths(*c, describe_spec(s), {"split"}, with_plan("split:512:512"));
  check_paths(*c, describe_spec(s), {"auto"});
}

TEST_CASE("decode paths and prefill take sinks and ALiBi; fmha reports the ALiBi n/a") {
  auto s = decode_spec("applicability-23", 2800);
  s.seq_len_list = {10, 20};
  s.num_seqs = 2;
  s.sinks = true;
  s.alibi = true;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  for (const char* name : {"direct", "split", "auto", "prefill"}) {
    const Applicability a = gpu_registry().find(name)->applies(*c);
    CHECK_MESSAGE(a.applies, name, ": ", a.reason);
  }
  const Applicability a = gpu_registry().find("fmha")->applies(*c);
  CHECK_FALSE(a.applies);
  CHECK_MESSAGE(a.reason.find("ALiBi") != std::string::npos, a.reason);
}

TEST_CASE("decode paths report n/a for a prefill case") {
  SyntheticSpec s;
  s.name = "prefill-for-decode";
  s.query_mode = QueryMode::Prefill;
  s.seq_len_dist = LengthDist::Fixed;
  s.seq_len_max = 20;
  s.num_seqs = 2;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  for (const char* name : {"direct", "split", "auto"}) {
    const Applicability a = gpu_registry().find(name)->applies(*c);
    CHECK_FALSE(a.applies);
    CHECK(a.reason.find("q_len") != std::string::npos);
  }
}

// ---- issue 21: a fixed plan is batch-invariant --------------------------------
// Under an explicit plan (and `--plan invariant`) each sequence's partitions
// follow its own length, so its output must be bitwise the same alone, in the
// batch, and in the batch permuted and padded. Soak (seed 1, cases 216 and
// 465) found the merge's thread groups sized by the batch's longest sequence:
// a 3-partition sequence beside an 8-partition one differed in the last bit.
TEST_CASE("decode: split and auto under a fixed plan are batch-invariant (the merge's groups follow the sequence)") {
  std::uint64_t seed = 2900;
  for (const DType q : {DType::F32, DType::BF16}) {
    for (const char* plan : {"split:32:100", "split:120:683", "invariant"}) {
      auto s = decode_spec(fmt::format("invariance-{}-{}", dtype_name(q), plan), seed++);
      s.query_dtype = q;
      s.kv_dtype = q == DType::F32 ? DType::F8_E4M3 : DType::BF16;
      // Partition counts 1 .. 160 under split:32: merge groups 1, 2 and 4.
      s.seq_len_list = {289, 841, 100, 5000, 33, 2100};
      s.num_seqs = static_cast<std::int64_t>(s.seq_len_list.size());
      auto c = generate_case(s);
      REQUIRE(c.ok());
      const RunOptions options = with_plan(plan);
      RunOptions quick = options;
      quick.checks = false;
      for (const char* name : {"split", "auto"}) {
        INFO(describe_spec(s) << " plan " << plan << " path " << name);
        Path* path = gpu_registry().find(name);
        REQUIRE(path != nullptr);
        auto full = path->run(*c, quick);
        REQUIRE_MESSAGE(full.ok(), (full.ok() ? "" : full.error().describe()));
        const BatchOutput full_output{full->output, full->lse};
        auto result = check_batch_invariance(
            *c, full_output, [&](const Case& variant, std::string& why) -> Expected<std::optional<BatchOutput>> {
              const Applicability a = path->applies(variant);
              if (!a.applies) {
                why = a.reason;
                return std::optional<BatchOutput>{};
              }
              auto run = path->run(variant, quick);
              if (!run.ok()) return run.error();
              return std::optional<BatchOutput>{BatchOutput{run->output, run->lse}};
            });
        REQUIRE_MESSAGE(result.ok(), (result.ok() ? "" : result.error().describe()));
        CHECK(result->variants_skipped.empty());
        CHECK(result->variants_run >= 2);
        CHECK_MESSAGE(result->invariant, (result->first ? result->first->describe() : std::string()));
      }
    }
  }
}

TEST_CASE("decode: head sizes 32, 80, 96, 112, 120 over every KV dtype, GQA 4/8, block 7, sinks and ALiBi") {
  // Issue 23's head sizes run the CUDA-core loop; 80, 112 and 120 pad a
  // token's last load vectors (their lanes load zeros and store nothing)
  // and the merge's last warp of a row (threads past the row's dims).
  std::uint64_t seed = 3300;
  for (std::int64_t d : {32, 80, 96, 112, 120}) {
    for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
      auto s = decode_spec(fmt::format("d{}-{}", d, dtype_name(kv)), seed++);
      s.head_dim = d;
      s.kv_dtype = kv;
      s.query_dtype = seed % 2 ? DType::F16 : DType::BF16;
      if (is_fp8(kv)) {
        s.k_scale = 0.5;
        s.v_scale = 2.0;
      }
      s.seq_len_list = {1, 17, 300, 777};
      s.num_seqs = 4;
      check_decode(s, "split:256:256");
    }
    // GQA 8 (two head tiles), pages of 7 slots, 64-token partitions (many
    // per sequence), the sinks and ALiBi together.
    auto s = decode_spec(fmt::format("d{}-gqa8-block7-both", d), seed++);
    s.head_dim = d;
    s.q_heads = 32;
    s.kv_heads = 4;
    s.block_size = 7;
    set_logit23(s, Logit23::Both);
    s.seq_len_list = {1, 6, 7, 8, 64, 65, 700};
    s.num_seqs = 7;
    check_decode(s, "split:64:64");
    auto h = decode_spec(fmt::format("d{}-hnd-csr-sinks", d), seed++);
    h.head_dim = d;
    h.layout = KvLayout::HND;
    h.table_form = TableForm::Csr;
    h.sinks = true;
    h.seq_len_list = {33, 1030};
    h.num_seqs = 2;
    check_decode(h, "split:512:512");
  }
}

namespace {
// A latent (MLA) decode case as DeepSeek's models serve it: rows of 576
// columns (V the first 512), one KV head, NHD, scale 1/sqrt(192).
SyntheticSpec mla_spec(std::string name, std::uint64_t seed, std::int64_t q_heads, std::int64_t block_size) {
  auto s = decode_spec(std::move(name), seed);
  s.latent = true;
  s.head_dim = 576;
  s.v_head_dim = 512;
  s.q_heads = q_heads;
  s.kv_heads = 1;
  s.block_size = block_size;
  s.layout = KvLayout::NHD;
  s.scale = 1.0 / std::sqrt(192.0);
  return s;
}
}  // namespace

TEST_CASE("decode: latent (MLA) caches, 576/512 over one KV head, every KV dtype, block 64 and 7, 16 and 128 heads") {
  // V is the first 512 of K's 576 columns. The CUDA-core loop takes these
  // (F32, fp8, and F16 caches under a BF16 query); the BF16 cases take the
  // wgmma kernel on compute capability 9.0, like the test below.
  std::uint64_t seed = 3500;
  for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
    auto s = mla_spec(fmt::format("mla-{}", dtype_name(kv)), seed++, 16, 64);
    s.kv_dtype = kv;
    if (is_fp8(kv)) {
      s.k_scale = 0.5;
      s.v_scale = 2.0;
    }
    s.seq_len_list = {1, 63, 64, 65, 700};
    s.num_seqs = 5;
    check_decode(s, "split:256:256");
  }
  auto s = mla_spec("mla-128-heads-block7-sinks", seed++, 128, 7);
  s.sinks = true;
  s.table_form = TableForm::Csr;
  s.seq_len_list = {5, 300};
  s.num_seqs = 2;
  check_decode(s, "split:64:64");
}

TEST_CASE("decode: latent (MLA) caches on the wgmma kernel: 16-bit query and cache, 16 to 192 heads, blocks 1 to 256") {
  // On a compute capability 9.0 device a BF16/F16 latent cache with a query
  // of its dtype takes decode_mla_sm90.cu (64-head tiles, 64-key stages);
  // elsewhere the CUDA-core loop. Lengths at the 64-key stage edges and the
  // partition edges, head counts below, at and past one tile, a window
  // that empties partitions, sinks, both table forms, every plan kind.
  std::uint64_t seed = 3600;
  struct Variant {
    DType dtype;
    std::int64_t heads, block;
    bool sinks, csr;
    std::int64_t window;
  };
  for (const Variant& v : {Variant{DType::BF16, 16, 64, false, false, 0}, Variant{DType::F16, 128, 1, true, true, 0},
                           Variant{DType::BF16, 192, 256, false, true, 0}, Variant{DType::F16, 64, 7, true, false, 100},
                           Variant{DType::BF16, 128, 32, false, false, 70}}) {
    auto s = mla_spec(fmt::format("mla-wgmma-{}-{}h-b{}", dtype_name(v.dtype), v.heads, v.block), seed++, v.heads,
                      v.block);
    s.kv_dtype = v.dtype;
    s.query_dtype = v.dtype;
    s.sinks = v.sinks;
    s.sliding_window = v.window;
    if (v.csr) s.table_form = TableForm::Csr;
    s.seq_len_list = {1, 63, 64, 65, 129, 257, 1000};
    s.num_seqs = static_cast<std::int64_t>(s.seq_len_list.size());
    check_decode(s, "split:128:256");
  }
  // Large logits (the shared max of the two warpgroups' keys) and an
  // explicit scale.
  auto s = mla_spec("mla-wgmma-large-logits", seed++, 128, 64);
  s.profile = ValueProfile::LargeLogits;
  s.scale = 0.3;
  s.seq_len_list = {100, 2000};
  s.num_seqs = 2;
  check_decode(s, "split:512:512");
}
