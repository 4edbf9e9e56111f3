// The Eigen CPU reference: float64 arithmetic, written to read like the math.
#pragma once

#include <memory>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

struct ReferenceResult {
  std::vector<double> output;  // [num_tokens, q_heads, v_head_dim]
  std::vector<double> lse;     // [num_tokens, q_heads], natural log
  // Wall time spent making the caches' pages (a case with a cache_source),
  // part of the call's time; 0 for held caches.
  double cache_ms = 0;
};

// `threads` 0: all cores. Reads the cache only through the table.
Expected<ReferenceResult> reference_attention(const Case& c, int threads = 0);

// The reference as a path named "reference" (output widened to float).
std::unique_ptr<Path> make_reference_path();

}  // namespace pagecheck
