// fast_div (lib/include/pagecheck/fast_div.hpp) against the division
// operator: small and large divisors, powers of two and their neighbours,
// numerators around multiples of the divisor and up to 2^31 - 1, the top of
// the range it is exact for.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "pagecheck/fast_div.hpp"

using pagecheck::fast_div;
using pagecheck::fast_divisor;

namespace {

std::vector<std::uint32_t> divisors() {
  std::vector<std::uint32_t> d;
  for (std::uint32_t i = 1; i <= 300; ++i) d.push_back(i);
  for (int b = 9; b <= 30; ++b) {
    const std::uint32_t p = std::uint32_t{1} << b;
    d.insert(d.end(), {p - 1, p, p + 1});
  }
  d.insert(d.end(), {641u, 6700417u, 2147483646u, 2147483647u, 1000000007u, 3u * 5u * 7u * 11u * 13u, 0x7fffffffu});
  std::mt19937 rng(20261206);
  for (int i = 0; i < 200; ++i) d.push_back(1 + rng() % 0x7fffffffu);
  return d;
}

}  // namespace

TEST_CASE("fast_div equals n / d") {
  std::mt19937 rng(7);
  for (const std::uint32_t d : divisors()) {
    const auto f = fast_divisor(d);
    std::vector<std::uint32_t> ns = {0u, 1u, d - 1, 0x7ffffffeu, 0x7fffffffu};
    if (d < 0x40000000u) ns.insert(ns.end(), {d, d + 1, 2 * d - 1});
    for (std::uint32_t k : {2u, 3u, 1000u, 65535u, 65536u}) {
      const std::uint64_t m = std::uint64_t{d} * k;
      if (m <= 0x7fffffffu) ns.insert(ns.end(), {static_cast<std::uint32_t>(m - 1), static_cast<std::uint32_t>(m)});
    }
    for (int i = 0; i < 200; ++i) ns.push_back(static_cast<std::uint32_t>(rng()) & 0x7fffffffu);
    for (const std::uint32_t n : ns) {
      INFO("n = " << n << ", d = " << d);
      REQUIRE(fast_div(n, f) == n / d);
    }
  }
}

TEST_CASE("fast_div over every n below 2^16 for small divisors") {
  for (std::uint32_t d = 1; d <= 64; ++d) {
    const auto f = fast_divisor(d);
    for (std::uint32_t n = 0; n < 65536; ++n) {
      if (fast_div(n, f) != n / d) {
        INFO("n = " << n << ", d = " << d);
        REQUIRE(fast_div(n, f) == n / d);
      }
    }
  }
}
