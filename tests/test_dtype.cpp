#include <doctest/doctest.h>

#include <cmath>

#include "pagecheck/dtype.hpp"

using namespace pagecheck;

TEST_CASE("fp8 e4m3 decodes the OCP fn encoding") {
  CHECK(fp8_e4m3_to_float(0x7E) == 448.0f);      // max finite
  CHECK(std::isnan(fp8_e4m3_to_float(0x7F)));    // S.1111.111
  CHECK(fp8_e4m3_to_float(0x38) == 1.0f);
  CHECK(fp8_e4m3_to_float(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(fp8_e4m3_to_float(0xB8) == -1.0f);
}

TEST_CASE("fp8 e5m2 decodes IEEE-like values") {
  CHECK(fp8_e5m2_to_float(0x7B) == 57344.0f);
  CHECK(std::isinf(fp8_e5m2_to_float(0x7C)));
  CHECK(fp8_e5m2_to_float(0x3C) == 1.0f);
}

TEST_CASE("fp8 encoding round-trips every finite code and saturates") {
  for (int code = 0; code < 256; ++code) {
    const float v = fp8_e4m3_to_float(static_cast<std::uint8_t>(code));
    if (std::isnan(v) || v == 0.0f) continue;
    CHECK(float_to_fp8_e4m3(v) == code);
  }
  for (int code = 0; code < 256; ++code) {
    const float v = fp8_e5m2_to_float(static_cast<std::uint8_t>(code));
    if (!std::isfinite(v) || v == 0.0f) continue;
    CHECK(float_to_fp8_e5m2(v) == code);
  }
  CHECK(fp8_e4m3_to_float(float_to_fp8_e4m3(1e6f)) == 448.0f);
  CHECK(fp8_e4m3_to_float(float_to_fp8_e4m3(-1e6f)) == -448.0f);
  // Ties go to even: 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39).
  CHECK(float_to_fp8_e4m3(1.0625f) == 0x38);
}

TEST_CASE("bf16 and f16 conversions go through Eigen's types") {
  CHECK(bf16_to_float(float_to_bf16(1.5f)) == 1.5f);
  CHECK(f16_to_float(float_to_f16(-2.25f)) == -2.25f);
  CHECK(parse_dtype("F8_E4M3") == DType::F8_E4M3);
  CHECK(!parse_dtype("F8_E4M3FNUZ").has_value());
  CHECK(dtype_size(DType::BF16) == 2);
}
