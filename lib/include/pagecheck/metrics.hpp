// Error of a path's output against the reference (or a recorded output).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "pagecheck/case.hpp"
#include "pagecheck/error_map.hpp"

namespace pagecheck {

struct Tolerance {
  double atol = 0;
  double rtol = 0;
  // > 0: the atol of each row (one token and head) shrinks with the row's
  // size: atol * min(1, rms(ref row) / row_scale). Long contexts average V
  // rows into outputs of 0.01-0.02, where a fixed atol of 1e-2 would pass a
  // wrong page; a kernel's rounding shrinks with the row, so this keeps the
  // margin. 0: atol as is (the LSE, recorded outputs).
  double row_scale = 0;
  // > 0 (with row_scale): the atol of a row whose rms is above row_unit
  // grows with it: atol * rms(ref row) / row_unit. A kernel's rounding of
  // the softmax weights (P to BF16/F16 for a tensor-core P.V) moves an
  // output by ~2^-9 (2^-11) of the V values it averages, and a row's rms
  // follows them; outputs of a few units and less are as before. A latent
  // (MLA) cache is its own V, so its V values carry K's magnitudes (10 to
  // 40 in the large-logits and LLM-like profiles): the suite's cover-117
  // on the wgmma MLA kernel, an error of 0.019 on an output of 0.25 in a
  // row of rms ~20, beyond BF16's 1e-2 + 1e-2 * 0.25.
  double row_unit = 0;
  // The smallest atol the row scaling may reach. Below it the kernel's
  // output cannot carry relative precision while the double reference can:
  // F16 turns subnormal at 6.1e-5; a float32 kernel that flushes subnormals
  // writes 0 for a row whose final weight (a sink logit far above the row's
  // keys) is below 2^-126, although its V values make the reference's
  // outputs up to 2^24 times that. So 6.1e-5 for an F16 output and 2^-102
  // (2.0e-31) for F32 and BF16 (soak seed 1, case 528: a reference output of
  // -1.7e-38 written as -0 by every decode path).
  double row_floor = 0;
  // > 0 (with row_scale): each row's atol also grows by
  // logit_eps * |LSE of the row| * rms(ref row), the float32 rounding of
  // logits of that size (q·k, the scale, exp's argument) carried into the
  // softmax weights; compare() adds it where it is given the reference LSE
  // and atol > 0 (an atol of 0 asks for exactness).
  // Logits in the hundreds (the large-logits profile) give an F32 kernel
  // output errors of 1e-5..1e-4 (soak seed 1, case 280: LSE 312, an error
  // of 1.7e-5 on an output of 0.05 beyond F32's 1e-5 + 1e-4·|ref|).
  double logit_eps = 0;
};

// The row_scale default_tolerance sets.
inline constexpr double kToleranceRowScale = 0.1;
// The row_unit default_tolerance sets.
inline constexpr double kToleranceRowUnit = 1.0;
// The logit_eps default_tolerance sets: 4 units in the last place of
// float32 (2^-24 each) of the logit's size.
inline constexpr double kToleranceLogitEps = 0x1p-22;

// How a tolerance's atol follows each row, for messages: " (scaled down in
// rows of RMS < 0.1, up in rows of RMS > 1)", or "" without row scaling.
std::string row_scaling_text(const Tolerance& t);

// Per-dtype defaults, documented in docs/tolerances.md: the loosest of the
// query, KV and output precisions decides; row_scale kToleranceRowScale,
// row_unit kToleranceRowUnit, row_floor as above for the output (= query)
// dtype, logit_eps kToleranceLogitEps.
Tolerance default_tolerance(DType query_dtype, DType kv_dtype);
// The same for the LSE (log domain: an absolute floor of 1e-4 at least; no
// row scaling).
Tolerance default_lse_tolerance(DType query_dtype, DType kv_dtype);

// max_rel_err divides by max(|ref|, kRelErrFloor), so that outputs near zero
// do not make the relative error meaningless (attention outputs are averages
// of V rows, typically of magnitude 0.01 to 1).
inline constexpr double kRelErrFloor = 1e-3;

struct ElementLocation {
  std::int64_t seq = -1, token = -1, head = -1, dim = -1;  // token: index within the sequence
};

struct ErrorStats {
  double max_abs_err = 0;
  double max_rel_err = 0;
  double rel_l2_err = 0;        // ||out - ref|| / ||ref||
  std::int64_t mismatches = 0;  // |out - ref| > atol (row-scaled) + rtol * |ref|, non-finite included
  std::int64_t nonfinite = 0;   // NaN or Inf in out (where the reference is not NaN)
  // Elements whose reference is NaN (a NaN or Inf in the inputs that element
  // reads: validation warns about those). They cannot be judged: they are not
  // mismatches, take no part in the errors and never become the worst element.
  std::int64_t unjudged = 0;
  std::int64_t elements = 0;
  // The worst element: a non-finite one first, then the mismatch furthest
  // beyond its tolerance (largest |out - ref| / allowed), else (no
  // mismatch) the largest |out - ref|.
  ElementLocation worst;
  double worst_value = 0, worst_reference = 0;
  // Where the error lies (error_map.hpp): only when compare() is asked to
  // keep it (the HTML report); shared, as the report copies its rows.
  std::shared_ptr<const ErrorMap> map;
};

// out and ref are [num_tokens, q_heads, width] (width = v_head_dim for the
// output, 1 for LSE); locations are mapped to (seq, token-in-seq, head, dim)
// through c.query_start_loc.
// An element whose reference is NaN is `unjudged` and skipped: the inputs it
// reads are not finite, so no output is right or wrong there. Otherwise a
// non-finite out element, or a finite one where the reference is infinite, is
// a mismatch (and a non-finite one counts in `nonfinite`) unless it equals the
// reference exactly (an LSE of -inf where no key is visible); while any is
// present max_abs_err, max_rel_err and rel_l2_err are +inf. Rows are scaled
// (row_scale) from their finite reference values only. Elements of the longer
// span beyond the shorter one count as mismatches. keep_map: also fill
// ErrorStats::map (bounded in size, see error_map.hpp). row_lse: the
// reference LSE, one per row of `width` elements, for tolerance.logit_eps
// (empty: no logit term).
ErrorStats compare(const Case& c, std::span<const float> out, std::span<const double> ref,
                   std::int64_t width, Tolerance tolerance, bool keep_map = false,
                   std::span<const double> row_lse = {});

}  // namespace pagecheck
