// Prefill and gather + FMHA sweeps of issue 4, against the CPU reference with
// the harness's checks. fmha applies to BF16 K/V with head dim 128 only.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "gpu_test_util.hpp"

using namespace pagecheck;
using namespace pagecheck::test;

namespace {

SyntheticSpec chunk_spec(std::string name, std::uint64_t seed) {
  SyntheticSpec s;
  s.name = std::move(name);
  s.seed = seed;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.block_size = 16;
  s.query_mode = QueryMode::Chunked;
  s.seq_len_dist = LengthDist::List;
  s.q_len_dist = LengthDist::List;
  return s;
}

}  // namespace

TEST_CASE("prefill and fmha: q_len 1, 2, 17, 64, 127, 577 over kv lengths 54, 97, 512, 2048; blocks 1, 7, 16") {
  std::uint64_t seed = 1000;
  for (std::int64_t bs : {1, 7, 16}) {
    for (std::int64_t q : {1, 2, 17, 64, 127, 577}) {
      auto s = chunk_spec(fmt::format("q{}-block{}", q, bs), seed++);
      s.block_size = bs;
      s.seq_len_list = {54, 97, 512, 2048};
      s.q_len_list = {q};  // clamped to each sequence's length
      s.num_seqs = 4;
      check_spec(s, {"prefill", "fmha"});
    }
  }
}

TEST_CASE("prefill: whole prompts (q_len = seq_len) and a mixed prefill/decode batch") {
  auto s = chunk_spec("whole-prompts", 1100);
  s.query_mode = QueryMode::Prefill;
  s.seq_len_list = {1, 54, 97, 300};
  s.num_seqs = 4;
  check_spec(s, {"prefill", "fmha"});

  auto m = chunk_spec("mixed", 1101);
  m.query_mode = QueryMode::Mixed;
  m.seq_len_list = {40, 700, 97, 2048, 5};
  m.q_len_list = {33, 200};
  m.num_seqs = 5;
  check_spec(m, {"prefill", "fmha"});
}

TEST_CASE("prefill: sliding windows at their edges, softcap, non-causal") {
  std::uint64_t seed = 1200;
  for (std::int64_t window : {1, 53, 54, 55, 96, 128}) {
    auto s = chunk_spec(fmt::format("window-{}", window), seed++);
    s.sliding_window = window;
    s.seq_len_list = {54, 97, 512};
    s.q_len_list = {17, 64, 127};
    s.num_seqs = 3;
    check_spec(s, {"prefill", "fmha"});
  }
  auto c = chunk_spec("softcap", seed++);
  c.softcap = 30;
  c.profile = ValueProfile::LargeLogits;
  c.seq_len_list = {97, 512};
  c.q_len_list = {64};
  c.num_seqs = 2;
  check_spec(c, {"prefill", "fmha"});

  auto n = chunk_spec("noncausal", seed++);
  n.causal = false;
  n.seq_len_list = {54, 300};
  n.q_len_list = {17, 64};
  n.num_seqs = 2;
  check_spec(n, {"prefill", "fmha"});
}

TEST_CASE("prefill: every dtype, head dims 64, 256, 192/128, GQA 1/8 and MQA") {
  std::uint64_t seed = 1300;
  for (DType q : {DType::F32, DType::F16, DType::BF16}) {
    for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
      auto s = chunk_spec(fmt::format("dtype-{}-{}", dtype_name(q), dtype_name(kv)), seed++);
      s.query_dtype = q;
      s.kv_dtype = kv;
      if (is_fp8(kv)) {
        s.k_scale = 0.5;
        s.v_scale = 2.0;
      }
      s.seq_len_list = {54, 300};
      s.q_len_list = {17, 64};
      s.num_seqs = 2;
      check_spec(s, {"prefill"});
    }
  }
  struct Geometry {
    std::int64_t q_heads, kv_heads, head_dim, v_head_dim;
  };
  // Groups 1, 2, 4, 8, 32: the warp-specialised kernel stores a warp's 16
  // output rows by tensor copies where the group divides 16 (and the rows are
  // whole), by per-lane stores otherwise (group 32, partial tiles).
  const Geometry geometries[] = {{8, 8, 128, 128}, {32, 4, 128, 128}, {8, 1, 128, 128}, {16, 8, 128, 128},
                                 {32, 1, 128, 128}, {8, 2, 64, 64},   {8, 2, 256, 256}, {16, 2, 192, 128}};
  for (const auto& g : geometries) {
    auto s = chunk_spec(fmt::format("heads-{}-{}-d{}-{}", g.q_heads, g.kv_heads, g.head_dim, g.v_head_dim), seed++);
    s.q_heads = g.q_heads;
    s.kv_heads = g.kv_heads;
    s.head_dim = g.head_dim;
    s.v_head_dim = g.v_head_dim;
    s.seq_len_list = {97, 512};
    s.q_len_list = {17, 127};
    s.num_seqs = 2;
    std::vector<std::string> paths = {"prefill"};
    if (g.head_dim == 128 && g.v_head_dim == 128) paths.push_back("fmha");
    check_spec(s, paths);
  }
}

TEST_CASE("prefill and fmha: attention sinks through every prefill kernel, with windows, softcap and huge sinks") {
  // The sink joins each row's max and sum in the kernels' epilogues
  // (add_sink_row): BF16/F16 at d128 and BF16 at d64 take the
  // warp-specialised kernel on sm_90a, fp8 too (PAGECHECK_WS_FP8=0: the
  // older wgmma kernel), d256 the mma.sync kernel, F32 the CUDA-core one
  // (PAGECHECK_ATTN_KERNEL=wgmma / mma choose others).
  std::uint64_t seed = 3100;
  struct Kernel {
    DType kv;
    std::int64_t dim;
  };
  for (const Kernel& k : {Kernel{DType::BF16, 128}, Kernel{DType::F16, 128}, Kernel{DType::F8_E4M3, 128},
                          Kernel{DType::BF16, 64}, Kernel{DType::BF16, 256}, Kernel{DType::F32, 128}}) {
    const std::vector<std::string> paths =
        k.kv == DType::BF16 && k.dim == 128 ? std::vector<std::string>{"prefill", "fmha"}
                                            : std::vector<std::string>{"prefill"};
    auto s = chunk_spec(fmt::format("sinks-{}-d{}", dtype_name(k.kv), k.dim), seed++);
    s.kv_dtype = k.kv;
    s.head_dim = s.v_head_dim = k.dim;
    s.sinks = true;
    s.query_mode = QueryMode::Mixed;  // decode rows (one token) beside chunks
    s.seq_len_list = {1, 54, 300, 1000};
    s.q_len_list = {1, 17, 130};
    s.num_seqs = 4;
    check_spec(s, paths);

    // A window and a softcap over the large-logits profile: sinks of
    // -200 .. 600 beside logits capped at 30, rows whose output is
    // nearly all the sink's (1e-250: written as 0).
    auto w = chunk_spec(fmt::format("sinks-window-softcap-{}-d{}", dtype_name(k.kv), k.dim), seed++);
    w.kv_dtype = k.kv;
    w.head_dim = w.v_head_dim = k.dim;
    w.sinks = true;
    w.sliding_window = 55;
    w.softcap = 30.0;
    w.profile = ValueProfile::LargeLogits;
    w.seq_len_list = {97, 512};
    w.q_len_list = {64, 17};
    w.num_seqs = 2;
    check_spec(w, paths);
  }
  // Sinks of +-100 by head (the LSE is the sink where it dominates) and a
  // whole prompt of one token.
  auto e = chunk_spec("sinks-extreme", seed++);
  e.sinks = true;
  e.query_mode = QueryMode::Prefill;
  e.seq_len_list = {1, 64, 129};
  e.num_seqs = 3;
  auto c = generate_case(e);
  REQUIRE(c.ok());
  for (std::size_t h = 0; h < c->sinks.size(); ++h) c->sinks[h] = h % 2 ? 100.0f : -100.0f;
  check_paths(*c, describe_spec(e) + " (sinks +-100)", {"prefill", "fmha"});
}

TEST_CASE("prefill: ALiBi on the CUDA-core kernel over every cache dtype and head dim, with sinks, windows, softcap") {
  // logit += slope * (key position - query position): every query token at
  // its own position, so chunks and whole prompts both test the distance.
  std::uint64_t seed = 3200;
  for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
    auto s = chunk_spec(fmt::format("alibi-{}", dtype_name(kv)), seed++);
    s.kv_dtype = kv;
    s.alibi = true;
    s.sinks = kv == DType::BF16;
    if (is_fp8(kv)) {
      s.k_scale = 0.5;
      s.v_scale = 2.0;
    }
    s.query_mode = QueryMode::Mixed;
    s.seq_len_list = {1, 54, 300};
    s.q_len_list = {1, 17, 64};
    s.num_seqs = 3;
    check_spec(s, {"prefill"});
  }
  struct Dims {
    std::int64_t dk, dv;
  };
  for (const Dims& d : {Dims{64, 64}, Dims{256, 256}, Dims{192, 128}}) {
    auto s = chunk_spec(fmt::format("alibi-d{}-{}-window-softcap", d.dk, d.dv), seed++);
    s.head_dim = d.dk;
    s.v_head_dim = d.dv;
    s.alibi = true;
    s.sliding_window = 40;
    s.softcap = 20.0;
    s.seq_len_list = {97, 200};
    s.q_len_list = {33, 97};
    s.num_seqs = 2;
    check_spec(s, {"prefill"});
  }
  auto w = chunk_spec("alibi-whole-prompts-noncausal", seed++);
  w.alibi = true;
  w.causal = false;
  w.query_mode = QueryMode::Prefill;
  w.seq_len_list = {1, 70, 129};
  w.num_seqs = 3;
  check_spec(w, {"prefill"});
}

TEST_CASE("prefill: head sizes 32, 80, 96, 112, 120 over every cache dtype, windows, softcap, sinks, ALiBi") {
  // Issue 23's head sizes run the CUDA-core kernel for every cache dtype;
  // 80, 112 and 120 leave the last lanes' last dim empty.
  std::uint64_t seed = 3400;
  for (std::int64_t d : {32, 80, 96, 112, 120}) {
    for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
      auto s = chunk_spec(fmt::format("d{}-{}", d, dtype_name(kv)), seed++);
      s.head_dim = d;
      s.kv_dtype = kv;
      if (is_fp8(kv)) {
        s.k_scale = 0.5;
        s.v_scale = 2.0;
      }
      s.query_mode = QueryMode::Mixed;
      s.seq_len_list = {1, 54, 300};
      s.q_len_list = {1, 17, 64};
      s.num_seqs = 3;
      check_spec(s, {"prefill"});
    }
    auto w = chunk_spec(fmt::format("d{}-window-softcap-sinks-alibi-block7", d), seed++);
    w.head_dim = d;
    w.block_size = 7;
    w.sliding_window = 40;
    w.softcap = 20.0;
    w.sinks = true;
    w.alibi = d != 96;  // 96: the sinks alone
    w.seq_len_list = {97, 200};
    w.q_len_list = {33, 97};
    w.num_seqs = 2;
    check_spec(w, {"prefill"});
  }
}

TEST_CASE("fmha reports n/a outside BF16 K/V with head dim 128") {
  auto s = chunk_spec("fmha-na", 1400);
  s.kv_dtype = DType::F16;
  s.seq_len_list = {54};
  s.q_len_list = {4};
  s.num_seqs = 1;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  CHECK_FALSE(gpu_registry().find("fmha")->applies(*c).applies);
  s.kv_dtype = DType::BF16;
  s.head_dim = 64;
  auto d = generate_case(s);
  REQUIRE(d.ok());
  CHECK_FALSE(gpu_registry().find("fmha")->applies(*d).applies);
}

// The Hopper kernel (attn_sm90.cu) tiles 128 query rows (two warpgroups of
// 64) against 128 keys; these cases sit on those edges. On other devices they
// run the portable kernel and check it the same way. The ctest entry
// test_gpu_prefill_mma runs this whole file again with PAGECHECK_ATTN_KERNEL=mma,
// so an H200 checks both kernels.
TEST_CASE("prefill and fmha on 128-row / 128-key tile edges") {
  std::uint64_t seed = 1500;
  for (std::int64_t q_heads : {8, 32}) {  // group 4 (32 tokens per tile) and 16 (8 tokens)
    auto s = chunk_spec(fmt::format("tile-edges-h{}", q_heads), seed++);
    s.q_heads = q_heads;
    s.kv_heads = 2;
    s.seq_len_list = {127, 128, 129, 255, 256, 257, 1};
    s.q_len_list = {31, 32, 33, 64, 65, 128, 129};
    s.num_seqs = 7;
    check_spec(s, {"prefill", "fmha"});
  }
  for (std::int64_t window : {127, 128, 129, 255, 256}) {
    auto s = chunk_spec(fmt::format("tile-window-{}", window), seed++);
    s.sliding_window = window;
    s.block_size = 7;
    s.seq_len_list = {300, 513};
    s.q_len_list = {200, 300};
    s.num_seqs = 2;
    check_spec(s, {"prefill", "fmha"});
  }
  for (DType kv : {DType::F16, DType::F8_E4M3, DType::F8_E5M2}) {
    auto s = chunk_spec(fmt::format("tile-dtype-{}", dtype_name(kv)), seed++);
    s.kv_dtype = kv;
    s.query_dtype = kv == DType::F16 ? DType::F16 : DType::F32;
    if (is_fp8(kv)) {
      s.k_scale = 0.25;
      s.v_scale = 4.0;
    }
    s.layout = KvLayout::HND;
    s.seq_len_list = {129, 400};
    s.q_len_list = {129, 77};
    s.num_seqs = 2;
    check_spec(s, {"prefill"});
  }
}

// Which kernel ran is reported in the plan; on a compute capability 9.0
// device an sm_90a build must take the wgmma kernel for BF16 head dim 128
// (unless PAGECHECK_ATTN_KERNEL=mma), and the portable one elsewhere.
TEST_CASE("prefill and fmha report the kernel they ran; Hopper takes wgmma") {
  int device = 0;
  cudaDeviceProp props{};
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaGetDeviceProperties(&props, device) == cudaSuccess);
  const char* force = std::getenv("PAGECHECK_ATTN_KERNEL");
  bool expect_wgmma = props.major == 9 && props.minor == 0 && !(force != nullptr && std::string(force) == "mma");
#ifndef PAGECHECK_HAVE_SM90A
  expect_wgmma = false;
#endif
  // BF16 head dim 128 takes the warp-specialised kernel unless the first
  // sm_90a kernel is asked for.
  const bool expect_ws = expect_wgmma && !(force != nullptr && std::string(force) == "wgmma");
  auto s = chunk_spec("kernel-choice", 1600);
  s.seq_len_list = {200};
  s.q_len_list = {70};
  s.num_seqs = 1;
  auto c = generate_case(s);
  REQUIRE(c.ok());
  for (const char* name : {"prefill", "fmha"}) {
    INFO("path " << name << ", device " << props.name << " cc " << props.major << "." << props.minor);
    auto run = gpu_registry().find(name)->run(*c, correctness_options());
    REQUIRE(run.ok());
    const bool ran_wgmma = run->plan.find("wgmma") != std::string::npos;
    CHECK(ran_wgmma == expect_wgmma);
    CHECK((run->plan.find("wgmma-ws") != std::string::npos) == expect_ws);
    CHECK((ran_wgmma || run->plan.find("mma.sync") != std::string::npos));
  }
  // F32 K/V always runs on CUDA cores.
  s.kv_dtype = DType::F32;
  s.query_dtype = DType::F32;
  auto f = generate_case(s);
  REQUIRE(f.ok());
  auto run = gpu_registry().find("prefill")->run(*f, correctness_options());
  REQUIRE(run.ok());
  CHECK(run->plan.find("f32") != std::string::npos);
}

// An F32 or F16 query over BF16/fp8 operands is split into hi + lo parts
// (AttnParams::split_query): one rounded query moved logits in the hundreds
// by tenths and failed the covering suite's large-logits cases.
TEST_CASE("prefill and fmha keep an F32 or F16 query's precision over 16-bit and fp8 caches (logits in the hundreds)") {
  std::uint64_t seed = 7100;
  for (DType q : {DType::F32, DType::F16}) {
    for (DType kv : {DType::BF16, DType::F16, DType::F8_E4M3}) {
      for (std::int64_t d : {64, 128}) {
        auto s = chunk_spec(fmt::format("split-q{}-kv{}-d{}", dtype_name(q), dtype_name(kv), d), seed++);
        s.query_dtype = q;
        s.kv_dtype = kv;
        s.head_dim = d;
        s.profile = ValueProfile::LargeLogits;
        if (is_fp8(kv)) {
          s.k_scale = 0.25;
          s.v_scale = 0.02;
        }
        s.seq_len_list = {130, 300};
        s.q_len_list = {70, 129};
        if (kv == DType::BF16 && d == 128) check_spec(s, {"prefill", "fmha"});
        else check_spec(s, {"prefill"});
      }
    }
  }
}
