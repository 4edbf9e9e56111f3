// Smaller cases cut out of a case, for `pagecheck reduce` (docs/cli.md
// "reduce"). Each function returns a new case and leaves its input alone;
// tensors are sliced byte for byte, so every kept element (query, cache,
// recorded output and LSE) is bitwise the one it was.
//
// A recorded output/LSE is kept only where the cut leaves its math intact:
// keep_sequences, keep_heads and compact_pages always do; cut_sequence does
// when cut_keeps_answers() says so, and otherwise drops the recorded output
// and LSE (they would no longer be what the case computes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pagecheck/case.hpp"
#include "pagecheck/tensor.hpp"

namespace pagecheck {

// The elements of `t` at the given indices along each axis (an empty or
// missing list: the whole axis), row-major, same dtype. Throws
// std::out_of_range on an index outside its axis.
Tensor select_elements(const Tensor& t, const std::vector<std::vector<std::int64_t>>& indices);

// Keeps the sequences `seqs` (increasing indices) with their query tokens,
// table entries and recorded rows. The cache is left as it is.
Case keep_sequences(const Case& c, const std::vector<std::int64_t>& seqs);

// Keeps the KV heads `kv_heads` and, of each one's group of
// q_heads / kv_heads query heads, the members `group_members` (offsets in
// the group, the same for every group, so that q_heads stays a multiple of
// kv_heads). Query head kv * group + m becomes head i * members + j.
Case keep_heads(const Case& c, const std::vector<std::int64_t>& kv_heads,
                const std::vector<std::int64_t>& group_members);

// What sequence `seq` keeps: its first `seq_len` keys and its query tokens
// [first_token, first_token + q_len), which then sit at positions
// seq_len - q_len ... seq_len - 1. Needs 1 <= q_len <= seq_len, at most the
// sequence's own lengths.
struct SequenceCut {
  std::int64_t seq_len = 0;
  std::int64_t first_token = 0;
  std::int64_t q_len = 0;
};

// True when every kept token sees exactly the keys it saw before (same
// position where the mask depends on it, no visible key dropped), so that
// its recorded output and LSE are still the right answer: under a causal
// mask (or a window, or ALiBi) the tokens keep their positions (seq_len - q_len =
// old seq_len - old q_len + first_token); without one the context stays
// whole.
bool cut_keeps_answers(const Case& c, std::int64_t seq, const SequenceCut& cut);

// Applies `cut` to sequence `seq`. A CSR table keeps only the pages the new
// length needs; a dense row keeps its width.
Case cut_sequence(const Case& c, std::int64_t seq, const SequenceCut& cut);

// Keeps only the pages that the table's needed entries name (the first
// ceil(seq_len / block_size) of each sequence), renumbered in order of first
// use (pages shared between sequences stay shared); the pool shrinks to
// them. A dense table narrows to the widest sequence's needs; its unneeded
// entries become 0.
Case compact_pages(const Case& c);

// Pages the needed entries name (distinct).
std::int64_t referenced_pages(const Case& c);

}  // namespace pagecheck

namespace pagecheck {

// Feature simplifications, tried by reduce after its cuts on a path whose
// reference is recomputed for each candidate (a GPU or external path; never
// against a recorded output, whose answer they change): each turns one
// feature of a case into its plainest form, so that a reduced case keeps
// only the features its failure needs (and soak's failure signature names
// only those). A simplification drops the recorded output and LSE.
enum class Simplification {
  Softcap,     // softcap -> none
  Window,      // sliding window -> none
  Sinks,       // sink logits -> none
  Alibi,       // ALiBi slopes -> none
  Causal,      // non-causal -> causal
  KvDtype,     // the caches -> BF16 (fp8 values are exact in BF16)
  QueryDtype,  // the query (and so the output) -> BF16
  Layout,      // HND -> NHD
  Table,       // a CSR table -> dense
};
inline constexpr Simplification kSimplifications[] = {
    Simplification::Softcap, Simplification::Window,     Simplification::Sinks,
    Simplification::Alibi,   Simplification::Causal,     Simplification::KvDtype,
    Simplification::QueryDtype, Simplification::Layout, Simplification::Table};

// "softcap off", "KV cache F8_E4M3 -> BF16", ... (for the progress lines).
std::string describe_simplification(const Case& c, Simplification s);

// `c` with the one feature simplified; nullopt where it already has the plain
// form, or cannot be simplified here: caches not held, or (KvDtype, Layout)
// caches of more than kSimplifyMaxElements elements each (a huge pool the
// cuts could not shrink: converting it would cost gigabytes of host memory).
inline constexpr std::int64_t kSimplifyMaxElements = std::int64_t{1} << 26;
std::optional<Case> simplify(const Case& c, Simplification s);

}  // namespace pagecheck
