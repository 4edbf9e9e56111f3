// Random cases for `pagecheck soak` (docs/cli.md "soak"): case k of seed S
// drawn from the whole space the generator accepts, and the signatures that
// tell one failure from another.
//
// Case k of seed S depends only on (S, k) and the limits: draw_soak_case
// seeds its own engine from them, so case 1234 can be drawn alone
// (`--seed S --case 1234`) without drawing the 1233 before it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/plan.hpp"
#include "pagecheck/synthetic.hpp"

namespace pagecheck {

// What a drawn case may cost. The defaults keep a case's reference under a
// second or so on a few cores and its caches within a few GiB of device memory
// (they are never held on the host: soak runs generate_case_sourced).
struct SoakLimits {
  std::int64_t max_seqs = 16;
  std::int64_t max_seq_len = 8192;
  // Multiply-adds of the reference (q tokens x visible keys x q_heads x
  // (head_dim + v_head_dim)); lengths are drawn again, shorter, above it.
  double max_reference_work = 3e8;
  // Elements of one cache (num_blocks x block_size x kv_heads x head_dim) of
  // an ordinary draw; the pool factor is lowered to stay below it.
  std::int64_t max_pool_elements = std::int64_t{1} << 28;
  // Now and then (1 case in kHugePoolEvery), a pool past 2^31 elements, when
  // the caller's device has the memory for it (soak: when a GPU path runs and
  // the device has room for two such caches).
  bool huge_pools = false;
};
inline constexpr std::uint64_t kHugePoolEvery = 40;
inline constexpr std::int64_t kHugePoolElements = (std::int64_t{1} << 31) + (std::int64_t{1} << 26);

struct SoakDraw {
  SyntheticSpec spec;       // name "soak-S-k", its own generator seed
  std::optional<Plan> plan; // a random explicit split plan; nullopt: the run's plan (default or --plan)
  bool huge_pool = false;   // the pool is past 2^31 elements per cache
};

// Case `index` of `seed`. Always a spec check_synthetic_spec accepts.
SoakDraw draw_soak_case(std::uint64_t seed, std::uint64_t index, const SoakLimits& limits = {});

// The reference's multiply-adds for the lengths of a spec whose lengths are
// lists (what draw_soak_case makes), for the budget above.
double soak_reference_work(const SyntheticSpec& spec);

// A failure's identity, so that soak saves each distinct failure once: the
// path, the kind of check that failed (reduce's failure kind: "output beyond
// tolerance", "unwritten", ...) and the features of the reduced case that a
// kernel branches on (dtypes, layout, table form, block size class, head
// dims, GQA class, window, softcap, mode, causal), not its lengths or values,
// so that the same bug met by two random cases counts once.
std::string failure_signature(const std::string& path, const std::string& kind, const Case& reduced);

// The signatures seen so far; insert() is true for a new one.
class SignatureSet {
 public:
  bool insert(const std::string& signature) { return seen_.insert(signature).second; }
  bool contains(const std::string& signature) const { return seen_.count(signature) > 0; }
  std::size_t size() const { return seen_.size(); }

 private:
  std::set<std::string> seen_;
};

}  // namespace pagecheck
