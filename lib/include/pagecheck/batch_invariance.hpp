// Batch invariance (docs/validation.md "Batch invariance"): a sequence's
// attention output must not depend on the batch it is served in. The check
// runs each sequence of a case alone, and the whole batch permuted and padded
// to another size, and compares every output and LSE element bit for bit
// with the full batch's.
//
// The padded batch is the case's sequences in reverse order, with one-key,
// one-token copies of sequence 0 ("fillers") between and after them, up to
// kInvariancePaddedCtas / kv_heads sequences: enough (sequences x KV heads
// past two waves of an H200's 132 multiprocessors) that a planner choosing
// its split from the batch size chooses differently.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

inline constexpr std::int64_t kInvariancePaddedCtas = 288;
inline constexpr std::int64_t kInvarianceMaxAlone = 4;
inline constexpr std::int64_t kInvarianceMaxPadded = 512;

// One batch the check runs: for each of its sequences, the sequence of the
// full case it is (or -1 for a filler).
struct BatchVariant {
  std::string name;                  // "alone 3", "permuted and padded to 144"
  std::vector<std::int64_t> source;  // per sequence of the variant: the full case's sequence, -1 a filler
};

// The variants of `c`: each sequence alone (when there are two or more; of
// more than kInvarianceMaxAlone, the first, the last, the longest and the
// shortest), and the permuted, padded batch.
std::vector<BatchVariant> batch_variants(const Case& c);

// The case of a variant: the sequences of `c` in the variant's order, a
// filler as sequence 0's first key and first query token. The cache (and its
// source) is shared; a recorded output is dropped.
Case batch_case(const Case& c, const BatchVariant& variant);

// What a path gives for one case: output [tokens, q_heads, v_head_dim] and
// LSE [tokens, q_heads] (empty when the path has none).
struct BatchOutput {
  std::vector<float> output;
  std::vector<float> lse;
};

// The first element where a variant's result differs from the full batch's.
struct BatchDifference {
  std::string variant;
  std::int64_t seq = 0;    // of the full case
  std::int64_t token = 0;  // within the sequence's query
  std::int64_t head = 0;
  std::int64_t dim = -1;   // -1: the LSE differs
  float full = 0, other = 0;

  // "seq 2 token 0 head 5 dim 17 (alone 2): 0.12345678 in the batch, 0.12345679"
  std::string describe() const;
};

// The first element of `variant` whose bits differ from the full batch's
// result `full`, in the variant's order; nullopt when every element of every
// real sequence is bitwise the same.
std::optional<BatchDifference> first_batch_difference(const Case& c, const BatchOutput& full, const BatchVariant& variant,
                                                      const BatchOutput& result);

struct BatchInvariance {
  bool invariant = true;
  int variants_run = 0;
  std::vector<std::string> variants_skipped;  // "alone 3: n/a (...)"
  std::optional<BatchDifference> first;
};

// Runs every variant through `run` (nullopt: the path does not apply to that
// variant, which is skipped with `why`) and compares it with `full`; stops at
// the first difference. An error from `run` is returned as it is.
using BatchRun = std::function<Expected<std::optional<BatchOutput>>(const Case&, std::string& why)>;
Expected<BatchInvariance> check_batch_invariance(const Case& c, const BatchOutput& full, const BatchRun& run);

}  // namespace pagecheck
