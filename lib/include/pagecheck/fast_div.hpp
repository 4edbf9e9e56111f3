// Division by a value fixed for a whole launch, for the kernels' page and
// work decoding: a multiply-high, an add and a shift where the compiler's
// 32-bit division by a run-time value is about 20 instructions with a
// reciprocal (the round-up method of Granlund and Montgomery, "Division by
// invariant integers using multiplication", 1994). Exact for numerators
// below 2^31, which keeps t + n from overflowing (tests/test_fast_div.cpp).
// Host-only code may include it: it needs no CUDA header.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PAGECHECK_HOST_DEVICE __host__ __device__
#else
#define PAGECHECK_HOST_DEVICE
#endif

namespace pagecheck {

// A divisor d in [1, 2^31) with shift = ceil(log2 d) and
// mul = floor(2^32 (2^shift - d) / d) + 1.
struct FastDiv {
  std::uint32_t divisor = 1;
  std::uint32_t mul = 1;
  std::uint32_t shift = 0;
};

inline FastDiv fast_divisor(std::uint32_t d) {
  FastDiv f;
  f.divisor = d == 0 ? 1 : d;  // callers never divide by 0; keep the struct valid
  while ((std::uint64_t{1} << f.shift) < f.divisor) ++f.shift;
  f.mul = static_cast<std::uint32_t>(
      ((std::uint64_t{1} << 32) * ((std::uint64_t{1} << f.shift) - f.divisor)) / f.divisor + 1);
  return f;
}

// n / divisor for n < 2^31.
PAGECHECK_HOST_DEVICE inline std::uint32_t fast_div(std::uint32_t n, std::uint32_t mul, std::uint32_t shift) {
#if defined(__CUDA_ARCH__)
  const std::uint32_t t = __umulhi(n, mul);
#else
  const auto t = static_cast<std::uint32_t>((std::uint64_t{n} * mul) >> 32);
#endif
  return (t + n) >> shift;
}
PAGECHECK_HOST_DEVICE inline std::uint32_t fast_div(std::uint32_t n, const FastDiv& f) {
  return fast_div(n, f.mul, f.shift);
}

}  // namespace pagecheck
