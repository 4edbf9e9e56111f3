// Standalone device check and benchmark of the decode kernels (direct, split,
// auto), independent of the GPU core harness. Not part of the library build.
//
// Build (here, no GPU needed):  scripts/build_decode_probe.sh  -> devbin/decode_probe
// Run (on the GPU machine):     devbin/decode_probe [check|bench|all]
//   (also small: sanitizer cases; bench4: the first five bench shapes;
//   bench4t: those with direct and split:1024 alone; ncu1: profiling launches;
//   roof: the bench protocol's floor and read-only ceilings, contiguous and
//   over the bench's paged layouts by 16-byte loads, bulk copies and, for NHD,
//   tensor copies; roof_paged: the paged ones alone)
//
// check: random paged cases (fixed seeds) over block sizes, lengths, dtypes,
//   layouts, GQA ratios, windows, softcap; outputs poisoned with NaN, compared
//   element-wise with a float64 CPU loop; each path run twice (bitwise equal);
//   split vs direct; a CUDA graph captured at capacity and replayed after the
//   lengths and a page change in place; a > 2^31-element cache with block ids
//   above 65535.
// bench: the issue-3 shapes (32 q / 8 kv heads, d128, BF16, block 16,
//   shuffled pages), L2 flushed before each timed repeat, CUDA events, median.
// Every check and bench row runs both decode loops where the tensor-core one
// applies (16-bit K/V): "mma" (decode_mma.cuh, PAGECHECK_DECODE_KERNEL=mma) and
// "simt" (the CUDA-core loop, the library's default); ncu1 profiles mma first, then simt.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/launchers.cuh"
#include "common/tensor_map.cuh"
#include "harness/probe_read.cuh"
#include "pagecheck/dtype.hpp"

using namespace pagecheck;
using namespace pagecheck::gpu;

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "CUDA %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

static void ok_or_die(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.error().describe().c_str());
    std::exit(3);
  }
}

struct Config {
  std::vector<int> seq_lens;
  int q_heads = 8, kv_heads = 2, dk = 128, dv = 128, block = 16;
  DType kv = DType::BF16, q = DType::BF16;
  KvLayout layout = KvLayout::NHD;
  std::int64_t window = 0;
  float softcap = 0, k_scale = 1, v_scale = 1;
  bool lse = true;
  std::int64_t num_blocks = 0;  // 0: used pages + a few spare
  bool high_ids = false;        // place pages at the top of a large cache
  bool fast_fill = false;
  bool shuffle = true;          // shuffled physical pages (false: sequential)       // benchmark: BF16 bits straight from a cheap generator, no reference
  unsigned seed = 1;
  std::string label() const {
    char buf[256];
    std::snprintf(buf, sizeof buf, "seqs=%zu q=%d kv=%d d=%d/%d bs=%d kv=%s q=%s %s win=%lld cap=%g ks=%g vs=%g",
                  seq_lens.size(), q_heads, kv_heads, dk, dv, block, std::string(dtype_name(kv)).c_str(),
                  std::string(dtype_name(q)).c_str(), layout == KvLayout::NHD ? "NHD" : "HND", (long long)window,
                  softcap, k_scale, v_scale);
    return buf;
  }
};

static void store(DType d, std::vector<std::uint8_t>& buf, std::size_t i, float v) {
  switch (d) {
    case DType::F32: std::memcpy(&buf[i * 4], &v, 4); break;
    case DType::F16: { std::uint16_t b = float_to_f16(v); std::memcpy(&buf[i * 2], &b, 2); break; }
    case DType::BF16: { std::uint16_t b = float_to_bf16(v); std::memcpy(&buf[i * 2], &b, 2); break; }
    case DType::F8_E4M3: buf[i] = float_to_fp8_e4m3(v); break;
    case DType::F8_E5M2: buf[i] = float_to_fp8_e5m2(v); break;
    default: break;
  }
}
static double load(DType d, const std::vector<std::uint8_t>& buf, std::size_t i) {
  return load_element(d, reinterpret_cast<const std::byte*>(buf.data()), i);
}

// A case held on the host (pages compact, in their physical order) and on the device.
struct Built {
  Config cfg;
  std::int64_t page_elems_k = 0, page_elems_v = 0;
  std::vector<std::uint8_t> hk, hv, hq;     // host pages [used][page], query [seqs][q_heads][dk]
  std::vector<float> fk, fv, fq;            // the same, decoded
  std::vector<std::int32_t> page_ids;       // physical id of used page u
  std::vector<std::int64_t> indptr;         // per sequence into table
  std::vector<std::int32_t> table;          // logical page -> physical id
  std::vector<std::int32_t> table_used;     // logical page -> used index
  std::vector<std::int32_t> qsl;
  CacheStrides ks, vs;
  // device
  void *dk = nullptr, *dv = nullptr, *dq = nullptr, *dout = nullptr;
  float* dlse = nullptr;
  std::int32_t *dtable = nullptr, *dlens = nullptr, *dqsl = nullptr;
  std::int64_t* dindptr = nullptr;
  DeviceCaseView view;
  std::int64_t num_blocks = 0;
  int max_len = 0;
};

static Built build(const Config& c) {
  Built b;
  b.cfg = c;
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const std::int64_t ns = c.seq_lens.size();
  b.ks = cache_strides(c.layout, c.block, c.kv_heads, c.dk);
  b.vs = cache_strides(c.layout, c.block, c.kv_heads, c.dv);
  b.page_elems_k = b.ks.block;
  b.page_elems_v = b.vs.block;
  std::int64_t used = 0;
  b.indptr.push_back(0);
  for (int L : c.seq_lens) b.max_len = std::max(b.max_len, L);
  for (size_t s = 0; s < c.seq_lens.size(); ++s) {
    // every sequence gets pages for the capacity (graph replays grow it), plus one spare
    const std::int64_t np = (b.max_len + c.block - 1) / c.block + 1;
    used += np;
    b.indptr.push_back(used);
  }
  b.num_blocks = c.num_blocks ? c.num_blocks : used + 7;
  std::vector<std::int32_t> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  if (c.shuffle) std::shuffle(ids.begin(), ids.end(), rng);
  if (c.high_ids) std::sort(ids.begin(), ids.end(), std::greater<>());
  ids.resize(used);
  if (c.high_ids) std::shuffle(ids.begin(), ids.end(), rng);
  b.page_ids = ids;
  b.table = ids;
  b.table_used.resize(used);
  std::iota(b.table_used.begin(), b.table_used.end(), 0);
  const std::size_t es = dtype_size(c.kv);
  b.hk.resize(used * b.page_elems_k * es);
  b.hv.resize(used * b.page_elems_v * es);
  const float amp = is_fp8(c.kv) ? 4.0f : 1.0f;
  b.hq.resize(ns * c.q_heads * c.dk * dtype_size(c.q));
  if (c.fast_fill) {
    std::uint64_t x = c.seed * 0x9E3779B97F4A7C15ull + 1;
    auto fill16 = [&](std::vector<std::uint8_t>& buf) {
      std::uint16_t* p = reinterpret_cast<std::uint16_t*>(buf.data());
      for (size_t i = 0; i < buf.size() / 2; ++i) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        p[i] = static_cast<std::uint16_t>(0x3F00 | (x & 0x807F));  // +-[0.5, 1)
      }
    };
    fill16(b.hk);
    fill16(b.hv);
    fill16(b.hq);
    if (is_fp8(c.kv))  // finite fp8 bytes: clear the sign and the top exponent bit
      for (auto* buf : {&b.hk, &b.hv})
        for (auto& byte : *buf) byte &= 0x77;
  } else {
    for (std::size_t i = 0; i < (std::size_t)(used * b.page_elems_k); ++i) store(c.kv, b.hk, i, amp * uni(rng));
    for (std::size_t i = 0; i < (std::size_t)(used * b.page_elems_v); ++i) store(c.kv, b.hv, i, amp * uni(rng));
    for (std::size_t i = 0; i < (std::size_t)(ns * c.q_heads * c.dk); ++i) store(c.q, b.hq, i, 2.0f * uni(rng));
    auto decode_all = [](DType d, const std::vector<std::uint8_t>& buf, std::vector<float>& out) {
      out.resize(buf.size() / dtype_size(d));
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(load(d, buf, i));
    };
    decode_all(c.kv, b.hk, b.fk);
    decode_all(c.kv, b.hv, b.fv);
    decode_all(c.q, b.hq, b.fq);
  }
  for (int s = 0; s <= ns; ++s) b.qsl.push_back(s);

  CK(cudaMalloc(&b.dk, b.num_blocks * b.page_elems_k * es));
  CK(cudaMalloc(&b.dv, b.num_blocks * b.page_elems_v * es));
  CK(cudaMemset(b.dk, 0xff, b.num_blocks * b.page_elems_k * es));  // NaN in every unused page
  CK(cudaMemset(b.dv, 0xff, b.num_blocks * b.page_elems_v * es));
  for (std::int64_t u = 0; u < used; ++u) {
    CK(cudaMemcpy(static_cast<char*>(b.dk) + (std::size_t)b.page_ids[u] * b.page_elems_k * es,
                  b.hk.data() + u * b.page_elems_k * es, b.page_elems_k * es, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(static_cast<char*>(b.dv) + (std::size_t)b.page_ids[u] * b.page_elems_v * es,
                  b.hv.data() + u * b.page_elems_v * es, b.page_elems_v * es, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&b.dq, b.hq.size()));
  CK(cudaMemcpy(b.dq, b.hq.data(), b.hq.size(), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.dout, ns * c.q_heads * c.dv * dtype_size(c.q)));
  CK(cudaMalloc(&b.dlse, ns * c.q_heads * 4));
  CK(cudaMalloc(&b.dtable, b.table.size() * 4));
  CK(cudaMemcpy(b.dtable, b.table.data(), b.table.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.dindptr, b.indptr.size() * 8));
  CK(cudaMemcpy(b.dindptr, b.indptr.data(), b.indptr.size() * 8, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.dlens, ns * 4));
  CK(cudaMemcpy(b.dlens, c.seq_lens.data(), ns * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.dqsl, (ns + 1) * 4));
  CK(cudaMemcpy(b.dqsl, b.qsl.data(), (ns + 1) * 4, cudaMemcpyHostToDevice));

  DeviceCaseView& v = b.view;
  v.kv.key_data = b.dk;
  v.kv.value_data = b.dv;
  v.kv.page_indices = b.dtable;
  v.kv.page_indptr = b.dindptr;
  v.kv.seq_lens = b.dlens;
  v.kv.num_seqs = ns;
  v.kv.num_blocks = b.num_blocks;
  v.kv.block_size = c.block;
  v.kv.kv_heads = c.kv_heads;
  v.kv.head_dim = c.dk;
  v.kv.v_head_dim = c.dv;
  v.kv.key_strides = b.ks;
  v.kv.value_strides = b.vs;
  v.kv_dtype = c.kv;
  v.query = b.dq;
  v.query_dtype = c.q;
  v.query_start_loc = b.dqsl;
  v.output = b.dout;
  v.output_dtype = c.q;
  v.lse = c.lse ? b.dlse : nullptr;
  v.num_tokens = ns;
  v.q_heads = c.q_heads;
  v.max_q_len = 1;
  v.max_seq_len = b.max_len;
  v.scale = 1.0f / std::sqrt((float)c.dk);
  v.softcap = c.softcap;
  v.k_scale = c.k_scale;
  v.v_scale = c.v_scale;
  v.window = c.window;
  return b;
}

static void release(Built& b) {
  for (void* p : {b.dk, b.dv, b.dq, b.dout, (void*)b.dlse, (void*)b.dtable, (void*)b.dlens, (void*)b.dqsl,
                  (void*)b.dindptr})
    cudaFree(p);
}

// float64 reference over the current lengths and table (host copies).
static void reference(const Built& b, const std::vector<int>& lens, std::vector<double>& out, std::vector<double>& lse) {
  const Config& c = b.cfg;
  const int ns = lens.size(), gqa = c.q_heads / c.kv_heads;
  out.assign((size_t)ns * c.q_heads * c.dv, 0.0);
  lse.assign((size_t)ns * c.q_heads, -INFINITY);
  const double scale = b.view.scale;
  for (int s = 0; s < ns; ++s) {
    const int L = lens[s];
    const std::int64_t begin = c.window > 0 ? std::max<std::int64_t>(0, L - c.window) : 0;
    for (int qh = 0; qh < c.q_heads; ++qh) {
      const int kvh = qh / gqa;
      std::vector<double> logit(L, -INFINITY);
      double mx = -INFINITY;
      for (std::int64_t j = begin; j < L; ++j) {
        const std::int64_t u = b.table_used[b.indptr[s] + j / c.block];
        const std::int64_t off = u * b.page_elems_k + (j % c.block) * b.ks.slot + kvh * b.ks.head;
        double dot = 0;
        for (int d = 0; d < c.dk; ++d)
          dot += (double)b.fq[((size_t)s * c.q_heads + qh) * c.dk + d] * b.fk[off + d] * c.k_scale;
        double x = dot * scale;
        if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
        logit[j] = x;
        mx = std::max(mx, x);
      }
      if (L - begin <= 0) continue;
      double sum = 0;
      std::vector<double> acc(c.dv, 0.0);
      for (std::int64_t j = begin; j < L; ++j) {
        const double p = std::exp(logit[j] - mx);
        sum += p;
        const std::int64_t u = b.table_used[b.indptr[s] + j / c.block];
        const std::int64_t off = u * b.page_elems_v + (j % c.block) * b.vs.slot + kvh * b.vs.head;
        for (int d = 0; d < c.dv; ++d) acc[d] += p * b.fv[off + d] * c.v_scale;
      }
      for (int d = 0; d < c.dv; ++d) out[((size_t)s * c.q_heads + qh) * c.dv + d] = acc[d] / sum;
      lse[(size_t)s * c.q_heads + qh] = mx + std::log(sum);
    }
  }
}

struct Result {
  std::vector<float> out, lse;
  std::vector<std::uint8_t> raw;
};
static Result fetch(const Built& b) {
  Result r;
  const size_t n = b.cfg.seq_lens.size() * b.cfg.q_heads * b.cfg.dv;
  r.raw.resize(n * dtype_size(b.cfg.q));
  CK(cudaMemcpy(r.raw.data(), b.dout, r.raw.size(), cudaMemcpyDeviceToHost));
  r.out.resize(n);
  for (size_t i = 0; i < n; ++i) r.out[i] = load(b.cfg.q, r.raw, i);
  r.lse.resize(b.cfg.seq_lens.size() * b.cfg.q_heads);
  CK(cudaMemcpy(r.lse.data(), b.dlse, r.lse.size() * 4, cudaMemcpyDeviceToHost));
  return r;
}
static void poison(const Built& b) {
  CK(cudaMemset(b.dout, 0xff, b.cfg.seq_lens.size() * b.cfg.q_heads * b.cfg.dv * dtype_size(b.cfg.q)));
  CK(cudaMemset(b.dlse, 0xff, b.cfg.seq_lens.size() * b.cfg.q_heads * 4));
}

static int g_failures = 0;
static const char* g_kernel = "mma";  // the loop the next launches run (PAGECHECK_DECODE_KERNEL)
static void use_kernel(const char* name) {
  g_kernel = name;
  setenv("PAGECHECK_DECODE_KERNEL", name, 1);  // "mma" opts in, "simt" is the library's default
}
// Both loops where the tensor-core one may apply (16-bit and fp8 K/V; the
// launcher falls back to the CUDA-core loop where it does not), else the CUDA-core one.
static std::vector<const char*> kernels_for(DType kv) {
  if (kv == DType::F32) return {"simt"};
  return {"mma", "simt"};
}
static double g_worst = 0;

// Relative L2 error, NaN/unwritten count; prints on failure.
static bool compare(const char* path, const Built& b, const Result& r, const std::vector<double>& ref,
                    const std::vector<double>& ref_lse) {
  // LSE: 1e-3 absolute, or pagecheck's default (docs/tolerances.md, atol + rtol |lse|
  // of the looser precision) where that is looser: the tensor-core loop rounds q to
  // the K/V type, which moves a one-key row's LSE by ~2^-9 of its logit in BF16.
  struct LseTol {
    double atol, rtol;
  };
  auto lse_tol = [](DType d) -> LseTol {
    if (d == DType::BF16) return {1e-2, 1e-2};
    if (d == DType::F16) return {1e-3, 2e-3};
    if (is_fp8(d)) return {2e-2, 2e-2};
    return {1e-3, 0.0};
  };
  const LseTol tq = lse_tol(b.cfg.q), tkv = lse_tol(b.cfg.kv);
  const double lse_atol = std::max(tq.atol, tkv.atol), lse_rtol = std::max(tq.rtol, tkv.rtol);
  double num = 0, den = 0, lse_err = 0;  // lse_err: worst |error| / tolerance
  long bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(r.out[i])) { ++bad; continue; }
    num += (r.out[i] - ref[i]) * (r.out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (b.cfg.lse)
    for (size_t i = 0; i < ref_lse.size(); ++i) {
      if (std::isinf(ref_lse[i])) {
        if (!(std::isinf(r.lse[i]) && r.lse[i] < 0)) ++bad;
        continue;
      }
      if (!std::isfinite(r.lse[i])) { ++bad; continue; }
      lse_err = std::max(lse_err, std::fabs(r.lse[i] - ref_lse[i]) / (lse_atol + lse_rtol * std::fabs(ref_lse[i])));
    }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  // The looser of the query's and the K/V's precision (docs/tolerances.md), as a
  // relative L2 bound: the tensor-core loop rounds q and P to the K/V type.
  auto precision_tol = [](DType d) {
    return d == DType::F32 ? 2e-5 : d == DType::F16 ? 2e-3 : d == DType::BF16 ? 1e-2 : 2e-3;  // fp8: F16 operands
  };
  const double tol = std::max(precision_tol(b.cfg.q), precision_tol(b.cfg.kv));
  const bool pass = bad == 0 && rel <= tol && lse_err <= 1.0;
  g_worst = std::max(g_worst, rel / tol);
  if (!pass) {
    ++g_failures;
    std::printf("FAIL %-6s %-5s rel=%.3g (tol %.1g) lse_err/tol=%.3g nonfinite=%ld  %s\n", path, g_kernel, rel, tol, lse_err, bad,
                b.cfg.label().c_str());
  }
  return pass;
}

static SplitWorkspace make_ws(const DeviceCaseView& v, std::int64_t P, std::vector<void*>& keep) {
  SplitWorkspace ws;
  ws.max_partitions = std::max<std::int64_t>(1, (v.max_seq_len + P - 1) / P);
  const size_t so = split_partial_out_floats(v, P), ss = split_stat_floats(v, P);
  CK(cudaMalloc(&ws.partial_out, so * 4));
  CK(cudaMalloc(&ws.partial_max, ss * 4));
  CK(cudaMalloc(&ws.partial_sum, ss * 4));
  CK(cudaMemset(ws.partial_out, 0xff, so * 4));
  CK(cudaMemset(ws.partial_max, 0xff, ss * 4));
  CK(cudaMemset(ws.partial_sum, 0xff, ss * 4));
  keep.insert(keep.end(), {ws.partial_out, ws.partial_max, ws.partial_sum});
  return ws;
}

static void check_case(const Config& c, std::int64_t P, std::int64_t threshold) {
  Built b = build(c);
  std::vector<double> ref, ref_lse;
  reference(b, c.seq_lens, ref, ref_lse);
  std::vector<void*> keep;
  SplitWorkspace ws = make_ws(b.view, P, keep);
  for (const char* kernel : kernels_for(c.kv)) {
  use_kernel(kernel);
  Result first[3];
  for (int rep = 0; rep < 2; ++rep) {
    for (int path = 0; path < 3; ++path) {
      poison(b);
      Status st = path == 0 ? launch_direct(b.view, 0)
                  : path == 1 ? launch_split(b.view, ws, P, 0)
                              : launch_auto(b.view, ws, P, threshold, 0);
      ok_or_die(st, "launch");
      CK(cudaDeviceSynchronize());
      Result r = fetch(b);
      const char* name = path == 0 ? "direct" : path == 1 ? "split" : "auto";
      if (rep == 0) {
        compare(name, b, r, ref, ref_lse);
        first[path] = r;
      } else if (r.raw != first[path].raw ||
                 std::memcmp(r.lse.data(), first[path].lse.data(), r.lse.size() * 4) != 0) {
        ++g_failures;
        std::printf("FAIL %s %s not bitwise repeatable  %s\n", name, kernel, c.label().c_str());
      }
    }
  }
  }
  use_kernel("mma");
  for (void* p : keep) cudaFree(p);
  release(b);
}

// Graph capture at capacity; lengths and a page change in place; replay vs reference.
static void check_graph(const Config& c, std::int64_t P) {
  Built b = build(c);
  std::vector<void*> keep;
  SplitWorkspace ws = make_ws(b.view, P, keep);
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  for (int pass = 0; pass < 6; ++pass) {
    const int path = pass % 3;
    use_kernel(pass < 3 ? "mma" : "simt");
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    Status st = path == 0 ? launch_direct(b.view, stream)
                : path == 1 ? launch_split(b.view, ws, P, stream)
                            : launch_auto(b.view, ws, P, P, stream);
    ok_or_die(st, "capture launch");
    CK(cudaStreamEndCapture(stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    std::mt19937 rng(c.seed + 100 + pass);
    for (int round = 0; round < 3; ++round) {
      std::vector<int> lens = c.seq_lens;
      for (auto& L : lens) L = round == 0 ? L : (int)(rng() % (b.max_len + 1));
      if (round == 2) lens[0] = b.max_len;
      // swap two logical pages of sequence 0 (table and reference both)
      Built& m = b;
      const std::int64_t np0 = m.indptr[1] - m.indptr[0];
      if (np0 >= 2) {
        std::swap(m.table[0], m.table[np0 - 1]);
        std::swap(m.table_used[0], m.table_used[np0 - 1]);
      }
      CK(cudaMemcpyAsync(b.dtable, m.table.data(), m.table.size() * 4, cudaMemcpyHostToDevice, stream));
      CK(cudaMemcpyAsync(b.dlens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice, stream));
      CK(cudaStreamSynchronize(stream));
      poison(b);
      CK(cudaGraphLaunch(exec, stream));
      CK(cudaStreamSynchronize(stream));
      Result r = fetch(b);
      std::vector<double> ref, ref_lse;
      reference(b, lens, ref, ref_lse);
      compare(path == 0 ? "g-dir" : path == 1 ? "g-split" : "g-auto", b, r, ref, ref_lse);
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaMemcpy(b.dlens, c.seq_lens.data(), c.seq_lens.size() * 4, cudaMemcpyHostToDevice));
  }
  use_kernel("mma");
  CK(cudaStreamDestroy(stream));
  for (void* p : keep) cudaFree(p);
  release(b);
}

static void run_checks() {
  int cases = 0;
  const DType kvs[] = {DType::BF16, DType::F16, DType::F32, DType::F8_E4M3, DType::F8_E5M2};
  const DType qs[] = {DType::BF16, DType::F16, DType::F32};
  const int blocks[] = {1, 7, 16, 32, 256};
  const int dims[][2] = {{128, 128}, {64, 64}, {256, 256}, {192, 128}};
  const int heads[][2] = {{8, 2}, {8, 8}, {8, 1}, {32, 8}, {12, 1}, {6, 2}};
  unsigned seed = 1;
  for (int di = 0; di < 4; ++di)
    for (int ki = 0; ki < 5; ++ki)
      for (int bi = 0; bi < 5; ++bi) {
        Config c;
        c.seed = seed++;
        c.dk = dims[di][0];
        c.dv = dims[di][1];
        c.kv = kvs[ki];
        c.q = qs[(di + ki + bi) % 3];
        c.block = blocks[bi];
        c.q_heads = heads[(ki + bi) % 6][0];
        c.kv_heads = heads[(ki + bi) % 6][1];
        c.layout = (bi + di) % 2 ? KvLayout::HND : KvLayout::NHD;
        const int B = c.block;
        c.seq_lens = {1, B - 1 > 0 ? B - 1 : 2, B + 1, 511, 512, 513, 1000 + (int)seed % 77};
        c.window = (ki + bi) % 3 == 0 ? 0 : (ki + bi) % 3 == 1 ? 100 : 513;
        c.softcap = (di + bi) % 3 == 0 ? 20.0f : 0.0f;
        c.k_scale = is_fp8(c.kv) ? 0.25f : 1.0f;
        c.v_scale = is_fp8(c.kv) ? 0.5f : 1.0f;
        c.lse = (bi % 4) != 3;
        check_case(c, 512, 600);
        ++cases;
      }
  // GQA groups past one tensor-core head tile (16, 32 = MQA over 32 heads), GQA 8 and 1,
  // 16-bit K/V, block sizes 1/7/16/32, odd lengths.
  {
    const int heads[][2] = {{32, 1}, {16, 1}, {16, 2}, {4, 4}, {24, 2}};
    const int blocks[] = {1, 7, 16, 32};
    const int dims[][2] = {{128, 128}, {64, 64}, {256, 256}, {192, 128}};
    for (int i = 0; i < 8; ++i) {
      Config c;
      c.seed = seed++;
      c.q_heads = heads[i % 5][0];
      c.kv_heads = heads[i % 5][1];
      c.block = blocks[i % 4];
      c.dk = dims[(i / 2) % 4][0];
      c.dv = dims[(i / 2) % 4][1];
      c.kv = i % 2 ? DType::F16 : DType::BF16;
      c.q = i % 3 == 0 ? DType::F32 : c.kv;
      c.softcap = i % 4 == 3 ? 30.0f : 0.0f;
      c.window = i % 3 == 2 ? 77 : 0;
      c.seq_lens = {3, 15, 16, 17, 33, 97, 333};
      check_case(c, 64, 40);
      ++cases;
    }
  }
  // window edges and partition edges
  for (std::int64_t win : {1, 2, 255, 256, 257, 4096}) {
    Config c;
    c.seed = seed++;
    c.window = win;
    c.seq_lens = {1, 255, 256, 257, 1024, 2049, 3000};
    check_case(c, 256, 300);
    ++cases;
  }
  for (std::int64_t P : {1, 16, 100, 1024}) {
    Config c;
    c.seed = seed++;
    c.seq_lens = {1, 17, 99, 100, 101, 1025, 700};
    c.q_heads = 16;
    c.kv_heads = 4;
    check_case(c, P, 100);
    ++cases;
  }
  std::printf("checks: %d cases x 3 paths, failures so far %d, worst err/tol %.3f\n", cases, g_failures, g_worst);
  // graphs
  {
    Config c;
    c.seed = 77;
    c.seq_lens = {100, 2000, 1, 777};
    check_graph(c, 256);
    c.window = 300;
    c.block = 7;
    c.layout = KvLayout::HND;
    check_graph(c, 128);
  }
  std::printf("graph checks done, failures %d\n", g_failures);
  // > 2^31 elements, block ids above 65535: 70000 blocks x 16 x 8 heads x 256 fp8 = 2.29e9 elements.
  {
    Config c;
    c.seed = 99;
    c.kv = DType::F8_E5M2;
    c.q = DType::F16;
    c.dk = c.dv = 256;
    c.q_heads = 16;
    c.kv_heads = 8;
    c.block = 16;
    c.num_blocks = 70000;
    c.high_ids = true;
    c.seq_lens = {300, 1000};
    check_case(c, 256, 500);
  }
  std::printf("large-cache check done, failures %d, worst err/tol %.3f\n", g_failures, g_worst);
}

// ---- benchmark ---------------------------------------------------------------------
static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// only_first: the bench4 shapes; target_rows: direct and split:1024 alone
// (bench4t, the rows of issue 18's targets, for side-by-side builds).
static void run_bench(bool only_first, bool target_rows = false) {
  // copy ceiling
  {
    const size_t n = 2ull << 30;
    void *a, *bb;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&bb, n));
    CK(cudaMemset(a, 1, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int i = 0; i < 8; ++i) {
      CK(cudaEventRecord(e0));
      CK(cudaMemcpyAsync(bb, a, n, cudaMemcpyDeviceToDevice));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i) t.push_back(ms);
    }
    std::printf("copy: %.1f GB/s (read+write)\n", 2.0 * n / (median(t) * 1e6));
    cudaFree(a);
    cudaFree(bb);
  }
  void* flush;
  const size_t flush_bytes = 256ull << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  struct Shape {
    int seqs, ctx;
    KvLayout layout;
    bool shuffle;
    const char* tag;
    DType kv = DType::BF16;
    bool first = false;  // in bench4
  } shapes[] = {{64, 4096, KvLayout::NHD, true, "", DType::BF16, true},
                {256, 1024, KvLayout::NHD, true, "", DType::BF16, true},
                {8, 8192, KvLayout::NHD, true, "", DType::BF16, true},
                {1, 32768, KvLayout::NHD, true, "", DType::BF16, true},
                {64, 4096, KvLayout::NHD, true, "/e4m3", DType::F8_E4M3, true},
                {64, 4096, KvLayout::NHD, false, "/seqpages"},
                {64, 4096, KvLayout::HND, true, "/HND"},
                {1, 32768, KvLayout::HND, true, "/HND"}};
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::printf("%-20s %-19s %10s %10s %10s %10s %10s\n", "shape", "path", "median_us", "min_us", "max_us", "KV_GB/s",
              "graph_us");
  for (auto sh : shapes) {
    if (only_first && !sh.first) continue;
#ifdef PC_DECODE_SWEEP_ONLY
    if (sh.kv != DType::BF16) continue;  // built for BF16 d128 alone
#endif
    Config c;
    c.seed = 5;
    c.q_heads = 32;
    c.kv_heads = 8;
    c.seq_lens.assign(sh.seqs, sh.ctx);
    c.lse = true;
    c.fast_fill = true;
    c.layout = sh.layout;
    c.shuffle = sh.shuffle;
    c.kv = sh.kv;
    Built b = build(c);
    const double kv_bytes = 2.0 * sh.seqs * (double)sh.ctx * c.kv_heads * c.dk * dtype_size(sh.kv);
    std::vector<void*> keep;
    for (int pass = 0; pass < 10; ++pass) {
      const int variant = pass / 2;
      use_kernel(pass % 2 ? "simt" : "mma");
      if ((sh.tag[0] || target_rows) && variant != 0 && variant != 3) continue;
      if (sh.kv != DType::BF16 && variant != 0) continue;
      const std::int64_t P = variant == 1 ? 256 : variant == 2 ? 512 : variant == 3 ? 1024 : 512;
      SplitWorkspace ws = variant ? make_ws(b.view, P, keep) : SplitWorkspace{};
      auto launch = [&]() {
        if (variant == 0) return launch_direct(b.view, stream);
        if (variant == 4) return launch_auto(b.view, ws, P, 2048, stream);
        return launch_split(b.view, ws, P, stream);
      };
      for (int i = 0; i < 3; ++i) ok_or_die(launch(), "bench");
      std::vector<float> t, tg;
      for (int i = 0; i < 30; ++i) {
        CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream));
        CK(cudaEventRecord(e0, stream));
        ok_or_die(launch(), "bench");
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
      }
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      ok_or_die(launch(), "capture");
      CK(cudaStreamEndCapture(stream, &graph));
      CK(cudaGraphInstantiate(&exec, graph, 0));
      CK(cudaGraphLaunch(exec, stream));
      for (int i = 0; i < 30; ++i) {
        CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream));
        CK(cudaEventRecord(e0, stream));
        CK(cudaGraphLaunch(exec, stream));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        tg.push_back(ms);
      }
      CK(cudaGraphExecDestroy(exec));
      CK(cudaGraphDestroy(graph));
      char name[32];
      std::snprintf(name, sizeof name, variant == 0 ? "direct" : variant == 4 ? "auto:%lld:2048" : "split:%lld",
                    (long long)P);
      char shape[48];
      std::snprintf(shape, sizeof shape, "%dx%d%s", sh.seqs, sh.ctx, sh.tag);
      const float med = median(t), mn = *std::min_element(t.begin(), t.end()),
                  mxx = *std::max_element(t.begin(), t.end());
      std::strncat(name, pass % 2 ? "/simt" : "/mma", sizeof name - std::strlen(name) - 1);
      std::printf("%-20s %-19s %10.1f %10.1f %10.1f %10.1f %10.1f\n", shape, name, med * 1e3, mn * 1e3, mxx * 1e3,
                  kv_bytes / (med * 1e6), median(tg) * 1e3);
    }
    for (void* p : keep) cudaFree(p);
    release(b);
  }
  CK(cudaStreamDestroy(stream));
  cudaFree(flush);
}

// ---- the bench protocol's roofline (session 10) -------------------------------
// What the bench's timing protocol (a 2 x L2 memset before each repeat, CUDA
// events around one launch, median of 30) gives a kernel that does nothing,
// and probe_device's read-only stream (harness/probe_read.cu: 16-byte
// streaming loads, four in flight a thread, 8 CTAs of 256 threads per SM)
// over each decode bench shape's K/V bytes: the best time any decode kernel
// can show in `bench` for that many bytes.
__global__ void roof_empty_kernel() {}

// The bench protocol's timing of one launch: three warm-ups, then 30
// repeats, each after a memset of twice the L2, CUDA events around the
// launch alone; the median in microseconds.
struct RoofTimer {
  std::size_t flush_bytes = 0;
  void* flush = nullptr;
  cudaStream_t stream{};
  cudaEvent_t e0{}, e1{};
  RoofTimer() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    flush_bytes = 2ull * prop.l2CacheSize;
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  ~RoofTimer() {
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(stream);
    cudaFree(flush);
  }
  template <typename Launch>
  float us(Launch launch) {
    for (int i = 0; i < 3; ++i) launch();
    std::vector<float> t;
    for (int i = 0; i < 30; ++i) {
      CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream));
      CK(cudaEventRecord(e0, stream));
      launch();
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    return median(t) * 1e3;
  }
};

static void run_roof() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  void *data;
  unsigned* sink;
  const size_t max_bytes = 1ull << 30;
  CK(cudaMalloc(&data, max_bytes + (64 << 20)));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(data, 1, max_bytes + (64 << 20)));
  RoofTimer timer;
  cudaStream_t stream = timer.stream;
  const auto timed = [&](auto launch) { return timer.us(launch); };
  const float empty_us = timed([&] { roof_empty_kernel<<<1, 32, 0, stream>>>(); });
  std::printf("roof: %s, %d SMs, flush %zu MiB; empty kernel %.2f us\n", prop.name, prop.multiProcessorCount,
              timer.flush_bytes >> 20, empty_us);
  std::printf("%-12s %12s %10s %10s\n", "shape", "bytes", "read_us", "GB/s");
  struct { const char* name; double bytes; } shapes[] = {
      {"64x4096", 2.0 * 64 * 4096 * 8 * 128 * 2}, {"256x1024", 2.0 * 256 * 1024 * 8 * 128 * 2},
      {"8x8192", 2.0 * 8 * 8192 * 8 * 128 * 2},   {"1x32768", 2.0 * 1 * 32768 * 8 * 128 * 2},
      {"1x16384", 2.0 * 1 * 16384 * 8 * 128 * 2}, {"2x32768", 2.0 * 2 * 32768 * 8 * 128 * 2}};
  for (auto sh : shapes) {
    const size_t bytes = std::min(static_cast<size_t>(sh.bytes), max_bytes);
    const float us =
        timed([&] { ok_or_die(launch_read_only(data, bytes, sink, prop.multiProcessorCount, stream), "roof"); });
    std::printf("%-12s %12zu %10.1f %10.1f\n", sh.name, bytes, us, bytes / (us * 1e3));
  }
  cudaFree(data);
  cudaFree(sink);
}

// A paged roof CTA's pages (grid: sequence x KV head x chunk of 32 pages):
// its sequence, head, and pages [first, last) of the sequence's table.
constexpr int kRoofPagesPerCta = 32;
struct RoofPages {
  int seq, head, first, last;
};
__device__ __forceinline__ RoofPages roof_pages(int pages_per_seq, int heads, int chunks) {
  const int unit = blockIdx.x, chunk = unit % chunks;
  const int first = chunk * kRoofPagesPerCta;
  return {unit / (chunks * heads), (unit / chunks) % heads, first, min(first + kRoofPagesPerCta, pages_per_seq)};
}

// The same protocol over the bench's own byte pattern (session 18): K and V
// pools of 16-slot pages (8 KV heads, head dim 128, BF16) in NHD or HND,
// every sequence's pages a shuffled draw of the pool, read by a kernel
// that only reads: a CTA per (sequence, KV head, 32 pages), four warps,
// each warp a page at a time (its head's 16 K rows and 16 V rows, 16-byte
// streaming loads, two pages in flight). What it reaches estimates what a
// decode kernel can read of that layout with 16-byte loads, to set beside
// the contiguous stream above (cuDNN reads contiguous K/V in the peers'
// bench); roof_bulk_kernel below reads the same pages by bulk copies.
template <bool kHnd>
__global__ void __launch_bounds__(128) roof_paged_kernel(const uint4* __restrict__ k, const uint4* __restrict__ v,
                                                         const int* __restrict__ table, int pages_per_seq, int heads,
                                                         int chunks, unsigned* __restrict__ sink) {
  const RoofPages cta = roof_pages(pages_per_seq, heads, chunks);
  const int seq = cta.seq, head = cta.head, first = cta.first, last = cta.last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int* t = table + static_cast<std::size_t>(seq) * pages_per_seq;
  // Lane L reads chunk L % 16 of rows L / 16 + 2 i (i = 0..7) of a page.
  const auto row = [&](int page, int slot) -> std::size_t {
    return kHnd ? ((static_cast<std::size_t>(page) * heads + head) * 16 + slot) * 16
                : ((static_cast<std::size_t>(page) * 16 + slot) * heads + head) * 16;
  };
  unsigned fold = 0;
  for (int p = first + warp; p < last; p += 8) {
    const int pages[2] = {t[p], p + 4 < last ? t[p + 4] : -1};
    uint4 x[2][16];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const std::size_t r = pages[u] >= 0 ? row(pages[u], lane / 16 + 2 * i) + lane % 16 : 0;
        x[u][i] = pages[u] >= 0 ? __ldcs(k + r) : make_uint4(0, 0, 0, 0);
        x[u][8 + i] = pages[u] >= 0 ? __ldcs(v + r) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int i = 0; i < 16; ++i) fold ^= x[u][i].x ^ x[u][i].y ^ x[u][i].z ^ x[u][i].w;
  }
  if (fold == 0x9E3779B9u) *sink = fold;
}

// The same pages by bulk copies (cp.async.bulk, the copy engine's
// one-dimensional form; no tensor map): one warp a CTA keeps kBulkStages
// page units (a page's 16 K rows and 16 V rows of its head, 8 KB) in
// flight in shared memory, each stage an mbarrier with its transaction
// bytes; NHD takes a copy of 256 bytes a row (32 a unit, a lane each), HND
// one of 4 KB for K and one for V. Nothing reads the shared memory: the
// time is the copies'. With kContig, units are 8 KB of one contiguous
// stream instead (the cuDNN side's layout).
constexpr int kBulkStages = 8;
__device__ __forceinline__ void roof_bulk_copy(std::uint32_t dst, const void* src, std::uint32_t bytes,
                                               std::uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void roof_bar_wait(std::uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// The ring of kBulkStages stage barriers that roof_bulk_kernel and
// roof_tma_kernel keep in shared memory (initialised by lane 0, one arrival
// each); a stage holds a unit: a page's 16 K and 16 V rows of one head.
constexpr int kRoofUnit = 8192;
__device__ __forceinline__ std::uint32_t roof_bar(unsigned long long* bars, int st) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(&bars[st]));
}
__device__ __forceinline__ void roof_init_bars(unsigned long long* bars) {
  if (threadIdx.x == 0)
    for (int st = 0; st < kBulkStages; ++st)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(roof_bar(bars, st)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncwarp();
}
// Stage u of the ring: wait until the unit kBulkStages before it has landed,
// then lane 0 arms it for a unit's bytes.
__device__ __forceinline__ void roof_stage_begin(unsigned long long* bars, int u) {
  const int st = u % kBulkStages;
  if (u >= kBulkStages) roof_bar_wait(roof_bar(bars, st), ((u - kBulkStages) / kBulkStages) & 1);
  if (threadIdx.x == 0)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(roof_bar(bars, st)), "r"(kRoofUnit)
                 : "memory");
}
// The last kBulkStages of n units landed.
__device__ __forceinline__ void roof_drain(unsigned long long* bars, int n) {
  for (int u = n > kBulkStages ? n - kBulkStages : 0; u < n; ++u)
    roof_bar_wait(roof_bar(bars, u % kBulkStages), (u / kBulkStages) & 1);
}
template <int kLayout>  // 0 NHD, 1 HND, 2 contiguous
__global__ void __launch_bounds__(32) roof_bulk_kernel(const char* __restrict__ k, const char* __restrict__ v,
                                                       const int* __restrict__ table, int pages_per_seq, int heads,
                                                       int chunks, std::size_t k_bytes) {
  extern __shared__ __align__(128) unsigned char roof_smem[];
  __shared__ __align__(8) unsigned long long bars[kBulkStages];
  const int lane = threadIdx.x;
  const RoofPages cta = roof_pages(pages_per_seq, heads, chunks);
  const std::uint32_t smem = static_cast<std::uint32_t>(__cvta_generic_to_shared(roof_smem));
  roof_init_bars(bars);
  const std::size_t row = 256, slot_stride = static_cast<std::size_t>(heads) * row;
  for (int p = cta.first; p < cta.last; ++p) {
    const int u = p - cta.first, st = u % kBulkStages;
    roof_stage_begin(bars, u);
    __syncwarp();
    const std::uint32_t dst = smem + st * kRoofUnit, bar = roof_bar(bars, st);
    if constexpr (kLayout == 2) {
      const std::size_t at = (static_cast<std::size_t>(blockIdx.x) * kRoofPagesPerCta + u) * kRoofUnit;  // K's bytes, then V's
      if (lane == 0) roof_bulk_copy(dst, at < k_bytes ? k + at : v + (at - k_bytes), kRoofUnit, bar);
    } else {
      const std::size_t page = static_cast<std::size_t>(table[static_cast<std::size_t>(cta.seq) * pages_per_seq + p]);
      if constexpr (kLayout == 1) {
        const std::size_t at = (page * heads + cta.head) * 16 * row;
        if (lane == 0) roof_bulk_copy(dst, k + at, 4096, bar);
        if (lane == 1) roof_bulk_copy(dst + 4096, v + at, 4096, bar);
      } else {
        const std::size_t at = page * 16 * slot_stride + (lane % 16) * slot_stride + cta.head * row;
        roof_bulk_copy(dst + lane * 256, (lane < 16 ? k : v) + at, 256, bar);
      }
    }
  }
  roof_drain(bars, cta.last - cta.first);
}

// NHD pages by tensor copies (cp.async.bulk.tensor over a tensor map of the
// K or V pool as (dim, head, slot row), boxes of 64 dims x 1 head x 16 slot
// rows, 128-byte swizzle): a page unit is 4 boxes of 2 KB (K's and V's two
// dim halves), issued by lane 0, the copy engine gathering the 16 rows of
// 256 bytes 2 KB apart that a 256-byte bulk copy each took above. The stage
// ring and the grid are roof_bulk_kernel's.
__global__ void __launch_bounds__(32) roof_tma_kernel(const __grid_constant__ CUtensorMap k_map,
                                                      const __grid_constant__ CUtensorMap v_map,
                                                      const int* __restrict__ table, int pages_per_seq, int heads,
                                                      int chunks) {
  extern __shared__ __align__(1024) unsigned char roof_tma_smem[];
  __shared__ __align__(8) unsigned long long bars[kBulkStages];
  const RoofPages cta = roof_pages(pages_per_seq, heads, chunks);
  const std::uint32_t smem = (static_cast<std::uint32_t>(__cvta_generic_to_shared(roof_tma_smem)) + 1023u) & ~1023u;
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(&k_map)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(&v_map)) : "memory");
  }
  roof_init_bars(bars);
  for (int p = cta.first; p < cta.last; ++p) {
    const int u = p - cta.first, st = u % kBulkStages;
    roof_stage_begin(bars, u);
    if (threadIdx.x == 0) {
      const int row0 = table[static_cast<std::size_t>(cta.seq) * pages_per_seq + p] * 16;
      const std::uint32_t dst = smem + st * kRoofUnit;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const CUtensorMap* map = b < 2 ? &k_map : &v_map;
        asm volatile(
            "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
            "[%5];\n" ::"r"(dst + b * 2048),
            "l"(reinterpret_cast<std::uint64_t>(map)), "r"((b % 2) * 64), "r"(cta.head), "r"(row0),
            "r"(roof_bar(bars, st))
            : "memory");
      }
    }
    __syncwarp();
  }
  roof_drain(bars, cta.last - cta.first);
}

// The NHD pool of `pages` pages as (128 dims, heads, pages * 16 slot rows),
// BF16, boxes of 64 x 1 x 16; false where the driver lacks the encoder.
static bool roof_nhd_map(CUtensorMap& map, void* base, int heads, std::size_t pages) {
  const pagecheck::gpu::EncodeTiled encode = pagecheck::gpu::encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {128, static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(pages) * 16};
  const cuuint64_t strides[2] = {256, static_cast<cuuint64_t>(heads) * 256};  // bytes: a head's row, a slot row
  const cuuint32_t box[3] = {64, 1, 16}, elem[3] = {1, 1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static void run_roof_paged() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  constexpr int kHeads = 8, kBlock = 16;
  const std::size_t page_bytes = static_cast<std::size_t>(kBlock) * kHeads * 128 * 2;  // one K (or V) page, all heads
  const int max_pages = 64 * 4096 / kBlock;                                            // the largest shape's pool
  void *k, *v;
  unsigned* sink;
  int* table;
  CK(cudaMalloc(&k, max_pages * page_bytes));
  CK(cudaMalloc(&v, max_pages * page_bytes));
  CK(cudaMemset(k, 1, max_pages * page_bytes));
  CK(cudaMemset(v, 2, max_pages * page_bytes));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&table, max_pages * sizeof(int)));
  RoofTimer timer;
  cudaStream_t stream = timer.stream;
  const auto timed = [&](auto launch) { return timer.us(launch); };
  std::printf("roof_paged: %s; block %d, %d KV heads, d128 BF16, shuffled pages, 16-byte loads\n", prop.name, kBlock,
              kHeads);
  std::printf("%-12s %-4s %12s %10s %10s\n", "shape", "lay", "bytes", "read_us", "GB/s");
  struct { const char* name; int seqs, len; } shapes[] = {{"64x4096", 64, 4096}, {"256x1024", 256, 1024},
                                                          {"8x8192", 8, 8192}, {"1x32768", 1, 32768}};
  std::mt19937 rng(18);
  const int bulk_smem = kBulkStages * 8192;  // past the 48 KB a launch gets without asking
  CK(cudaFuncSetAttribute(roof_bulk_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, bulk_smem));
  CK(cudaFuncSetAttribute(roof_bulk_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, bulk_smem));
  CK(cudaFuncSetAttribute(roof_bulk_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, bulk_smem));
  const int tma_smem = bulk_smem + 1024;  // the swizzle's 1024-byte alignment
  CK(cudaFuncSetAttribute(roof_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, tma_smem));
  CUtensorMap k_map, v_map;
  const bool have_maps = roof_nhd_map(k_map, k, kHeads, max_pages) && roof_nhd_map(v_map, v, kHeads, max_pages);
  if (!have_maps) std::printf("roof_paged: no tensor-map encoder from the driver; the tensor-copy rows are left out\n");
  for (auto sh : shapes) {
    const int pages_per_seq = sh.len / kBlock, pages = sh.seqs * pages_per_seq;
    std::vector<int> perm(pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    CK(cudaMemcpy(table, perm.data(), pages * sizeof(int), cudaMemcpyHostToDevice));
    const int chunks = (pages_per_seq + kRoofPagesPerCta - 1) / kRoofPagesPerCta;
    const int grid = sh.seqs * kHeads * chunks;
    const double bytes = 2.0 * pages * page_bytes;
    for (int hnd = 0; hnd < 2; ++hnd) {
      const float us = timed([&] {
        if (hnd)
          roof_paged_kernel<true><<<grid, 128, 0, stream>>>(static_cast<const uint4*>(k), static_cast<const uint4*>(v),
                                                            table, pages_per_seq, kHeads, chunks, sink);
        else
          roof_paged_kernel<false><<<grid, 128, 0, stream>>>(static_cast<const uint4*>(k), static_cast<const uint4*>(v),
                                                             table, pages_per_seq, kHeads, chunks, sink);
      });
      CK(cudaGetLastError());
      std::printf("%-12s %-4s %12.0f %10.1f %10.1f  (16-byte loads)\n", sh.name, hnd ? "HND" : "NHD", bytes, us,
                  bytes / (us * 1e3));
    }
    // Bulk copies: NHD, HND, and the same bytes as one contiguous stream
    // (K's pool; 8 KB units, as many CTAs).
    const int smem = bulk_smem;
    const std::size_t kv_half = static_cast<std::size_t>(pages) * page_bytes;
    for (int layout = 0; layout < 3; ++layout) {
      const char* kc = static_cast<const char*>(k);
      const char* vc = static_cast<const char*>(v);
      const float us = timed([&] {
        if (layout == 0)
          roof_bulk_kernel<0><<<grid, 32, smem, stream>>>(kc, vc, table, pages_per_seq, kHeads, chunks, kv_half);
        else if (layout == 1)
          roof_bulk_kernel<1><<<grid, 32, smem, stream>>>(kc, vc, table, pages_per_seq, kHeads, chunks, kv_half);
        else
          roof_bulk_kernel<2><<<grid, 32, smem, stream>>>(kc, vc, table, pages_per_seq, kHeads, chunks, kv_half);
      });
      CK(cudaGetLastError());
      std::printf("%-12s %-4s %12.0f %10.1f %10.1f  (bulk copies)\n", sh.name,
                  layout == 0 ? "NHD" : layout == 1 ? "HND" : "flat", bytes, us, bytes / (us * 1e3));
    }
    if (have_maps) {
      const float us = timed([&] {
        roof_tma_kernel<<<grid, 32, tma_smem, stream>>>(k_map, v_map, table, pages_per_seq, kHeads, chunks);
      });
      CK(cudaGetLastError());
      std::printf("%-12s %-4s %12.0f %10.1f %10.1f  (tensor copies)\n", sh.name, "NHD", bytes, us, bytes / (us * 1e3));
    }
  }
  cudaFree(k);
  cudaFree(v);
  cudaFree(sink);
  cudaFree(table);
}

// Defined only in a build with the split path's clock-stamp copy (per-CTA
// start and end times of the partition and merge kernels).
extern "C" __attribute__((weak)) void pc_decode_trace_dump(const char* path, int clear);

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  use_kernel(g_kernel);
  if (mode == "check" || mode == "all") run_checks();
  if (mode == "small") {  // a few small cases, for compute-sanitizer memcheck / racecheck
    // BF16 d128 and F16 d192/128 (mma), fp8 d192/128 (simt) and d256 (mma), F32 d64 (simt).
    const DType kvs[] = {DType::BF16, DType::F8_E4M3, DType::F32, DType::F8_E5M2, DType::F16};
    const int dims[][2] = {{128, 128}, {192, 128}, {64, 64}, {256, 256}, {192, 128}};
    for (int i = 0; i < 5; ++i) {
      Config c;
      c.seed = 500 + i;
      c.kv = kvs[i];
      c.q = i == 2 ? DType::F32 : DType::BF16;
      c.dk = dims[i][0];
      c.dv = dims[i][1];
      c.block = i == 1 ? 7 : i == 3 ? 32 : i == 4 ? 1 : 16;
      c.layout = i == 1 || i == 4 ? KvLayout::HND : KvLayout::NHD;
      c.q_heads = 8;
      c.kv_heads = i == 2 || i == 3 ? 1 : 2;
      c.window = i == 1 || i == 4 ? 50 : 0;
      c.k_scale = is_fp8(c.kv) ? 0.25f : 1.0f;
      c.v_scale = is_fp8(c.kv) ? 0.5f : 1.0f;
      c.softcap = i == 2 ? 10.0f : 0.0f;
      c.seq_lens = {1, 7, 100, 300};
      check_case(c, 64, 90);
    }
    Config c;
    c.seq_lens = {20, 200};
    check_graph(c, 64);
  }
  if (mode == "bench" || mode == "all") run_bench(false);
  if (mode == "bench4") run_bench(true);
  if (mode == "bench4t") run_bench(true, true);
  if (mode == "roof") run_roof();
  if (mode == "roof" || mode == "roof_paged") run_roof_paged();
  if (mode == "ncu1") {  // 64 x 4096 direct, 1 x 32768 split at partitions 512 and 1024, 8 x 8192 split 1024
    for (int pass = 0; pass < 8; ++pass) {
      const int which = pass % 4;
      use_kernel(pass < 4 ? "mma" : "simt");
      Config c;
      c.q_heads = 32;
      c.kv_heads = 8;
      const int seqs[] = {64, 1, 1, 8}, ctx[] = {4096, 32768, 32768, 8192};
      const std::int64_t parts[] = {512, 512, 1024, 1024};
      c.seq_lens.assign(seqs[which], ctx[which]);
      c.fast_fill = true;
      Built b = build(c);
      std::vector<void*> keep;
      SplitWorkspace ws = make_ws(b.view, parts[which], keep);
      ok_or_die(which ? launch_split(b.view, ws, parts[which], 0) : launch_direct(b.view, 0), "ncu1");
      CK(cudaDeviceSynchronize());
      for (void* p : keep) cudaFree(p);
      release(b);
    }
  }
  if (mode == "trace" && pc_decode_trace_dump != nullptr) {  // trace SEQS CTX PARTITION OUTFILE
    Config c;
    c.q_heads = 32;
    c.kv_heads = 8;
    c.seq_lens.assign(std::atoi(argv[2]), std::atoi(argv[3]));
    c.fast_fill = true;
    c.shuffle = true;
    Built b = build(c);
    std::vector<void*> keep;
    const std::int64_t part = std::atoi(argv[4]);
    SplitWorkspace ws = make_ws(b.view, part, keep);
    void* flush;
    CK(cudaMalloc(&flush, 256ull << 20));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 6; ++i) {
      CK(cudaMemset(flush, i, 256ull << 20));
      if (i == 5) pc_decode_trace_dump(argv[5], 1);
      CK(cudaEventRecord(e0));
      ok_or_die(launch_split(b.view, ws, part, 0), "trace");
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      std::printf("trace %dx%d split:%lld launch %d: %.1f us\n", std::atoi(argv[2]), std::atoi(argv[3]),
                  (long long)part, i, ms * 1e3);
    }
    pc_decode_trace_dump(argv[5], 0);
    for (void* p : keep) cudaFree(p);
    release(b);
  }
  std::printf("RESULT failures=%d worst_err_over_tol=%.3f\n", g_failures, g_worst);
  return g_failures ? 1 : 0;
}
