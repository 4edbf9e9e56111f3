// Delta debugging of a failing case (docs/cli.md "reduce"), shared by
// `pagecheck reduce` and `pagecheck soak`. Each candidate is a smaller or
// plainer case made by reduce.hpp and run through one path by the caller's
// `run`; it is kept when that path still fails the same way: the same
// status and the same kind of first failure (failure_kind). Steps, in rounds
// until one changes nothing or the test budget is spent: drop sequences
// (ddmin), drop KV heads, drop query heads of each group, shorten each
// sequence's query and context, keep only the referenced pages; then, where
// the reference is recomputed for every candidate (not sound_only), the
// feature simplifications of reduce.hpp one by one, and the rounds again if
// any was kept.
//
// sound_only (a recorded output judged against the reference): only cuts
// that keep the recorded output the right answer (cut_keeps_answers), and no
// simplification.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/reduce.hpp"
#include "pagecheck/report.hpp"

namespace pagecheck {

// The kind of a failing row's first failure (its reason): "output beyond
// tolerance", "LSE NaN/Inf", "unwritten", "repeatability", "graph replay",
// "batch invariance", "error", ...; "the same way" means the same status and
// this kind.
std::string failure_kind(const PathReport& row);

// A candidate's row on the path (nullopt: it did not run, e.g. it did not
// validate).
using ReduceRun = std::function<std::optional<PathReport>(const Case&)>;
// Called for each kept candidate: the case, the test count, what changed.
using ReduceProgress = std::function<void(const Case&, int test, const std::string& what)>;

class Reducer {
 public:
  Reducer(bool sound_only, int max_tests, ReduceRun run, ReduceProgress progress = {});

  int tests() const { return tests_; }
  bool out_of_budget() const { return tests_ >= max_tests_; }
  // The first test: how the original fails (nullopt row: it did not run).
  std::optional<PathReport> start(const Case& c);
  const std::string& kind() const { return kind_; }
  // The smallest case found that fails as start()'s did.
  Case reduce(Case c);
  // The simplifications kept by reduce(), in order ("softcap off", ...).
  const std::vector<std::string>& simplified() const { return simplified_; }

 private:
  bool fails_same_way(const Case& candidate);
  void accepted(const Case& c, const std::string& what);
  std::vector<std::int64_t> ddmin(std::vector<std::int64_t> items,
                                  const std::function<bool(const std::vector<std::int64_t>&)>& fails);
  bool drop_sequences(Case& c);
  bool drop_heads(Case& c);
  bool shrink(std::int64_t value, std::int64_t minimum, const std::function<bool(std::int64_t)>& fails);
  bool try_cut(Case& c, std::int64_t s, const SequenceCut& cut, const std::string& what);
  bool shorten_sequence(Case& c, std::int64_t s);
  bool compact(Case& c);
  void cut_rounds(Case& c);
  bool simplify_features(Case& c);

  bool sound_only_ = false;
  int max_tests_ = 0;
  ReduceRun run_;
  ReduceProgress progress_;
  int tests_ = 0;
  PathStatus status_ = PathStatus::Fail;
  std::string kind_;
  std::vector<std::string> simplified_;
};

struct ReducedFailure {
  Case reduced;       // the smallest case found that fails the same way
  std::string kind;   // failure_kind of the original
  PathReport first;   // the original's row
  int tests = 0;      // runs of the path, the original's included
  std::vector<std::string> simplified;  // the feature simplifications kept
};

// Reduces `c` (its caches held: generate_case, a loaded file) on a path
// whose reference is recomputed (every cut and simplification allowed).
// nullopt when `c` does not fail.
std::optional<ReducedFailure> reduce_failure(const Case& c, int max_tests, const ReduceRun& run);

}  // namespace pagecheck
