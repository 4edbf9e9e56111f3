// A case's content hash: what `compare` pairs cases by besides their names,
// so that a renamed case is still paired and a changed one is not
// (docs/cli.md "compare"). Reports carry it per case as "content_hash".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "pagecheck/case.hpp"

namespace pagecheck {

// A streaming 64-bit hash (not cryptographic): bytes in, one word out. The
// same calls with the same bytes give the same word on every platform (words
// are read little-endian; a call's bulk goes through four lanes folded in at
// its end, so the word depends on how the bytes are cut into calls); a
// changed bit changes the word with high probability. Several GB/s.
class Hash64 {
 public:
  void bytes(std::span<const std::byte> data);
  void text(std::string_view s);  // length-prefixed, so "ab"+"c" differs from "a"+"bc"
  void u64(std::uint64_t v);
  void f64(double v);  // by its bits; -0.0 and 0.0 differ
  std::uint64_t digest() const;

 private:
  void word(std::uint64_t w);
  std::uint64_t state_ = 0x9e3779b97f4a7c15ull;
  std::uint64_t length_ = 0;
};

// 16 lower-case hex digits.
std::string hex64(std::uint64_t v);

// The hash of what decides a case's attention and its judging: the
// parameters (layout, causal, scale, window, softcap, K/V scales), the
// query's dtype, shape and bytes, the caches' dtypes and shapes, the table
// and lengths, the bytes of every cache block the table references (not the
// unreferenced pool), and a recorded output and LSE. Not the name, the
// description or other metadata. A case whose caches are made on demand
// (generated) hashes its generator settings and seed in place of the cache
// bytes, which they determine, rather than making every page again.
std::string case_content_hash(const Case& c);

// The digest of a path's output or LSE as it returned them (widened to float,
// which keeps every bit of a BF16/F16 output): 16 hex digits that change when
// one bit does. Reports carry it per path ("output_digest", "lse_digest"), so
// that `compare` can say `bits changed` where the numbers stay within
// tolerance, and two GPUs, drivers or builds can be checked bit for bit
// without keeping outputs.
std::string values_digest(std::span<const float> values);

}  // namespace pagecheck
