// Scratch driver for prefill.cu and fmha.cu (not part of the library build).
// Builds random paged cases on the host (shuffled pages, NaN in unused slots),
// runs launch_prefill and launch_gather + launch_fmha, compares with a float64
// CPU loop, counts unwritten (NaN-poisoned) outputs, checks bitwise
// repeatability, then times the benchmark shapes with CUDA events (warm-up,
// L2 flushed before each repeat, median).
//
// Build (from the repo root), portable kernels only:
//   nvcc -std=c++20 -gencode arch=compute_90,code=sm_90 -O3 --expt-relaxed-constexpr -lineinfo \
//     -Ilib/include -Ikernels/src -Ikernels/include -I/usr/include/eigen3 kernels/src/dev/prefill_dev.cu \
//     kernels/src/prefill/prefill.cu kernels/src/prefill/fmha.cu lib/src/dtype.cpp -o devbin/prefill_dev
// With the sm_90a wgmma kernel (what the launchers pick on a Hopper), see
// scripts/prefill_dev_run.sh, which also runs it on the GPU machine.
// Run: devbin/prefill_dev [check] [bench] [small]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/launchers.cuh"

using namespace pagecheck;
using namespace pagecheck::gpu;

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

static int g_failures = 0;

struct Spec {
  std::vector<int> q_lens, seq_lens;
  int q_heads = 32, kv_heads = 8, dk = 128, dv = 128, block = 16;
  DType q_dtype = DType::BF16, kv_dtype = DType::BF16;
  bool causal = true;
  std::int64_t window = 0;
  float softcap = 0.f;
  KvLayout layout = KvLayout::NHD;
  float k_scale = 1.f, v_scale = 1.f;
  bool lse = true;
  std::string label;
};

static std::size_t esize(DType d) {
  switch (d) {
    case DType::F32: return 4;
    case DType::F16: case DType::BF16: return 2;
    default: return 1;
  }
}
// Stores x rounded to d at element i; returns the stored value.
static double store(DType d, std::vector<unsigned char>& buf, std::size_t i, float x) {
  switch (d) {
    case DType::F32: std::memcpy(&buf[i * 4], &x, 4); return x;
    case DType::F16: { __half h = __float2half_rn(x); std::memcpy(&buf[i * 2], &h, 2); return __half2float(h); }
    case DType::BF16: { __nv_bfloat16 h = __float2bfloat16_rn(x); std::memcpy(&buf[i * 2], &h, 2); return __bfloat162float(h); }
    case DType::F8_E4M3: { __nv_fp8_e4m3 h(x); std::memcpy(&buf[i], &h, 1); return static_cast<float>(h); }
    case DType::F8_E5M2: { __nv_fp8_e5m2 h(x); std::memcpy(&buf[i], &h, 1); return static_cast<float>(h); }
    default: return 0;
  }
}
static double load(DType d, const std::vector<unsigned char>& buf, std::size_t i) {
  switch (d) {
    case DType::F32: { float x; std::memcpy(&x, &buf[i * 4], 4); return x; }
    case DType::F16: { __half h; std::memcpy(&h, &buf[i * 2], 2); return __half2float(h); }
    case DType::BF16: { __nv_bfloat16 h; std::memcpy(&h, &buf[i * 2], 2); return __bfloat162float(h); }
    // (FP8 read as 0 until session 18: the benchmark's sampled check of an
    // FP8 cache compared the kernels with a zero cache and failed.)
    case DType::F8_E4M3: { __nv_fp8_e4m3 h; h.__x = buf[i]; return static_cast<float>(h); }
    case DType::F8_E5M2: { __nv_fp8_e5m2 h; h.__x = buf[i]; return static_cast<float>(h); }
    default: return 0;
  }
}
static void fill_nan(DType d, std::vector<unsigned char>& buf, std::size_t i) {
  store(d, buf, i, NAN);
  if (d == DType::F8_E5M2 || d == DType::F8_E4M3) buf[i] = 0x7f;
}

struct HostCase {
  Spec s;
  std::vector<int> qsl;  // query_start_loc
  std::vector<std::int64_t> indptr;
  std::vector<int> indices;
  std::int64_t num_blocks = 0, num_tokens = 0;
  std::vector<unsigned char> q, k, v;
  std::vector<double> qd, kd, vd;  // stored values widened (no scales)
  PagedKvView view;  // host pointers
};

static HostCase make_case(const Spec& s, std::uint64_t seed, bool fill_values = true) {
  HostCase c;
  c.s = s;
  std::mt19937_64 rng(seed);
  const int n = static_cast<int>(s.seq_lens.size());
  c.qsl.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) c.qsl[i + 1] = c.qsl[i] + s.q_lens[i];
  c.num_tokens = c.qsl[n];
  c.indptr.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) c.indptr[i + 1] = c.indptr[i] + (s.seq_lens[i] + s.block - 1) / s.block + 1;  // one spare entry
  c.num_blocks = c.indptr[n] + 3;
  std::vector<int> perm(c.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin() + 1, perm.end(), rng);
  // Block 0 is never in a table (it stays NaN): a kernel that copies page 0
  // for an entry it did not read shows. pagecheck's own pools caught one so
  // (the tensor-copy kernel's whole boxes past key_hi, 2026-12-04).
  std::rotate(perm.begin(), perm.begin() + 1, perm.end());
  c.indices.assign(perm.begin(), perm.begin() + c.indptr[n]);
  const std::int64_t kelems = c.num_blocks * s.block * s.kv_heads * s.dk;
  const std::int64_t velems = c.num_blocks * s.block * s.kv_heads * s.dv;
  c.k.assign(kelems * esize(s.kv_dtype), 0);
  c.v.assign(velems * esize(s.kv_dtype), 0);
  c.kd.assign(kelems, NAN);
  c.vd.assign(velems, NAN);
  c.q.assign(c.num_tokens * s.q_heads * s.dk * esize(s.q_dtype), 0);
  c.qd.assign(c.num_tokens * s.q_heads * s.dk, 0);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const float kmul = 1.0f / s.k_scale, vmul = 1.0f / s.v_scale;
  if (fill_values) {
    for (std::int64_t i = 0; i < kelems; ++i) fill_nan(s.kv_dtype, c.k, i);
    for (std::int64_t i = 0; i < velems; ++i) fill_nan(s.kv_dtype, c.v, i);
  }
  c.view.block_size = s.block;
  c.view.kv_heads = s.kv_heads;
  c.view.head_dim = s.dk;
  c.view.v_head_dim = s.dv;
  c.view.num_seqs = n;
  c.view.num_blocks = c.num_blocks;
  c.view.key_strides = cache_strides(s.layout, s.block, s.kv_heads, s.dk);
  c.view.value_strides = cache_strides(s.layout, s.block, s.kv_heads, s.dv);
  c.view.page_indices = c.indices.data();
  c.view.page_indptr = c.indptr.data();
  c.view.seq_lens = s.seq_lens.data();
  c.s = s;
  c.view.seq_lens = c.s.seq_lens.data();
  if (!fill_values) {  // benchmark: random bytes fast, no NaN slots
    for (auto& b : c.k) b = static_cast<unsigned char>(rng());
    for (auto& b : c.v) b = static_cast<unsigned char>(rng());
    // keep 16-bit values finite and small: clear exponent high bits
    if (esize(s.kv_dtype) == 2) {
      for (std::size_t i = 1; i < c.k.size(); i += 2) c.k[i] &= 0xBF;
      for (std::size_t i = 1; i < c.v.size(); i += 2) c.v[i] &= 0xBF;
    }
    // FP8: the top exponent bit cleared (no NaN or inf encodings)
    if (esize(s.kv_dtype) == 1) {
      for (auto& b : c.k) b &= 0xBF;
      for (auto& b : c.v) b &= 0xBF;
    }
    for (std::int64_t i = 0; i < c.num_tokens * s.q_heads * s.dk; ++i) c.qd[i] = store(s.q_dtype, c.q, i, uni(rng));
    for (std::int64_t i = 0; i < kelems; ++i) c.kd[i] = 0;
    return c;
  }
  for (int seq = 0; seq < n; ++seq)
    for (int j = 0; j < c.s.seq_lens[seq]; ++j)
      for (int h = 0; h < s.kv_heads; ++h) {
        const std::int64_t ko = c.view.key_offset(seq, j, h), vo = c.view.value_offset(seq, j, h);
        for (int d = 0; d < s.dk; ++d) c.kd[ko + d] = store(s.kv_dtype, c.k, ko + d, uni(rng) * 2.f * kmul);
        for (int d = 0; d < s.dv; ++d) c.vd[vo + d] = store(s.kv_dtype, c.v, vo + d, uni(rng) * vmul);
      }
  for (std::int64_t i = 0; i < c.num_tokens * s.q_heads * s.dk; ++i) c.qd[i] = store(s.q_dtype, c.q, i, uni(rng));
  return c;
}

// float64 reference of rows (token, head); out [dv], lse.
static void reference_row(const HostCase& c, int seq, int i, int head, std::vector<double>& out, double& lse) {
  const Spec& s = c.s;
  const int q_len = s.q_lens[seq], seq_len = s.seq_lens[seq];
  const int pos = seq_len - q_len + i;
  const int kvh = head / (s.q_heads / s.kv_heads);
  const std::int64_t token = c.qsl[seq] + i;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.dk));
  std::vector<double> logits;
  std::vector<int> keys;
  for (int j = 0; j < seq_len; ++j) {
    if (!key_visible(j, pos, s.causal, s.window)) continue;
    const std::int64_t ko = c.view.key_offset(seq, j, kvh);
    double dot = 0;
    for (int d = 0; d < s.dk; ++d) dot += c.qd[(token * s.q_heads + head) * s.dk + d] * c.kd[ko + d] * s.k_scale;
    double x = dot * scale;
    if (s.softcap > 0) x = s.softcap * std::tanh(x / s.softcap);
    logits.push_back(x);
    keys.push_back(j);
  }
  out.assign(s.dv, 0.0);
  if (logits.empty()) { lse = -INFINITY; return; }
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double& x : logits) { x = std::exp(x - mx); sum += x; }
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const std::int64_t vo = c.view.value_offset(seq, keys[k], kvh);
    for (int d = 0; d < s.dv; ++d) out[d] += logits[k] / sum * c.vd[vo + d] * s.v_scale;
  }
  lse = mx + std::log(sum);
}

struct DevCase {
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *ws_k = nullptr, *ws_v = nullptr;
  int* qsl = nullptr; std::int64_t* indptr = nullptr; int* indices = nullptr; int* seq_lens = nullptr;
  float* lse = nullptr;
  DeviceCaseView view;
  FmhaWorkspace ws;
  std::size_t out_bytes = 0;
};

template <class T>
static T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(&d, std::max<std::size_t>(16, h.size() * sizeof(T))));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

static DevCase to_device(const HostCase& c) {
  DevCase d;
  const Spec& s = c.s;
  d.q = upload(c.q); d.k = upload(c.k); d.v = upload(c.v);
  d.qsl = upload(c.qsl); d.indptr = upload(c.indptr); d.indices = upload(c.indices); d.seq_lens = upload(s.seq_lens);
  d.out_bytes = c.num_tokens * s.q_heads * s.dv * esize(s.q_dtype);
  CK(cudaMalloc(&d.out, std::max<std::size_t>(16, d.out_bytes)));
  CK(cudaMalloc(&d.lse, std::max<std::size_t>(16, c.num_tokens * s.q_heads * 4)));
  d.view.kv = c.view;
  d.view.kv.key_data = d.k; d.view.kv.value_data = d.v;
  d.view.kv.page_indices = d.indices; d.view.kv.page_indptr = d.indptr; d.view.kv.seq_lens = d.seq_lens;
  d.view.kv_dtype = s.kv_dtype;
  d.view.query = d.q; d.view.query_dtype = s.q_dtype; d.view.query_start_loc = d.qsl;
  d.view.output = d.out; d.view.output_dtype = s.q_dtype;
  d.view.lse = s.lse ? d.lse : nullptr;
  d.view.num_tokens = c.num_tokens; d.view.q_heads = s.q_heads;
  d.view.max_q_len = *std::max_element(s.q_lens.begin(), s.q_lens.end());
  d.view.max_seq_len = *std::max_element(s.seq_lens.begin(), s.seq_lens.end());
  d.view.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.dk)));
  d.view.softcap = s.softcap; d.view.k_scale = s.k_scale; d.view.v_scale = s.v_scale;
  d.view.window = s.window; d.view.causal = s.causal;
  if (s.kv_dtype == DType::BF16 && s.dk == 128 && s.dv == 128) {
    const std::size_t bytes = fmha_workspace_bytes_each(d.view);
    CK(cudaMalloc(&d.ws_k, std::max<std::size_t>(16, bytes)));
    CK(cudaMalloc(&d.ws_v, std::max<std::size_t>(16, bytes)));
    CK(cudaMemset(d.ws_k, 0xFF, bytes)); CK(cudaMemset(d.ws_v, 0xFF, bytes));
    d.ws = FmhaWorkspace{d.ws_k, d.ws_v, d.view.max_seq_len};
  }
  return d;
}
static void free_dev(DevCase& d) {
  for (void* p : {d.q, d.k, d.v, d.out, d.ws_k, d.ws_v, (void*)d.qsl, (void*)d.indptr, (void*)d.indices,
                  (void*)d.seq_lens, (void*)d.lse})
    if (p) CK(cudaFree(p));
}

static bool run_path(const char* path, DevCase& d) {
  Status st;
  if (std::strcmp(path, "prefill") == 0) st = launch_prefill(d.view, 0);
  else {
    st = launch_gather(d.view, d.ws, 0);
    if (st.ok()) st = launch_fmha(d.view, d.ws, 0);
  }
  if (!st.ok()) { std::printf("  %s: launcher error: %s\n", path, st.error().describe().c_str()); return false; }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return true;
}

static std::vector<double> fetch_out(const HostCase& c, const DevCase& d, std::vector<float>& lse) {
  std::vector<unsigned char> raw(d.out_bytes);
  CK(cudaMemcpy(raw.data(), d.out, d.out_bytes, cudaMemcpyDeviceToHost));
  std::vector<double> out(c.num_tokens * c.s.q_heads * c.s.dv);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = load(c.s.q_dtype, raw, i);
  lse.assign(c.num_tokens * c.s.q_heads, 0);
  CK(cudaMemcpy(lse.data(), d.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

// Runs one path on a case: poison, run twice (bitwise), compare rows with
// the float64 reference (every row, or `sample` random rows when > 0).
static void check_path(const char* path, const HostCase& c, DevCase& d, int sample, double tol) {
  CK(cudaMemset(d.out, 0xFF, d.out_bytes));
  CK(cudaMemset(d.lse, 0xFF, c.num_tokens * c.s.q_heads * 4));
  if (!run_path(path, d)) { ++g_failures; return; }
  std::vector<float> lse;
  const std::vector<double> out = fetch_out(c, d, lse);
  std::vector<unsigned char> first(d.out_bytes);
  CK(cudaMemcpy(first.data(), d.out, d.out_bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemset(d.out, 0xFF, d.out_bytes));
  run_path(path, d);
  std::vector<unsigned char> second(d.out_bytes);
  CK(cudaMemcpy(second.data(), d.out, d.out_bytes, cudaMemcpyDeviceToHost));
  const bool repeatable = first == second;
  std::int64_t unwritten = 0;
  for (double x : out) unwritten += std::isnan(x);
  std::int64_t lse_unwritten = 0;
  if (c.s.lse) for (float x : lse) lse_unwritten += std::isnan(x);
  const Spec& s = c.s;
  double err2 = 0, ref2 = 0, max_abs = 0, lse_err = 0;
  std::mt19937 rng(7);
  std::vector<double> ref;
  double ref_lse;
  auto do_row = [&](int seq, int i, int head) {
    reference_row(c, seq, i, head, ref, ref_lse);
    const std::int64_t token = c.qsl[seq] + i;
    for (int dd = 0; dd < s.dv; ++dd) {
      const double got = out[(token * s.q_heads + head) * s.dv + dd];
      const double diff = std::isnan(got) ? 1e9 : got - ref[dd];
      err2 += diff * diff; ref2 += ref[dd] * ref[dd]; max_abs = std::max(max_abs, std::fabs(diff));
    }
    if (s.lse) {
      const double got = lse[token * s.q_heads + head];
      const double diff = (std::isinf(ref_lse) && std::isinf(got)) ? 0 : std::fabs(got - ref_lse);
      lse_err = std::max(lse_err, std::isnan(diff) ? 1e9 : diff);
    }
  };
  const int n = static_cast<int>(s.seq_lens.size());
  if (sample <= 0) {
    for (int seq = 0; seq < n; ++seq)
      for (int i = 0; i < s.q_lens[seq]; ++i)
        for (int h = 0; h < s.q_heads; ++h) do_row(seq, i, h);
  } else {
    for (int k = 0; k < sample; ++k) {
      const int seq = rng() % n;
      const int i = k % 4 == 0 ? s.q_lens[seq] - 1 : static_cast<int>(rng() % s.q_lens[seq]);
      do_row(seq, i, rng() % s.q_heads);
    }
  }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-300));
  const bool ok = rel < tol && unwritten == 0 && lse_unwritten == 0 && repeatable && lse_err < 1e-2;
  if (!ok) ++g_failures;
  std::printf("  %-7s %-58s rel %.2e max_abs %.2e lse_err %.1e unwritten %lld/%lld repeat %s %s\n", path,
              s.label.c_str(), rel, max_abs, lse_err, (long long)unwritten, (long long)lse_unwritten,
              repeatable ? "ok" : "DIFF", ok ? "PASS" : "FAIL");
}

static double tol_for(const Spec& s) {
  if (s.kv_dtype == DType::F32 && s.q_dtype == DType::F32) return 1e-5;
  if (s.kv_dtype == DType::F16 && s.q_dtype != DType::BF16) return 4e-3;
  return 1.5e-2;
}

// sample > 0: that many output rows against the reference (for cases with
// more work tiles than the GPU has SMs, where the reference of every row
// would take the CPU minutes); unwritten outputs are counted over all rows.
static void run_check(Spec s, std::uint64_t seed, int sample = 0) {
  char buf[256];
  std::string qs, ks;
  for (std::size_t i = 0; i < s.q_lens.size(); ++i) {
    qs += (i ? "," : "") + std::to_string(s.q_lens[i]);
    ks += (i ? "," : "") + std::to_string(s.seq_lens[i]);
  }
  std::snprintf(buf, sizeof buf, "q[%s] kv[%s] h%d/%d d%d/%d b%d %s/%s%s w%lld cap%.0f%s", qs.c_str(), ks.c_str(),
                s.q_heads, s.kv_heads, s.dk, s.dv, s.block, std::string(dtype_name(s.q_dtype)).c_str(),
                std::string(dtype_name(s.kv_dtype)).c_str(), s.causal ? "" : " noncausal", (long long)s.window,
                s.softcap, s.layout == KvLayout::HND ? " HND" : "");
  s.label = buf;
  HostCase c = make_case(s, seed);
  DevCase d = to_device(c);
  if (s.dk == 64) std::printf("  (prefill kernel: %s)\n", prefill_kernel_name(d.view));
  check_path("prefill", c, d, sample, tol_for(s));
  if (d.ws_k) check_path("fmha", c, d, sample, tol_for(s));
  free_dev(d);
}

// Capture each path once into a CUDA graph at capacity, then shorten the
// contexts and swap two pages in place, replay, and require the replay to
// equal a fresh eager run bitwise (and the float64 reference).
static void graph_check() {
  std::printf("== graph capture / replay ==\n");
  Spec s; s.q_lens = {17, 1, 64}; s.seq_lens = {300, 200, 128}; s.q_heads = 8; s.kv_heads = 2; s.block = 16;
  s.label = "graph q[17,1,64] kv[300,200,128] -> changed kv + page swap";
  HostCase c = make_case(s, 77);
  DevCase d = to_device(c);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const char* path : {"prefill", "fmha"}) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    Status st = std::strcmp(path, "prefill") == 0 ? launch_prefill(d.view, stream) : launch_gather(d.view, d.ws, stream);
    if (st.ok() && std::strcmp(path, "fmha") == 0) st = launch_fmha(d.view, d.ws, stream);
    CK(cudaStreamEndCapture(stream, &graph));
    if (!st.ok()) { std::printf("  capture failed: %s\n", st.error().describe().c_str()); ++g_failures; continue; }
    CK(cudaGraphInstantiate(&exec, graph, 0));
    // Replay as captured once, then change lengths and the table in place.
    CK(cudaGraphLaunch(exec, stream));
    CK(cudaStreamSynchronize(stream));
    HostCase& h = c;
    h.s.seq_lens = {260, 150, 100};  // view.seq_lens points into this vector
    if (std::strcmp(path, "fmha") == 0) h.s.seq_lens = {240, 170, 90};
    std::swap(h.indices[0], h.indices[h.indptr[1] + 2]);
    CK(cudaMemcpy(d.seq_lens, h.s.seq_lens.data(), h.s.seq_lens.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.indices, h.indices.data(), h.indices.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(d.out, 0xFF, d.out_bytes));
    CK(cudaGraphLaunch(exec, stream));
    CK(cudaStreamSynchronize(stream));
    std::vector<unsigned char> replay(d.out_bytes), eager(d.out_bytes);
    CK(cudaMemcpy(replay.data(), d.out, d.out_bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemset(d.out, 0xFF, d.out_bytes));
    run_path(path, d);
    CK(cudaMemcpy(eager.data(), d.out, d.out_bytes, cudaMemcpyDeviceToHost));
    const bool same = replay == eager;
    if (!same) ++g_failures;
    std::printf("  %-7s replay after in-place change %s eager run\n", path, same ? "== (bitwise)" : "!= (FAIL)");
    check_path(path, c, d, 0, tol_for(c.s));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
  }
  CK(cudaStreamDestroy(stream));
  free_dev(d);
}

// A few cases for compute-sanitizer (memcheck, racecheck).
static void small_checks() {
  std::printf("== small suite ==\n");
  { Spec s; s.q_lens = {1, 64, 3, 70}; s.seq_lens = {100, 64, 1, 150}; s.q_heads = 8; s.kv_heads = 2; s.block = 7; run_check(s, 11); }
  { Spec s; s.q_lens = {40}; s.seq_lens = {130}; s.q_heads = 4; s.kv_heads = 2; s.window = 33; s.block = 16; s.layout = KvLayout::HND; run_check(s, 12); }
  { Spec s; s.q_lens = {300, 1, 64}; s.seq_lens = {700, 129, 64}; s.q_heads = 8; s.kv_heads = 2; s.window = 200; s.block = 8; run_check(s, 16); }
  { Spec s; s.q_lens = {130}; s.seq_lens = {500}; s.q_heads = 4; s.kv_heads = 2; s.block = 256; s.q_dtype = DType::F32; run_check(s, 17); }
  { Spec s; s.q_lens = {33}; s.seq_lens = {90}; s.q_heads = 4; s.kv_heads = 2; s.dk = 192; s.dv = 128; s.kv_dtype = DType::F8_E4M3; run_check(s, 13); }
  { Spec s; s.q_lens = {20}; s.seq_lens = {70}; s.q_heads = 4; s.kv_heads = 2; s.dk = 256; s.dv = 256; s.kv_dtype = DType::F16; s.q_dtype = DType::F32; run_check(s, 14); }
  { Spec s; s.q_lens = {20}; s.seq_lens = {70}; s.q_heads = 2; s.kv_heads = 1; s.dk = 64; s.dv = 64; s.kv_dtype = DType::F32; s.q_dtype = DType::F32; run_check(s, 15); }
  // FP8 at head dim 128 (the ws kernel's staged producer under
  // PAGECHECK_WS_FP8=1): several key tiles and work tiles, a partial tile,
  // pages of 7 and 16 slots, a window.
  { Spec s; s.q_lens = {130, 1}; s.seq_lens = {400, 129}; s.q_heads = 8; s.kv_heads = 2; s.block = 16; s.kv_dtype = DType::F8_E4M3; run_check(s, 18); }
  { Spec s; s.q_lens = {64}; s.seq_lens = {300}; s.q_heads = 4; s.kv_heads = 2; s.block = 7; s.window = 100; s.kv_dtype = DType::F8_E5M2; run_check(s, 19); }
  // Head dim 64 in the ws kernel: rows (block 7) and tensor copies (block
  // 64 with an edge page), several key and work tiles, a window, F32 query.
  { Spec s; s.q_lens = {130, 1}; s.seq_lens = {400, 129}; s.q_heads = 8; s.kv_heads = 2; s.dk = 64; s.dv = 64; s.block = 7; s.window = 150; run_check(s, 20); }
  { Spec s; s.q_lens = {130, 3}; s.seq_lens = {300, 70}; s.q_heads = 8; s.kv_heads = 2; s.dk = 64; s.dv = 64; s.block = 64; s.q_dtype = DType::F32; run_check(s, 21); }
  // Several work tiles a CTA (256 > the SMs): the work loop's boundary
  // (PAGECHECK_WS_EARLY_S's S_0 under the epilogue, the Q buffers' turns).
  { Spec s; s.q_lens = {1024}; s.seq_lens = {1024}; s.q_heads = 32; s.kv_heads = 8; s.block = 16; run_check(s, 22, 1500); }
  { Spec s; s.q_lens = {1024}; s.seq_lens = {1024}; s.q_heads = 32; s.kv_heads = 8; s.dk = 64; s.dv = 64; s.block = 16; run_check(s, 23, 1500); }
}

static void checks() {
  std::printf("== correctness ==\n");
  std::uint64_t seed = 1;
  // q_len x kv_len sweep with block sizes, GQA 4.
  const int qls[] = {1, 17, 127};
  const int kvs[] = {54, 97, 512};
  const int blocks[] = {1, 7, 8, 16, 64, 256};
  for (int b : blocks)
    for (int ql : qls)
      for (int kv : kvs) {
        if (ql > kv) continue;
        Spec s; s.q_lens = {ql, std::min(ql, 5)}; s.seq_lens = {kv, kv / 2 + 5}; s.q_heads = 8; s.kv_heads = 2; s.block = b;
        run_check(s, seed++);
      }
  for (int b : {1, 7, 16, 32, 128, 256}) {
    Spec s; s.q_lens = {577, 2, 64}; s.seq_lens = {2048, 97, 54}; s.q_heads = 8; s.kv_heads = 2; s.block = b;
    run_check(s, seed++);
  }
  // Several work tiles a CTA (512 work tiles): the work loop's boundary
  // (PAGECHECK_WS_EARLY_S), row producer (block 16) and tensor copies (64),
  // head dims 128 and 64, and one whose sequences end inside a work tile.
  for (int dk : {128, 64})
    for (int b : {16, 64}) {
      Spec s; s.q_lens = {1100, 900}; s.seq_lens = {1100, 1400}; s.q_heads = 32; s.kv_heads = 8; s.dk = dk; s.dv = dk;
      s.block = b; run_check(s, seed++, 4000);
    }
  { Spec s; s.q_lens = {1000, 700, 333}; s.seq_lens = {1000, 2000, 333}; s.q_heads = 32; s.kv_heads = 8; s.block = 16; s.softcap = 30.f; run_check(s, seed++, 4000); }
  // Mixed batch: decode + prefill + chunked.
  { Spec s; s.q_lens = {1, 64, 1, 200, 2}; s.seq_lens = {300, 64, 1, 700, 33}; run_check(s, seed++); }
  // Windows at their edges, softcap, non-causal.
  for (int b : {7, 16})
    for (std::int64_t w : {1, 16, 63, 64, 65, 200}) {
      Spec s; s.q_lens = {127, 17}; s.seq_lens = {300, 97}; s.q_heads = 8; s.kv_heads = 2; s.window = w; s.block = b;
      run_check(s, seed++);
    }
  { Spec s; s.q_lens = {77, 5}; s.seq_lens = {200, 90}; s.q_heads = 8; s.kv_heads = 2; s.softcap = 5.f; run_check(s, seed++); }
  { Spec s; s.q_lens = {77, 5}; s.seq_lens = {200, 90}; s.q_heads = 8; s.kv_heads = 2; s.causal = false; run_check(s, seed++); }
  { Spec s; s.q_lens = {77, 5}; s.seq_lens = {200, 90}; s.q_heads = 8; s.kv_heads = 2; s.causal = false; s.window = 50; run_check(s, seed++); }
  // GQA ratios: MHA, 3, MQA.
  for (auto [qh, kvh] : {std::pair{4, 4}, {6, 2}, {16, 1}}) {
    Spec s; s.q_lens = {70, 1}; s.seq_lens = {150, 40}; s.q_heads = qh; s.kv_heads = kvh; s.block = 16;
    run_check(s, seed++);
  }
  // Head dims, dtypes, layouts.
  for (auto [dk, dv] : {std::pair{64, 64}, {256, 256}, {192, 128}}) {
    Spec s; s.q_lens = {70, 1}; s.seq_lens = {150, 40}; s.q_heads = 4; s.kv_heads = 2; s.dk = dk; s.dv = dv; s.block = 7;
    run_check(s, seed++);
  }
  // Head dim 64 (the ws kernel's one-column-half tiles): every loader (rows
  // at blocks 1 / 7 / 16, tensor copies at 32 / 64 / 256), both layouts,
  // F16 and the split F32 query, windows, softcap, non-causal, GQA 1 / 3 /
  // 8 / MQA, several work tiles and key tiles, the output by tensor copy
  // (BF16 query, group dividing 16) and by rows (group 3).
  for (int b : {1, 7, 16, 32, 64, 256}) {
    Spec s; s.q_lens = {577, 2, 64}; s.seq_lens = {1100, 97, 54}; s.q_heads = 8; s.kv_heads = 2; s.dk = 64; s.dv = 64;
    s.block = b; run_check(s, seed++);
  }
  for (KvLayout layout : {KvLayout::NHD, KvLayout::HND})
    for (DType q : {DType::BF16, DType::F16, DType::F32})
      for (DType kv : {DType::BF16, DType::F16}) {
        Spec s; s.q_lens = {150, 3}; s.seq_lens = {300, 60}; s.q_heads = 8; s.kv_heads = 2; s.dk = 64; s.dv = 64;
        s.q_dtype = q; s.kv_dtype = kv; s.layout = layout; s.block = kv == DType::BF16 ? 16 : 64;
        run_check(s, seed++);
      }
  for (std::int64_t w : {1, 64, 129}) {
    Spec s; s.q_lens = {200, 17}; s.seq_lens = {400, 97}; s.q_heads = 8; s.kv_heads = 2; s.dk = 64; s.dv = 64; s.window = w;
    s.block = 16; run_check(s, seed++);
  }
  { Spec s; s.q_lens = {77, 5}; s.seq_lens = {200, 90}; s.q_heads = 8; s.kv_heads = 2; s.dk = 64; s.dv = 64; s.softcap = 5.f; run_check(s, seed++); }
  { Spec s; s.q_lens = {77, 5}; s.seq_lens = {300, 90}; s.q_heads = 8; s.kv_heads = 2; s.dk = 64; s.dv = 64; s.causal = false; s.block = 64; run_check(s, seed++); }
  for (auto [qh, kvh] : {std::pair{4, 4}, {6, 2}, {16, 2}, {16, 1}}) {
    Spec s; s.q_lens = {70, 1}; s.seq_lens = {150, 40}; s.q_heads = qh; s.kv_heads = kvh; s.dk = 64; s.dv = 64; s.block = 32;
    run_check(s, seed++);
  }
  for (DType q : {DType::F32, DType::F16, DType::BF16})
    for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}) {
      Spec s; s.q_lens = {40, 3}; s.seq_lens = {100, 60}; s.q_heads = 4; s.kv_heads = 2; s.q_dtype = q; s.kv_dtype = kv;
      s.block = 16; s.layout = KvLayout::HND;
      if (kv == DType::F8_E4M3 || kv == DType::F8_E5M2) { s.k_scale = 0.5f; s.v_scale = 2.f; }
      run_check(s, seed++);
    }
  { Spec s; s.q_lens = {33}; s.seq_lens = {90}; s.q_heads = 4; s.kv_heads = 2; s.dk = 192; s.dv = 128; s.kv_dtype = DType::F8_E4M3; s.lse = false; run_check(s, seed++); }
  { Spec s; s.q_lens = {33}; s.seq_lens = {90}; s.q_heads = 4; s.kv_heads = 2; s.dk = 256; s.dv = 256; s.kv_dtype = DType::F32; s.q_dtype = DType::F32; run_check(s, seed++); }
  // Unsupported value: an error, not a crash (96 is built since issue 23; 48 is not).
  {
    Spec s; s.q_lens = {3}; s.seq_lens = {10}; s.q_heads = 4; s.kv_heads = 2; s.dk = 48; s.dv = 48;
    HostCase c = make_case(s, 99); DevCase d = to_device(c);
    const Status st = launch_prefill(d.view, 0);
    std::printf("  head_dim 48 -> %s\n", st.ok() ? "ok?! (FAIL)" : st.error().describe().c_str());
    if (st.ok()) ++g_failures;
    free_dev(d);
  }
}

// ---- benchmark --------------------------------------------------------------

static void bench_shape(const char* name, int batch, int q_len, int seq_len, int block = 16, bool quick = false,
                        int dim = 128, DType kv = DType::BF16) {
  Spec s;
  s.block = block;
  s.dk = s.dv = dim;
  s.kv_dtype = kv;
  s.q_lens.assign(batch, q_len);
  s.seq_lens.assign(batch, seq_len);
  s.label = name;
  HostCase c = make_case(s, 1234, /*fill_values=*/false);
  DevCase d = to_device(c);
  // A few sampled rows against float64 (values are random bytes, reference reads them).
  for (std::int64_t i = 0; i < (std::int64_t)c.kd.size(); ++i) c.kd[i] = load(s.kv_dtype, c.k, i);
  for (std::int64_t i = 0; i < (std::int64_t)c.vd.size(); ++i) c.vd[i] = load(s.kv_dtype, c.v, i);
  check_path("prefill", c, d, 24, 1.5e-2);
  if (d.ws_k) check_path("fmha", c, d, 24, 1.5e-2);

  double flops = 0;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < q_len; ++i) flops += 4.0 * s.dk * (seq_len - q_len + i + 1) * s.q_heads;
  const double kv_bytes = 2.0 * batch * seq_len * s.kv_heads * s.dk * 2;
  const double gather_bytes = 2 * kv_bytes;  // read + write

  void* flush = nullptr;
  const std::size_t flush_bytes = 256u << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  auto time_it = [&](auto&& fn) {
    for (int w = 0; w < 3; ++w) fn();
    std::vector<float> ts;
    for (int r = 0; r < 15; ++r) {
      CK(cudaMemsetAsync(flush, r, flush_bytes));
      CK(cudaEventRecord(e0));
      fn();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return std::array<double, 3>{ts[ts.size() / 2], ts.front(), ts.back()};
  };
  auto pre = time_it([&] { (void)launch_prefill(d.view, 0); });
  if (!d.ws_k) {  // no fmha for this case (head dim or cache dtype)
    std::printf("  %-22s prefill %7.3f ms %6.1f TFLOP/s (%s)\n", name, pre[0], flops / pre[0] / 1e9,
                prefill_kernel_name(d.view));
    CK(cudaFree(flush));
    free_dev(d);
    return;
  }
  if (quick) {
    auto fm = time_it([&] { (void)launch_fmha(d.view, d.ws, 0); });
    std::printf("  %-22s prefill %7.3f ms %6.1f TFLOP/s | fmha %7.3f ms %6.1f TFLOP/s\n", name, pre[0],
                flops / pre[0] / 1e9, fm[0], flops / fm[0] / 1e9);
    CK(cudaFree(flush));
    free_dev(d);
    return;
  }
  auto gat = time_it([&] { (void)launch_gather(d.view, d.ws, 0); });
  auto fm = time_it([&] { (void)launch_fmha(d.view, d.ws, 0); });
  auto both = time_it([&] { (void)launch_gather(d.view, d.ws, 0); (void)launch_fmha(d.view, d.ws, 0); });
  CK(cudaGetLastError());
  std::printf("  %-22s prefill %7.3f ms %6.1f TFLOP/s | gather %6.3f ms %5.2f TB/s | fmha %7.3f ms %6.1f TFLOP/s | "
              "gather+fmha %7.3f ms %6.1f TFLOP/s\n",
              name, pre[0], flops / pre[0] / 1e9, gat[0], gather_bytes / gat[0] / 1e9, fm[0], flops / fm[0] / 1e9,
              both[0], flops / both[0] / 1e9);
  std::printf("    (min/max ms) prefill %.3f/%.3f gather %.3f/%.3f fmha %.3f/%.3f\n", pre[1], pre[2], gat[1], gat[2],
              fm[1], fm[2]);
  CK(cudaFree(flush));
  free_dev(d);
}

int main(int argc, char** argv) {
  bool do_check = argc < 2, do_bench = argc < 2;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "check")) do_check = true;
    if (!std::strcmp(argv[i], "bench")) do_bench = true;
    if (!std::strcmp(argv[i], "small")) small_checks();
  }
  if (argc >= 2 && !std::strcmp(argv[1], "fp8")) {  // E4M3 caches at the bench shapes, BF16 beside
    for (DType kv : {DType::F8_E4M3, DType::BF16}) {
      char name[64];
      const char* t = kv == DType::BF16 ? "bf16" : "e4m3";
      std::snprintf(name, sizeof name, "%s 8 x 2048 b16", t); bench_shape(name, 8, 2048, 2048, 16, true, 128, kv);
      std::snprintf(name, sizeof name, "%s 1 x 8192 b16", t); bench_shape(name, 1, 8192, 8192, 16, true, 128, kv);
      std::snprintf(name, sizeof name, "%s 16 x 512 b16", t); bench_shape(name, 16, 512, 512, 16, true, 128, kv);
      std::snprintf(name, sizeof name, "%s chunk 4x512/4608", t); bench_shape(name, 4, 512, 4608, 16, true, 128, kv);
    }
    std::printf("failures: %d\n", g_failures);
    return g_failures ? 1 : 0;
  }
  if (argc >= 2 && !std::strcmp(argv[1], "dims")) {  // head dim 64 (ws kernel) at the bench shapes, d128 beside
    for (int dim : {64, 128}) {
      char name[64];
      std::snprintf(name, sizeof name, "d%d 8 x 2048 b16", dim); bench_shape(name, 8, 2048, 2048, 16, true, dim);
      std::snprintf(name, sizeof name, "d%d 8 x 2048 b64", dim); bench_shape(name, 8, 2048, 2048, 64, true, dim);
      std::snprintf(name, sizeof name, "d%d 1 x 8192 b16", dim); bench_shape(name, 1, 8192, 8192, 16, true, dim);
      std::snprintf(name, sizeof name, "d%d 16 x 512 b16", dim); bench_shape(name, 16, 512, 512, 16, true, dim);
    }
    std::printf("failures: %d\n", g_failures);
    return g_failures ? 1 : 0;
  }
  if (argc >= 2 && !std::strcmp(argv[1], "quick")) {  // the A/B shapes: prefill and fmha only
    for (int b : {16, 64}) {
      if (b == 64) bench_shape("8 x 2048 b8", 8, 2048, 2048, 8, true), bench_shape("8 x 2048 b1", 8, 2048, 2048, 1, true);
      char name[64];
      std::snprintf(name, sizeof name, "8 x 2048 b%d", b); bench_shape(name, 8, 2048, 2048, b, true);
      std::snprintf(name, sizeof name, "1 x 8192 b%d", b); bench_shape(name, 1, 8192, 8192, b, true);
      std::snprintf(name, sizeof name, "16 x 512 b%d", b); bench_shape(name, 16, 512, 512, b, true);
      std::snprintf(name, sizeof name, "chunk 4x512/4608 b%d", b); bench_shape(name, 4, 512, 4608, b, true);
    }
    std::printf("failures: %d\n", g_failures);
    return g_failures ? 1 : 0;
  }
  // prof [SEQS LEN BLOCK [KV [DK]]]: one launch of each for ncu; trace
  // [...]: three of each (a kernel built with per-work-tile clock stamps
  // writes the last). KV: bf16 (default; the gather and FMHA run too) or
  // e4m3 (prefill only, scales 0.5 / 2); DK: 128 (default) or 64.
  if (argc >= 2 && (!std::strcmp(argv[1], "prof") || !std::strcmp(argv[1], "trace"))) {
    const int reps = std::strcmp(argv[1], "trace") == 0 ? 3 : 1;
    const int seqs = argc >= 3 ? std::atoi(argv[2]) : 8, len = argc >= 4 ? std::atoi(argv[3]) : 2048;
    Spec s; s.q_lens.assign(seqs, len); s.seq_lens.assign(seqs, len);
    if (argc >= 5) s.block = std::atoi(argv[4]);
    if (argc >= 6 && !std::strcmp(argv[5], "e4m3")) {
      s.kv_dtype = DType::F8_E4M3;
      s.k_scale = 0.5f;
      s.v_scale = 2.f;
    } else if (argc >= 6 && std::strcmp(argv[5], "bf16") != 0) {
      std::fprintf(stderr, "prof: KV is bf16 or e4m3, not %s\n", argv[5]);
      return 2;
    }
    if (argc >= 7) s.dk = s.dv = std::atoi(argv[6]);
    HostCase c = make_case(s, 1234, false);
    DevCase d = to_device(c);
    const bool contiguous_too = s.kv_dtype == DType::BF16 && s.dk == 128;  // the gather's FMHA is BF16 d128
    for (int r = 0; r < reps; ++r) {
      if (contiguous_too) {
        (void)launch_gather(d.view, d.ws, 0);
        (void)launch_fmha(d.view, d.ws, 0);
      }
      const Status st = launch_prefill(d.view, 0);
      if (!st.ok()) {
        std::fprintf(stderr, "prof: %s\n", st.error().describe().c_str());
        return 1;
      }
    }
    CK(cudaDeviceSynchronize());
    return 0;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (do_check) {
    checks();
    graph_check();
  }
  if (do_bench) {
    std::printf("== benchmark (32/8 heads, d128, BF16, block 16, shuffled, causal) ==\n");
    bench_shape("8 x 2048", 8, 2048, 2048);
    bench_shape("1 x 8192", 1, 8192, 8192);
    bench_shape("16 x 512", 16, 512, 512);
    bench_shape("chunked 4 x 512/4608", 4, 512, 4608);
    bench_shape("8 x 2048 block 64", 8, 2048, 2048, 64);
    bench_shape("8 x 2048 block 128", 8, 2048, 2048, 128);
    bench_shape("8 x 2048 block 1", 8, 2048, 2048, 1);
  }
  std::printf("failures: %d\n", g_failures);
  return g_failures ? 1 : 0;
}
