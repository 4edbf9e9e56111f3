#include "pagecheck/dtype.hpp"

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "pagecheck/status.hpp"

namespace pagecheck {

int exit_code_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::Usage: return exit_code::kUsage;
    case ErrorCode::InvalidInput: return exit_code::kInvalidInput;
    case ErrorCode::Runtime: return exit_code::kRuntime;
  }
  return exit_code::kRuntime;
}

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},       {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::I64, "I64", 8},         {DType::I32, "I32", 4},         {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};
}  // namespace

std::string_view dtype_name(DType dtype) {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info.name;
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& info : kDTypes)
    if (info.name == name) return info.dtype;
  return std::nullopt;
}

std::size_t dtype_size(DType dtype) {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info.size;
  return 0;
}

bool is_float_dtype(DType dtype) {
  switch (dtype) {
    case DType::F64: case DType::F32: case DType::F16: case DType::BF16:
    case DType::F8_E4M3: case DType::F8_E5M2: return true;
    default: return false;
  }
}

bool is_fp8(DType dtype) { return dtype == DType::F8_E4M3 || dtype == DType::F8_E5M2; }

// --- fp8 ------------------------------------------------------------------
// A minifloat with `exponent_bits` and `mantissa_bits`, bias 2^(e-1)-1.
namespace {
float decode_minifloat(std::uint8_t bits, int exponent_bits, int mantissa_bits, bool has_inf) {
  const int sign = bits >> 7;
  const int exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int max_exponent = (1 << exponent_bits) - 1;
  float magnitude;
  if (has_inf && exponent == max_exponent) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::quiet_NaN();
  } else if (!has_inf && exponent == max_exponent && mantissa == (1 << mantissa_bits) - 1) {
    magnitude = std::numeric_limits<float>::quiet_NaN();  // E4M3fn: only S.1111.111 is NaN
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa + (1 << mantissa_bits)),
                           exponent - bias - mantissa_bits);
  }
  return sign ? -magnitude : magnitude;
}

// Round-to-nearest-even encoding by search over the 128 non-negative codes: the
// codes are monotonic in value, so a binary search finds the neighbours.
std::uint8_t encode_minifloat(float value, int exponent_bits, int mantissa_bits, bool has_inf) {
  const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return has_inf ? 0x7F : 0x7F;  // E5M2 0x7F is NaN too
  const float magnitude = std::fabs(value);
  // Largest finite code.
  const std::uint8_t max_code = has_inf ? static_cast<std::uint8_t>(((1 << exponent_bits) - 2) << mantissa_bits |
                                                                    ((1 << mantissa_bits) - 1))
                                        : 0x7E;
  const float max_finite = decode_minifloat(max_code, exponent_bits, mantissa_bits, has_inf);
  if (magnitude >= max_finite) return sign | max_code;  // saturate (satfinite)
  std::uint8_t lo = 0, hi = max_code;
  while (hi - lo > 1) {
    const std::uint8_t mid = static_cast<std::uint8_t>((lo + hi) / 2);
    if (decode_minifloat(mid, exponent_bits, mantissa_bits, has_inf) <= magnitude) lo = mid;
    else hi = mid;
  }
  const float below = decode_minifloat(lo, exponent_bits, mantissa_bits, has_inf);
  const float above = decode_minifloat(hi, exponent_bits, mantissa_bits, has_inf);
  std::uint8_t code;
  if (magnitude - below < above - magnitude) code = lo;
  else if (magnitude - below > above - magnitude) code = hi;
  else code = (lo & 1) ? hi : lo;
  return sign | code;
}
}  // namespace

float fp8_e4m3_to_float(std::uint8_t bits) { return decode_minifloat(bits, 4, 3, false); }
float fp8_e5m2_to_float(std::uint8_t bits) { return decode_minifloat(bits, 5, 2, true); }
std::uint8_t float_to_fp8_e4m3(float value) { return encode_minifloat(value, 4, 3, false); }
std::uint8_t float_to_fp8_e5m2(float value) { return encode_minifloat(value, 5, 2, true); }

float bf16_to_float(std::uint16_t bits) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(bits));
}
float f16_to_float(std::uint16_t bits) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
}
std::uint16_t float_to_bf16(float value) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(value));
}
std::uint16_t float_to_f16(float value) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(value));
}

double load_element(DType dtype, const std::byte* data, std::size_t index) {
  switch (dtype) {
    case DType::F64: { double v; std::memcpy(&v, data + index * 8, 8); return v; }
    case DType::F32: { float v; std::memcpy(&v, data + index * 4, 4); return v; }
    case DType::F16: { std::uint16_t v; std::memcpy(&v, data + index * 2, 2); return f16_to_float(v); }
    case DType::BF16: { std::uint16_t v; std::memcpy(&v, data + index * 2, 2); return bf16_to_float(v); }
    case DType::F8_E4M3: return fp8_e4m3_to_float(static_cast<std::uint8_t>(data[index]));
    case DType::F8_E5M2: return fp8_e5m2_to_float(static_cast<std::uint8_t>(data[index]));
    case DType::I64: { std::int64_t v; std::memcpy(&v, data + index * 8, 8); return static_cast<double>(v); }
    case DType::I32: { std::int32_t v; std::memcpy(&v, data + index * 4, 4); return v; }
    case DType::U8: case DType::BOOL: return static_cast<double>(static_cast<std::uint8_t>(data[index]));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void store_element(DType dtype, std::byte* data, std::size_t index, double value) {
  switch (dtype) {
    case DType::F64: std::memcpy(data + index * 8, &value, 8); return;
    case DType::F32: { const float v = static_cast<float>(value); std::memcpy(data + index * 4, &v, 4); return; }
    case DType::F16: { const auto v = float_to_f16(static_cast<float>(value)); std::memcpy(data + index * 2, &v, 2); return; }
    case DType::BF16: { const auto v = float_to_bf16(static_cast<float>(value)); std::memcpy(data + index * 2, &v, 2); return; }
    case DType::F8_E4M3: data[index] = static_cast<std::byte>(float_to_fp8_e4m3(static_cast<float>(value))); return;
    case DType::F8_E5M2: data[index] = static_cast<std::byte>(float_to_fp8_e5m2(static_cast<float>(value))); return;
    case DType::I64: { const auto v = static_cast<std::int64_t>(value); std::memcpy(data + index * 8, &v, 8); return; }
    case DType::I32: { const auto v = static_cast<std::int32_t>(value); std::memcpy(data + index * 4, &v, 4); return; }
    case DType::U8: case DType::BOOL: data[index] = static_cast<std::byte>(static_cast<std::uint8_t>(value)); return;
  }
}

}  // namespace pagecheck
