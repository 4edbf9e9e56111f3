// The default suite: the pairwise covering property per GPU path family, read
// off the generated cases themselves; labels that match the cases; every
// generator value known to an axis; features that cannot be dropped unseen.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pagecheck/dtype.hpp"
#include "pagecheck/metrics.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/suite.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/validate.hpp"

using namespace pagecheck;

namespace {

struct Generated {
  SuiteCase suite;
  Case c;
  SuiteRow derived{};
};

// The suite, generated once for the whole file.
const std::vector<Generated>& generated_suite() {
  static const std::vector<Generated> cases = [] {
    std::vector<Generated> out;
    for (auto& sc : default_suite_cases()) {
      auto c = generate_case(sc.spec);
      REQUIRE_MESSAGE(c.ok(), sc.spec.name, ": ", (c.ok() ? "" : c.error().message));
      Generated g{sc, std::move(*c), {}};
      g.derived = suite_row_of(g.c, sc.row);
      out.push_back(std::move(g));
    }
    return out;
  }();
  return cases;
}

std::string join(const std::vector<std::string>& items, std::size_t most = 12) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < most; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > most) out += fmt::format("; ... ({} in all)", items.size());
  return out;
}

}  // namespace

TEST_CASE("every target's axis pairs are covered by cases it accepts, as the cases really are") {
  std::vector<SuiteRow> rows;
  for (const auto& g : generated_suite())
    if (!g.suite.fixed) rows.push_back(g.derived);  // read off the case, not the label
  REQUIRE(!rows.empty());
  for (const auto& target : suite_targets()) {
    CAPTURE(target.name);
    const auto open = uncovered_pairs(target, rows);
    CHECK_MESSAGE(open.empty(), target.name, " misses ", open.size(), " pairs: ", join(open));
    // Every value of every axis the target takes appears in a case it accepts.
    for (int a = 0; a < kSuiteAxes; ++a)
      for (int v : target.allowed[a]) {
        const bool seen = std::any_of(rows.begin(), rows.end(),
                                      [&](const SuiteRow& r) { return target.accepts(r) && r[a] == v; });
        CHECK_MESSAGE(seen, target.name, ": no case with ", suite_axis_name(static_cast<SuiteAxis>(a)), "=",
                      suite_axis_values(static_cast<SuiteAxis>(a))[v]);
      }
  }
}

TEST_CASE("covering cases are what their labels say: axes, lengths, query lengths, non-unit scales") {
  for (const auto& g : generated_suite()) {
    if (g.suite.fixed) continue;
    CAPTURE(g.suite.spec.name);
    CAPTURE(describe_suite_row(g.suite.row));
    CHECK(describe_suite_row(g.derived) == describe_suite_row(g.suite.row));
    const SuiteLengths want = suite_lengths(g.suite.row);
    std::vector<std::int64_t> seq_lens(g.c.seq_lens.begin(), g.c.seq_lens.end()), q_lens;
    for (std::int64_t s = 0; s < g.c.num_seqs(); ++s) q_lens.push_back(g.c.q_len(s));
    CHECK(seq_lens == want.seq_lens);
    CHECK(q_lens == want.q_lens);
    // A dropped dequantisation scale must change the answer, for every dtype.
    CHECK(g.c.params.k_scale != 1.0);
    CHECK(g.c.params.v_scale != 1.0);
    CHECK(g.c.params.k_scale != g.c.params.v_scale);
  }
}

TEST_CASE("the suite is reproducible, its names and seeds distinct, every case valid") {
  const auto a = default_suite_cases(), b = default_suite_cases();
  REQUIRE(a.size() == b.size());
  std::set<std::string> names;
  std::set<std::uint64_t> seeds;
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].spec.name == b[i].spec.name);
    CHECK(describe_suite_row(a[i].row) == describe_suite_row(b[i].row));
    names.insert(a[i].spec.name);
    seeds.insert(a[i].spec.seed);
    CHECK_MESSAGE(!a[i].targets.empty(), a[i].spec.name, " is accepted by no target");
  }
  CHECK(names.size() == a.size());
  CHECK(seeds.size() == a.size());
  for (const auto& g : generated_suite()) {
    CAPTURE(g.suite.spec.name);
    const auto report = validate_case(g.c);
    CHECK_MESSAGE(report.errors.empty(), (report.errors.empty() ? "" : report.errors.front()));
  }
  // The fixed cases keep what the covering rows do not make.
  std::set<std::int64_t> lengths;
  for (const auto& g : generated_suite())
    for (auto len : g.c.seq_lens) lengths.insert(len);
  for (std::int64_t len : {1, 8191, 8192, 1023, 1025, 511, 513}) CHECK_MESSAGE(lengths.count(len), "length ", len);
}

// A new dtype (or other value) the generator accepts must be an axis value,
// else the suite would never put it through the paths.
TEST_CASE("the axes hold every value the generator and the kernels take") {
  const auto& kv = suite_axis_values(SuiteAxis::KvDtype);
  const auto& q = suite_axis_values(SuiteAxis::QueryDtype);
  for (DType d : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2, DType::I64,
                  DType::I32, DType::U8, DType::BOOL}) {
    SyntheticSpec spec;
    spec.kv_dtype = d;
    if (check_synthetic_spec(spec).ok())
      CHECK_MESSAGE(std::count(kv.begin(), kv.end(), std::string(dtype_name(d))) == 1, "kv dtype ", dtype_name(d));
    spec = SyntheticSpec{};
    spec.query_dtype = d;
    if (check_synthetic_spec(spec).ok())
      CHECK_MESSAGE(std::count(q.begin(), q.end(), std::string(dtype_name(d))) == 1, "query dtype ", dtype_name(d));
  }
  const auto& modes = suite_axis_values(SuiteAxis::Mode);
  for (QueryMode m : {QueryMode::Decode, QueryMode::Prefill, QueryMode::Chunked, QueryMode::Mixed})
    CHECK(std::count(modes.begin(), modes.end(), std::string(query_mode_name(m))) == 1);
  const auto& profiles = suite_axis_values(SuiteAxis::Profile);
  for (ValueProfile p : {ValueProfile::Gaussian, ValueProfile::LlmLike, ValueProfile::LargeLogits})
    CHECK(std::count(profiles.begin(), profiles.end(), std::string(value_profile_name(p))) == 1);
  // Block sizes: 1, odd, non-power-of-two, the common ones, the kernels' largest.
  const auto& blocks = suite_axis_values(SuiteAxis::BlockSize);
  for (const char* b : {"1", "7", "16", "32", "256"}) CHECK(std::count(blocks.begin(), blocks.end(), b) == 1);
}

// The features a kernel can drop (softcap, k_scale, v_scale, the window, the
// sinks, ALiBi, or ALiBi's sign) must change the answer beyond the default tolerance in the cases
// that carry them, or the suite could not catch the drop.
TEST_CASE("a dropped softcap, scale, sink or ALiBi, a flipped ALiBi, or a window off by one, fails the default tolerances in every covering case") {
  int checked = 0;
  for (const auto& g : generated_suite()) {
    if (g.suite.fixed) continue;
    CAPTURE(g.suite.spec.name);
    const Case& c = g.c;
    auto want = reference_attention(c);
    REQUIRE(want.ok());
    const Tolerance tol = default_tolerance(c.query.dtype, c.key_cache.dtype);
    const Tolerance lse_tol = default_lse_tolerance(c.query.dtype, c.key_cache.dtype);
    // Output and LSE, as the harness compares them (a window of one key
    // hides k_scale from the output, not from the LSE).
    const auto mismatches = [&](Case wrong) {
      auto got = reference_attention(wrong);
      REQUIRE(got.ok());
      std::vector<float> out(got->output.begin(), got->output.end()), lse(got->lse.begin(), got->lse.end());
      return compare(c, out, want->output, c.v_head_dim(), tol).mismatches +
             compare(c, lse, want->lse, 1, lse_tol).mismatches;
    };
    Case k = c;
    k.params.k_scale = 1.0;
    CHECK_MESSAGE(mismatches(k) > 0, "k_scale dropped");
    Case v = c;
    v.params.v_scale = 1.0;
    CHECK_MESSAGE(mismatches(v) > 0, "v_scale dropped");
    // Logits in the hundreds over a small window: the softmax is one-hot,
    // and ALiBi's bias (under a logit a key at the slopes of 2 to 16 heads)
    // moves no weight the tolerances see. Every family that takes ALiBi
    // also meets it with the other value profiles.
    const bool one_hot_small_window =
        g.suite.spec.profile == ValueProfile::LargeLogits && c.params.sliding_window > 0 && c.params.sliding_window <= 5;
    if (c.has_alibi() && !one_hot_small_window) {
      Case flat = c;
      flat.alibi_slopes.clear();
      CHECK_MESSAGE(mismatches(flat) > 0, "ALiBi dropped");
      Case flipped = c;
      for (auto& slope : flipped.alibi_slopes) slope = -slope;
      CHECK_MESSAGE(mismatches(flipped) > 0, "ALiBi's sign flipped");
    }
    if (c.has_sinks()) {
      Case sinkless = c;
      sinkless.sinks.clear();
      CHECK_MESSAGE(mismatches(sinkless) > 0, "sinks dropped");
    }
    if (c.params.softcap > 0) {
      Case uncapped = c;
      uncapped.params.softcap = 0;
      CHECK_MESSAGE(mismatches(uncapped) > 0, "softcap dropped");
    }
    // Logits in the hundreds make the softmax one-hot: one more key in the
    // window changes the answer only where it holds the largest logit. ALiBi
    // with a window longer than the small one does the same to the key past
    // the window: its bias (slope x distance over the edge window's hundreds
    // of keys) leaves it too little weight for the tolerances to see; every family that takes ALiBi
    // also meets the edge window without it (the pair window=edge,
    // alibi=none), where the check holds.
    const bool alibi_buries_edge = c.has_alibi() && c.params.sliding_window > 5;
    if (c.params.sliding_window > 0 && g.suite.spec.profile != ValueProfile::LargeLogits && !alibi_buries_edge) {
      Case wider = c;
      wider.params.sliding_window += 1;
      CHECK_MESSAGE(mismatches(wider) > 0, "window off by one");
    }
    ++checked;
  }
  CHECK(checked > 0);
}
