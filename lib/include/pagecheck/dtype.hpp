// Element types of case files (safetensors dtype names) and host conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pagecheck {

enum class DType : std::uint8_t {
  F64,
  F32,
  F16,
  BF16,
  F8_E4M3,  // OCP E4M3 "fn": no infinities, max 448, NaN = S.1111.111
  F8_E5M2,  // OCP E5M2: IEEE-like, max 57344, has infinities
  I64,
  I32,
  U8,
  BOOL,
};

// safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);
// Parses the safetensors spelling; nullopt for anything not listed above.
std::optional<DType> parse_dtype(std::string_view name);
std::size_t dtype_size(DType dtype);
bool is_float_dtype(DType dtype);
bool is_fp8(DType dtype);

// Scalar conversions (round to nearest even, saturating for fp8 as the
// hardware's satfinite conversions do; NaN stays NaN).
float fp8_e4m3_to_float(std::uint8_t bits);
float fp8_e5m2_to_float(std::uint8_t bits);
std::uint8_t float_to_fp8_e4m3(float value);
std::uint8_t float_to_fp8_e5m2(float value);
float bf16_to_float(std::uint16_t bits);
float f16_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float value);
std::uint16_t float_to_f16(float value);

// Element `index` of a buffer of `dtype`, widened to double. Float dtypes and
// integers only.
double load_element(DType dtype, const std::byte* data, std::size_t index);
// Stores `value` rounded to `dtype` at element `index`.
void store_element(DType dtype, std::byte* data, std::size_t index, double value);

}  // namespace pagecheck
