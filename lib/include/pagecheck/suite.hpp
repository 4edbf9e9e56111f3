// The default suite: a seeded pairwise covering array over the feature axes
// of paged attention, one per GPU path family ("target"), plus a few fixed
// cases (long contexts, one-token sequences, prefix sharing, a wide pool).
//
// For every target, every value of every axis it supports appears in some
// case the target accepts, and so does every pair of such values: a fault
// that needs two features together (an FP8 cache in the HND layout, a window
// at a page edge of block size 7) meets at least one case. docs/validation.md
// lists the axes; `pagecheck run --list-suite` prints the cases.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/synthetic.hpp"

namespace pagecheck {

// The axes, in a fixed order (the covering array's columns).
enum class SuiteAxis : std::uint8_t {
  QueryDtype,  // F32 F16 BF16
  KvDtype,     // F32 F16 BF16 F8_E4M3 F8_E5M2 (every one with non-unit k_scale and v_scale)
  Layout,      // NHD HND
  Table,       // dense csr
  BlockSize,   // 1 7 16 32 256
  HeadDim,     // 64 128 256 192/128, and 32 80 96 112 120 (not built into the built-in paths), 576/512 (MLA)
  Gqa,         // 1 (2/2 heads) 4 (8/2) 8 (16/2) mqa (7/1)
  Window,      // none small (5) edge (the window equals one sequence's length, so the next one drops key 0)
  Softcap,     // none on (a cap that bites: 4 on gaussian logits, 8 LLM-like, 30 large)
  Profile,     // gaussian llm large-logits
  Lengths,     // page-edge (block-1, block, block+1, 2 block+1), partition-edge (decode: 255..257 and 513
               // around the default plan's 256-token split partition; prefill: 127..129 and 257 around the
               // 128-row/128-key tile), ragged (1 and a few odd lengths)
  Mode,        // decode prefill chunked mixed
  Causal,      // causal non-causal
  Sinks,       // none on (a sink logit per query head, sized to the profile's logits)
  Alibi,       // none on (BLOOM/MPT's slopes)
};
inline constexpr int kSuiteAxes = 15;

std::string_view suite_axis_name(SuiteAxis axis);
// The values of an axis as --list-suite and the docs spell them.
const std::vector<std::string>& suite_axis_values(SuiteAxis axis);

// One row of the covering array: a value index per axis.
using SuiteRow = std::array<int, kSuiteAxes>;

// A GPU path family and the axis values its kernels take.
struct SuiteTarget {
  std::string name;                          // "decode", "prefill", "prefill-wgmma", "fmha", "kernel"
  std::vector<std::string> paths;            // the registry paths it stands for
  std::string note;                          // what makes it a family of its own
  std::array<std::vector<int>, kSuiteAxes> allowed;  // value indices, per axis

  bool accepts(const SuiteRow& row) const;
};
const std::vector<SuiteTarget>& suite_targets();

struct SuiteCase {
  SyntheticSpec spec;
  SuiteRow row{};                    // the axis values it was built from (fixed cases too)
  std::vector<std::string> targets;  // every target that accepts the row
  bool fixed = false;                // a hand-written case, not a covering row
};

// The default suite (deterministic: the covering array's seed is fixed).
std::vector<SuiteCase> default_suite_cases();

// The axis values of a generated case, read off the case itself where the case
// shows them (dtypes, layout, table form, block size, heads, window, softcap,
// query mode, causal) and taken from `labelled` where it cannot (the value
// profile and the length class, whose lengths suite_lengths() fixes).
SuiteRow suite_row_of(const Case& c, const SuiteRow& labelled);

// The sequence lengths and chunk lengths a row's length class and mode give
// for a block size (what the suite generates; the covering test checks them).
struct SuiteLengths {
  std::vector<std::int64_t> seq_lens;
  std::vector<std::int64_t> q_lens;  // chunked/mixed query lengths (cycled, capped at seq_len)
};
SuiteLengths suite_lengths(const SuiteRow& row);

// The pairs of `target` that no row in `rows` accepted by it covers,
// as "kv_dtype=F8_E5M2 x layout=HND"; empty when the target is covered.
std::vector<std::string> uncovered_pairs(const SuiteTarget& target, const std::vector<SuiteRow>& rows);

// "q=BF16 kv=F8_E5M2 layout=HND ..." for --list-suite.
std::string describe_suite_row(const SuiteRow& row);

}  // namespace pagecheck
