// From command-line case options to synthetic specs, and a case's one-line
// geometry for the report.
#pragma once

#include <string>
#include <vector>

#include "config.hpp"
#include "pagecheck/case.hpp"
#include "pagecheck/status.hpp"
#include "pagecheck/synthetic.hpp"

namespace pagecheck::app {

// No preset and no geometry flag: the default suite. Presets: one spec each,
// with any geometry flags applied on top and named "<preset><variant_suffix>".
// Geometry flags alone: one spec, "custom".
// Errors are usage errors naming the option.
Expected<std::vector<SyntheticSpec>> build_specs(const CaseOptions& options);

// "4 seqs, 32/8 heads, d128, bs16, q BF16, kv BF16, NHD, dense, decode, ctx 1..4096".
// The mode is named in the words of --mode, from the query lengths: decode
// (every q_len 1), prefill (every q_len = its seq_len), mixed (some sequences
// decode, q_len 1, next to longer queries), chunked (otherwise: new tokens
// over a cached context), with "(q_len A..B)" unless decode.
std::string describe_geometry(const Case& c);

// The benchmark shapes of the GPU issues (32 q heads, 8 kv heads, d128, BF16,
// block 16, shuffled pages). `which`: decode, prefill or all.
// A variant other than the default adds its values to each shape's name
// (e.g. prefill-8x2048-b64-d256-F8_E4M3). The kv dtype is checked by the caller.
std::vector<SyntheticSpec> bench_specs(const std::string& which, std::uint64_t seed,
                                       const BenchVariant& variant = {});

}  // namespace pagecheck::app
