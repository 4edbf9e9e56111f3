// Decode sweeps of issue 3 through direct, split and auto, each against the
// CPU reference with the harness's checks (unwritten elements, bitwise
// repeatability, graph replay with changed tables).
#include <doctest/doctest.h>

#include "gpu_test_util.hpp"

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
    check_spec(s, {"direct"});
    check_spec(s, {"split", "auto"}, with_plan("split:512:512"));
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
      check_spec(s, {"direct"});
      check_spec(s, {"split", "auto"}, with_plan("split:256:256"));
    }
  }
}

TEST_CASE("decode: GQA 1, 4, 8 and MQA; head dims 64, 128, 256, 192/128") {
  struct Geometry {
    std::int64_t q_heads, kv_heads, head_dim, v_head_dim;
  };
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
    auto s = decode_spec(fmt::format("heads-{}-{}-d{}-{}", g.q_heads, g.kv_heads, g.head_dim, g.v_head_dim), seed++);
    s.q_heads = g.q_heads;
    s.kv_heads = g.kv_heads;
    s.head_dim = g.head_dim;
    s.v_head_dim = g.v_head_dim;
    s.seq_len_list = {5, 129, 1030};
    s.num_seqs = 3;
    check_spec(s, {"direct"});
    check_spec(s, {"split", "auto"}, with_plan("split:512:512"));
  }
}

TEST_CASE("decode: sliding window edges, empty partitions, softcap, scale") {
  // Lengths at the window's edges; with partition 64 and window 100 most
  // partitions of the 1000-token sequence are empty.
  auto s = decode_spec("window-100", 400);
  s.sliding_window = 100;
  s.seq_len_list = {1, 99, 100, 101, 164, 1000};
  s.num_seqs = 6;
  check_spec(s, {"direct"});
  check_spec(s, {"split", "auto"}, with_plan("split:64:64"));
  check_spec(s, {"split"}, with_plan("split:512:0"));

  auto c = decode_spec("softcap-scale", 401);
  c.softcap = 30.0;
  c.scale = 0.3;
  c.profile = ValueProfile::LargeLogits;
  c.seq_len_list = {3, 257, 600};
  c.num_seqs = 3;
  check_spec(c, {"direct"});
  check_spec(c, {"split", "auto"}, with_plan("split:128:128"));
}

TEST_CASE("decode: HND layout, CSR table, LLM-like values") {
  auto s = decode_spec("hnd-csr", 500);
  s.layout = KvLayout::HND;
  s.table_form = TableForm::Csr;
  s.profile = ValueProfile::LlmLike;
  s.seq_len_list = {1, 33, 513, 2049};
  s.num_seqs = 4;
  check_spec(s, {"direct"});
  check_spec(s, {"split", "auto"}, with_plan("split:512:512"));
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
