// The benchmark shapes of `pagecheck bench` are only generated on a GPU
// machine; check here, without allocating them, that the generator accepts
// every one and that they are the shapes the issues name.
#include <doctest/doctest.h>

#include <set>

#include "specs.hpp"
#include "pagecheck/synthetic.hpp"

using namespace pagecheck;

TEST_CASE("every bench shape is a spec the generator accepts") {
  const auto specs = app::bench_specs("all", 1);
  REQUIRE(specs.size() == 8);  // 4 decode, 3 prefill, 1 chunked
  std::set<std::string> names;
  for (const auto& spec : specs) {
    INFO("bench shape ", spec.name);
    const Status accepted = check_synthetic_spec(spec);
    CHECK_MESSAGE(accepted.ok(), (accepted.ok() ? std::string() : accepted.error().describe()));
    CHECK(spec.q_heads == 32);
    CHECK(spec.kv_heads == 8);
    CHECK(spec.head_dim == 128);
    CHECK(spec.block_size == 16);
    CHECK(spec.kv_dtype == DType::BF16);
    CHECK(spec.query_dtype == DType::BF16);
    names.insert(spec.name);
  }
  CHECK(names.size() == specs.size());
  CHECK(app::bench_specs("decode", 1).size() == 4);
  CHECK(app::bench_specs("prefill", 1).size() == 4);
}

TEST_CASE("bench variants change every shape and say so in its name") {
  app::BenchVariant v;
  v.block_size = 64;
  v.head_dim = 256;
  v.kv_dtype = "F8_E4M3";
  const auto specs = app::bench_specs("prefill", 1, v);
  REQUIRE(specs.size() == 4);
  for (const auto& spec : specs) {
    INFO("bench shape ", spec.name);
    CHECK(spec.block_size == 64);
    CHECK(spec.head_dim == 256);
    CHECK(spec.kv_dtype == DType::F8_E4M3);
    CHECK(spec.name.find("-b64-d256-F8_E4M3") != std::string::npos);
    CHECK(check_synthetic_spec(spec).ok());
  }
  // The defaults keep the served shapes' names.
  CHECK(app::bench_specs("prefill", 1, app::BenchVariant{}).front().name == "prefill-8x2048");
  app::BenchVariant odd;
  odd.block_size = 1;
  CHECK(app::bench_specs("decode", 1, odd).front().name == "decode-64x4096-b1");
}

TEST_CASE("check_synthetic_spec refuses what generate_case refuses") {
  auto spec = app::bench_specs("decode", 1).front();
  spec.pool_factor = 1;  // the bug that once made every bench shape invalid
  CHECK_FALSE(check_synthetic_spec(spec).ok());
  spec.pool_factor = 3;
  spec.q_heads = 6;  // not a multiple of kv_heads
  CHECK_FALSE(check_synthetic_spec(spec).ok());
}
