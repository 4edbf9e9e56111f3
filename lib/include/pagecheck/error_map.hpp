// Where a comparison's error lies, in a compact form for the HTML report:
// the largest error / tolerance per (sequence, head) cell and per token, and
// the worst elements. compare() fills it on request (metrics.hpp), in the
// same pass that counts the mismatches.
//
// Bounded: an axis longer than kErrorMapMaxBins is binned (a cell covers a
// run of consecutive sequences, heads or tokens), so a 64 x 8192 prefill case
// costs at most 256 x 256 cells per grid, not one per element.
#pragma once

#include <cstdint>
#include <vector>

namespace pagecheck {

inline constexpr std::int64_t kErrorMapMaxBins = 256;
inline constexpr std::size_t kErrorMapWorst = 10;  // worst elements kept

// What a cell holds besides its largest ratio (bits of ErrorGrid::flags).
enum ErrorCellFlag : std::uint8_t {
  kCellJudged = 1,     // at least one element compared with finite values
  kCellNonFinite = 2,  // a non-finite mismatch: a NaN/Inf output (an unwritten element holds the NaN poison),
                       // or a finite output where the reference is infinite
  kCellUnjudged = 4,   // an element whose reference is NaN (its inputs are not finite): not judged
};

// One axis of a grid: `items` sequences, heads or tokens, `per_bin`
// consecutive items per cell.
struct ErrorAxis {
  std::int64_t items = 0;
  std::int64_t per_bin = 1;

  // The axis for `items`, binned to at most kErrorMapMaxBins cells.
  static ErrorAxis binned(std::int64_t items) {
    ErrorAxis a;
    a.items = items > 0 ? items : 0;
    a.per_bin = a.items > kErrorMapMaxBins ? (a.items + kErrorMapMaxBins - 1) / kErrorMapMaxBins : 1;
    return a;
  }
  std::int64_t bins() const { return (items + per_bin - 1) / per_bin; }
  std::int64_t bin_of(std::int64_t item) const { return item / per_bin; }
  std::int64_t first(std::int64_t bin) const { return bin * per_bin; }
  std::int64_t last(std::int64_t bin) const {  // inclusive
    const std::int64_t end = (bin + 1) * per_bin;
    return (end < items ? end : items) - 1;
  }
};

// rows x cols cells, row-major.
struct ErrorGrid {
  ErrorAxis rows, cols;
  // max over the cell's judged elements of |out - ref| / (atol + rtol * |ref|)
  // (the row-scaled atol, as compare() judges): above 1 is a mismatch. 0 where
  // nothing finite was judged; +inf where the tolerance is 0 and the error is not.
  std::vector<float> ratio;
  std::vector<std::uint8_t> flags;  // ErrorCellFlag bits

  bool empty() const { return ratio.empty(); }
  std::size_t index(std::int64_t row, std::int64_t col) const {
    return static_cast<std::size_t>(row * cols.bins() + col);
  }
};

struct WorstElement {
  std::int64_t seq = -1, token = -1, head = -1, dim = -1;  // token: within the sequence
  double value = 0, reference = 0;
  double abs_err = 0;
  double ratio = 0;  // abs_err / tolerance; +inf for a non-finite mismatch
};

struct ErrorMap {
  ErrorGrid by_seq_head;  // rows: sequences, cols: query heads; empty without a usable query_start_loc
  ErrorGrid by_token;     // rows: 1, cols: query tokens in the case's order (all heads and dims folded)
  std::vector<WorstElement> worst;  // up to kErrorMapWorst, largest ratio first; only elements with an error
};

}  // namespace pagecheck
