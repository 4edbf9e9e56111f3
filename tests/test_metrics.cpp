// compare(): error statistics, mismatch counting, non-finite handling and
// the location of the worst element; default tolerances.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "pagecheck/metrics.hpp"

using namespace pagecheck;

namespace {

// Two sequences: 1 and 3 query tokens, 2 heads, width 4.
Case geometry() {
  Case c;
  c.query = Tensor::zeros(DType::F32, {4, 2, 4});
  c.query_start_loc = {0, 1, 4};
  c.seq_lens = {5, 3};
  return c;
}

std::vector<double> ramp(std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.25 + 0.01 * static_cast<double>(i);
  return v;
}

std::vector<float> as_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("identical outputs have no error") {
  const Case c = geometry();
  const auto ref = ramp(32);
  const auto out = as_float(ref);
  const auto stats = compare(c, out, ref, 4, {1e-5, 1e-4});
  CHECK(stats.elements == 32);
  CHECK(stats.mismatches == 0);
  CHECK(stats.nonfinite == 0);
  CHECK(stats.max_abs_err < 1e-7);  // float rounding only
  CHECK(stats.rel_l2_err < 1e-7);
}

TEST_CASE("one wrong element is counted and located as (sequence, token, head, dim)") {
  const Case c = geometry();
  const auto ref = ramp(32);
  auto out = as_float(ref);
  // Element 27 = token 3, head 0, dim 3; token 3 is token 2 of sequence 1.
  out[27] += 0.1f;
  const auto stats = compare(c, out, ref, 4, {1e-3, 1e-3});
  CHECK(stats.mismatches == 1);
  CHECK(stats.max_abs_err == doctest::Approx(0.1).epsilon(1e-5));
  CHECK(stats.worst.seq == 1);
  CHECK(stats.worst.token == 2);
  CHECK(stats.worst.head == 0);
  CHECK(stats.worst.dim == 3);
  CHECK(stats.worst_reference == doctest::Approx(ref[27]));
  CHECK(stats.max_rel_err == doctest::Approx(0.1 / ref[27]).epsilon(1e-4));
}

TEST_CASE("relative L2 error is ||out - ref|| / ||ref||") {
  const Case c = geometry();
  std::vector<double> ref(32, 0.5);
  std::vector<float> out(32, 0.5f);
  out[0] = 0.5f + 0.25f;  // diff norm 0.25, ref norm 0.5 * sqrt(32)
  const auto stats = compare(c, out, ref, 4, {1e-2, 1e-2});
  CHECK(stats.rel_l2_err == doctest::Approx(0.25 / (0.5 * std::sqrt(32.0))));
}

TEST_CASE("tolerance is atol + rtol * |ref|") {
  const Case c = geometry();
  std::vector<double> ref(32, 1.0);
  std::vector<float> out(32, 1.0f);
  out[1] = 1.0f + 0.015f;  // inside 0.01 + 0.01 * 1
  out[2] = 1.0f + 0.025f;  // outside
  const auto stats = compare(c, out, ref, 4, {1e-2, 1e-2});
  CHECK(stats.mismatches == 1);
  CHECK(stats.worst.dim == 2);
}

TEST_CASE("a non-finite element is a mismatch and always the worst") {
  const Case c = geometry();
  const auto ref = ramp(32);
  auto out = as_float(ref);
  out[3] += 5.0f;                                        // large finite error
  out[9] = std::numeric_limits<float>::quiet_NaN();     // token 1, head 0, dim 1
  out[20] = std::numeric_limits<float>::infinity();
  const auto stats = compare(c, out, ref, 4, {1e-2, 1e-2});
  CHECK(stats.nonfinite == 2);
  CHECK(stats.mismatches == 3);
  CHECK(stats.worst.seq == 1);
  CHECK(stats.worst.token == 0);
  CHECK(stats.worst.head == 0);
  CHECK(stats.worst.dim == 1);
  CHECK(std::isinf(stats.max_abs_err));
  CHECK(std::isinf(stats.rel_l2_err));
}

TEST_CASE("the same infinity on both sides agrees (LSE of a row with no visible key)") {
  Case c = geometry();
  std::vector<double> ref(8, 1.0);
  std::vector<float> out(8, 1.0f);
  ref[5] = -std::numeric_limits<double>::infinity();
  out[5] = -std::numeric_limits<float>::infinity();
  const auto stats = compare(c, out, ref, 1, {1e-4, 1e-5});
  CHECK(stats.mismatches == 0);
  CHECK(stats.nonfinite == 0);
  CHECK(stats.max_abs_err == 0);
}

TEST_CASE("relative error uses a floor on |ref|") {
  const Case c = geometry();
  std::vector<double> ref(32, 0.0);
  std::vector<float> out(32, 0.0f);
  out[0] = 1e-6f;
  const auto stats = compare(c, out, ref, 4, {1e-5, 1e-4});
  CHECK(stats.max_rel_err == doctest::Approx(1e-6 / kRelErrFloor).epsilon(1e-3));
  CHECK(std::isinf(stats.rel_l2_err));  // a zero reference and a nonzero output
}

TEST_CASE("spans of different lengths count the missing elements as mismatches") {
  const Case c = geometry();
  const auto ref = ramp(32);
  const auto out = as_float(std::vector<double>(ref.begin(), ref.begin() + 30));
  const auto stats = compare(c, out, ref, 4, {1e-5, 1e-4});
  CHECK(stats.mismatches == 2);
  CHECK(stats.elements == 32);
}

TEST_CASE("default tolerances: the loosest precision decides") {
  const auto f32 = default_tolerance(DType::F32, DType::F32);
  const auto f16 = default_tolerance(DType::F16, DType::F16);
  const auto bf16 = default_tolerance(DType::BF16, DType::BF16);
  const auto fp8 = default_tolerance(DType::BF16, DType::F8_E4M3);
  CHECK(f32.atol < f16.atol);
  CHECK(f16.atol < bf16.atol);
  CHECK(bf16.atol <= fp8.atol);
  CHECK(f32.rtol < f16.rtol);
  CHECK(f16.rtol < bf16.rtol);
  const auto mixed = default_tolerance(DType::F32, DType::BF16);
  CHECK(mixed.atol == bf16.atol);
  CHECK(mixed.rtol == bf16.rtol);
  CHECK(default_tolerance(DType::F32, DType::F8_E5M2).atol == fp8.atol);
  // Every pair is positive and no tighter than float32 rounding.
  for (DType q : {DType::F32, DType::F16, DType::BF16})
    for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
      const auto t = default_tolerance(q, kv);
      CHECK(t.atol >= 1e-6);
      CHECK(t.rtol >= 1e-5);
      const auto lse = default_lse_tolerance(q, kv);
      CHECK(lse.atol >= 1e-4);
      CHECK(lse.atol >= t.atol);
    }
}

TEST_CASE("default tolerances shrink atol for rows whose outputs are small") {
  // Long contexts average thousands of V rows into outputs of ~0.02: an
  // error of 0.005 there is a quarter of the output (a wrong page), yet
  // below a fixed atol of 1e-2. Row 0 (token 0, head 0) has rms 0.02.
  const Case c = geometry();
  const Tolerance bf16 = default_tolerance(DType::BF16, DType::BF16);
  CHECK(bf16.row_scale == kToleranceRowScale);
  std::vector<double> ref(32, 1.0);
  for (int d = 0; d < 4; ++d) ref[d] = d % 2 ? 0.02 : -0.02;
  std::vector<float> out = as_float(ref);
  out[1] += 0.005f;
  auto stats = compare(c, out, ref, 4, bf16);
  CHECK(stats.mismatches == 1);
  CHECK(stats.worst.dim == 1);
  // Rows of rms >= row_scale keep the full atol: 0.015 off a 1.0 passes.
  out = as_float(ref);
  out[9] += 0.015f;
  CHECK(compare(c, out, ref, 4, bf16).mismatches == 0);
  // Rows of rms above row_unit (1) grow it: in a row of rms ~20 (a latent
  // cache's V carries K's magnitudes) an element of 0.25 may be 0.019 off
  // (P rounded to BF16 moves outputs by ~2^-9 of the values averaged), but
  // not 0.5 (a wrong page moves them by the values themselves).
  CHECK(bf16.row_unit == kToleranceRowUnit);
  std::vector<double> big(32, 1.0);
  for (int d = 0; d < 4; ++d) big[d] = d == 1 ? 0.25 : (d % 2 ? 23.0 : -23.0);  // rms 19.9
  out = as_float(big);
  out[1] += 0.019f;
  CHECK(compare(c, out, big, 4, bf16).mismatches == 0);
  Tolerance no_growth = bf16;
  no_growth.row_unit = 0;
  CHECK(compare(c, out, big, 4, no_growth).mismatches == 1);
  out[1] = 0.75f;
  CHECK(compare(c, out, big, 4, bf16).mismatches == 1);
  CHECK(row_scaling_text(bf16) == " (scaled down in rows of RMS < 0.1, up in rows of RMS > 1)");
  CHECK(row_scaling_text(no_growth) == " (scaled down in rows of RMS < 0.1)");
  CHECK(row_scaling_text(Tolerance{}).empty());
  // Without row scaling (and for the LSE, whose error is absolute) the
  // plain atol applies.
  out = as_float(ref);
  out[1] += 0.005f;
  CHECK(compare(c, out, ref, 4, {bf16.atol, bf16.rtol}).mismatches == 0);
  CHECK(default_lse_tolerance(DType::BF16, DType::BF16).row_scale == 0);
  // A row of zeros (no visible key) must come back as zeros.
  std::vector<double> zero_row = ref;
  for (int d = 0; d < 4; ++d) zero_row[d] = 0;
  out = as_float(zero_row);
  out[2] = 1e-3f;
  CHECK(compare(c, out, zero_row, 4, bf16).mismatches == 1);
}

TEST_CASE("row-scaled atol stops at the output dtype's smallest normal value") {
  // A sink logit hundreds above a row's keys makes reference outputs of
  // 1e-250 that a float kernel writes as 0; an F16 output turns subnormal
  // below 6.1e-5. Neither is an error; a wrong value of a normal size still is.
  const Case c = geometry();
  const Tolerance bf16 = default_tolerance(DType::BF16, DType::BF16);
  const Tolerance f16 = default_tolerance(DType::F16, DType::F8_E4M3);
  CHECK(bf16.row_floor == 0x1p-102);
  CHECK(f16.row_floor == 6.103515625e-05);
  CHECK(default_tolerance(DType::F32, DType::BF16).row_floor == bf16.row_floor);
  std::vector<double> ref(32, 1.0);
  for (int d = 0; d < 4; ++d) ref[d] = d % 2 ? 3e-250 : -2e-250;  // row 0
  for (int d = 0; d < 4; ++d) ref[4 + d] = d % 2 ? 2e-6 : -3e-6;  // row 1: F16-subnormal outputs
  std::vector<float> out = as_float(ref);
  for (int d = 0; d < 8; ++d) out[d] = 0.0f;
  CHECK(compare(c, out, ref, 4, bf16).mismatches == 4);  // row 1 is within BF16's normal range
  CHECK(compare(c, out, ref, 4, f16).mismatches == 0);
  out[0] = 1e-30f;  // above FLT_MIN in a row of 1e-250: wrong for BF16, below F16's floor
  CHECK(compare(c, out, ref, 4, bf16).mismatches == 5);
  CHECK(compare(c, out, ref, 4, f16).mismatches == 0);
  out[5] = 2e-4f;  // above F16's floor: wrong
  CHECK(compare(c, out, ref, 4, f16).mismatches == 1);
}

TEST_CASE("an F32/BF16 row below 2^-102 may come back as zeros (a float kernel's flushed weight)") {
  // Soak seed 1, case 528: a sink 285 above its row's logits left outputs of
  // ~1e-38 (V up to 1650) that every decode path wrote as -0; the reference
  // kept -1.7e-38, just above FLT_MIN, the old floor.
  const Case c = geometry();
  const Tolerance bf16 = default_tolerance(DType::BF16, DType::F8_E4M3);
  std::vector<double> ref(32, 1.0);
  for (int d = 0; d < 4; ++d) ref[d] = d % 2 ? 1.7e-38 : -3e-36;
  std::vector<float> out = as_float(ref);
  for (int d = 0; d < 4; ++d) out[d] = -0.0f;
  CHECK(compare(c, out, ref, 4, bf16).mismatches == 0);
  // A value of 1e-30 in that row is past the floor: wrong.
  out[1] = 1e-30f;
  CHECK(compare(c, out, ref, 4, bf16).mismatches == 1);
}

TEST_CASE("the row atol grows with the row's LSE: float32 rounding of logits in the hundreds") {
  // Soak seed 1, case 280: an F32 kernel over logits of ~312 (LSE 312.43)
  // was 1.7e-5 off an output of 0.05 in a row of RMS 0.87, past
  // 1e-5 + 1e-4 * 0.05; the logit term (2^-22 * 312 * rms) admits it.
  const Case c = geometry();
  const Tolerance f32 = default_tolerance(DType::F32, DType::F32);
  CHECK(f32.logit_eps == kToleranceLogitEps);
  std::vector<double> ref(32, 0.87);
  ref[1] = 0.05;
  std::vector<float> out = as_float(ref);
  out[1] = static_cast<float>(0.05 + 1.7e-5);
  std::vector<double> lse(8, 312.43);
  CHECK(compare(c, out, ref, 4, f32).mismatches == 1);  // no LSE given: no logit term
  CHECK(compare(c, out, ref, 4, f32, false, lse).mismatches == 0);
  // Small logits leave the term negligible: the same error fails at LSE 3.
  std::vector<double> small(8, 3.0);
  CHECK(compare(c, out, ref, 4, f32, false, small).mismatches == 1);
  // A wrong value of a normal size still fails at LSE 312 (a 1e-3 error).
  out[1] = static_cast<float>(0.05 + 1e-3);
  CHECK(compare(c, out, ref, 4, f32, false, lse).mismatches == 1);
  // A row whose LSE is not finite (no visible key) gets no logit term.
  std::vector<double> none(8, -std::numeric_limits<double>::infinity());
  out[1] = static_cast<float>(0.05 + 1.7e-5);
  CHECK(compare(c, out, ref, 4, f32, false, none).mismatches == 1);
  // An atol of 0 (--atol 0) asks for exactness: no logit term either.
  Tolerance exact = f32;
  exact.atol = 0;
  CHECK(compare(c, out, ref, 4, exact, false, lse).mismatches == 1);
}

TEST_CASE("the worst element is the mismatch furthest beyond its tolerance, not the largest error") {
  // Soak seed 1, case 528 reported an element 0.0078 off 2.13 (within
  // 0.02 + 0.02·|ref|) as the worst while the mismatch was elsewhere.
  const Case c = geometry();
  const Tolerance bf16 = default_tolerance(DType::BF16, DType::BF16);
  std::vector<double> ref(32, 2.0);
  for (int d = 0; d < 4; ++d) ref[4 + d] = 0.02;  // row 1: RMS 0.02, atol 2e-3
  std::vector<float> out = as_float(ref);
  out[20] += 0.025f;  // within 0.01 + 0.01 * 2
  out[6] += 0.004f;  // beyond 0.002 + 0.01 * 0.02
  const auto stats = compare(c, out, ref, 4, bf16);
  CHECK(stats.mismatches == 1);
  CHECK(stats.max_abs_err == doctest::Approx(0.025).epsilon(1e-3));
  CHECK(stats.worst.token == 0);
  CHECK(stats.worst.head == 1);
  CHECK(stats.worst.dim == 2);
  // No mismatch: the largest error.
  out[6] = static_cast<float>(ref[6]);
  const auto fine = compare(c, out, ref, 4, bf16);
  CHECK(fine.mismatches == 0);
  CHECK(fine.worst_value == out[20]);
}

TEST_CASE("elements whose reference is NaN are unjudged; the worst is found among the others") {
  // A NaN in a query row makes that row of the reference NaN: no output is
  // right or wrong there, and it must not become the worst element.
  const Case c = geometry();
  auto ref = ramp(32);
  auto out = as_float(ref);
  for (int d = 0; d < 4; ++d) {
    ref[8 + d] = std::numeric_limits<double>::quiet_NaN();  // row 2 (token 1, head 0)
    out[8 + d] = d % 2 ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
  }
  out[27] += 0.5f;  // a real error elsewhere
  const auto stats = compare(c, out, ref, 4, {1e-2, 1e-2});
  CHECK(stats.unjudged == 4);
  CHECK(stats.nonfinite == 0);
  CHECK(stats.mismatches == 1);
  CHECK(std::isfinite(stats.max_abs_err));
  CHECK(stats.max_abs_err == doctest::Approx(0.5).epsilon(1e-4));
  CHECK(stats.worst_value == out[27]);

  // An infinite reference is still judged: only the same infinity agrees.
  auto ref_inf = ramp(32);
  auto out_inf = as_float(ref_inf);
  ref_inf[5] = -std::numeric_limits<double>::infinity();
  out_inf[5] = 0.0f;
  const auto inf_stats = compare(c, out_inf, ref_inf, 4, {1e-2, 1e-2});
  CHECK(inf_stats.unjudged == 0);
  CHECK(inf_stats.mismatches == 1);
}

// The HTML report's error maps stay bounded however long an axis is: at most
// kErrorMapMaxBins cells, every item in exactly one, in order.
TEST_CASE("error map axes bin to at most kErrorMapMaxBins cells and cover every item once") {
  for (std::int64_t items : {0, 1, 2, 255, 256, 257, 511, 512, 1000, 8192, 64 * 8192, 1000003}) {
    CAPTURE(items);
    const ErrorAxis axis = ErrorAxis::binned(items);
    CHECK(axis.bins() <= kErrorMapMaxBins);
    if (items <= kErrorMapMaxBins) CHECK(axis.bins() == items);
    std::int64_t next = 0;
    for (std::int64_t b = 0; b < axis.bins(); ++b) {
      CHECK(axis.first(b) == next);
      CHECK(axis.last(b) >= axis.first(b));
      CHECK(axis.bin_of(axis.first(b)) == b);
      CHECK(axis.bin_of(axis.last(b)) == b);
      next = axis.last(b) + 1;
    }
    CHECK(next == items);
  }
}
