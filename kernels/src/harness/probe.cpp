// The device and its ceilings: a device-to-device copy (bytes read + written
// over time) and a read-only stream (probe_read.cu) for bandwidth, a BF16
// 8192^3 cuBLAS product for matrix rate.
//
// cuBLAS is loaded with dlopen when the matrix ceiling is measured, not
// linked: linked, its libraries (libcublasLt is hundreds of MB) were loaded
// at every start, `pagecheck --version` included, and a machine without the
// cuBLAS runtime could not start pagecheck at all. Without it now only the
// matrix ceiling is missing (DeviceInfo::matmul_unavailable says why).
#include <cublas_v2.h>  // types and signatures only: nothing is linked
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/cuda_resources.cuh"
#include "harness/probe_read.cuh"
#include "harness/upload.cuh"
#include "pagecheck/gpu.hpp"

namespace pagecheck::gpu {

namespace {

// The cuBLAS calls of the matrix ceiling, from the library loaded at run
// time (the versioned name of the toolkit pagecheck was built with first).
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // The C entry point (C++ also sees an inline overload of the name).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// The loaded library, or why there is none. Loaded once per process; never
// unloaded (handles may outlive a probe).
const Expected<Cublas>& cublas() {
  static std::once_flag once;
  static std::optional<Expected<Cublas>> loaded;
  std::call_once(once, [] {
    std::string tried;
    void* lib = nullptr;
    for (const std::string& name : {fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR), std::string("libcublas.so")}) {
      lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      const char* why = dlerror();
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", why != nullptr ? why : name + ": not found");
    }
    if (lib == nullptr) {
      loaded = runtime_error(fmt::format("cuBLAS cannot be loaded ({})", tried), "cublas");
      return;
    }
    Cublas c;
    const auto symbol = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr) tried += (tried.empty() ? "" : ", ") + std::string(name);
    };
    symbol(c.create, "cublasCreate_v2");
    symbol(c.destroy, "cublasDestroy_v2");
    symbol(c.set_stream, "cublasSetStream_v2");
    symbol(c.gemm_ex, "cublasGemmEx");
    symbol(c.status_string, "cublasGetStatusString");
    if (!tried.empty()) loaded = runtime_error(fmt::format("the loaded cuBLAS lacks {}", tried), "cublas");
    else loaded = c;
  });
  return *loaded;
}

#define CUBLAS_TRY(api, expr)                                                                             \
  do {                                                                                                    \
    cublasStatus_t pc_cublas_status_ = (expr);                                                            \
    if (pc_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      return runtime_error(fmt::format("{} failed: {}", #expr, (api).status_string(pc_cublas_status_)), \
                           "cublas");                                                                     \
  } while (0)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `body` `repeats` times between events after `warmup` runs; median ms.
template <class Body>
Expected<double> time_median_ms(cudaStream_t stream, int warmup, int repeats, Body body) {
  auto start = make_event();
  if (!start) return start.error();
  auto stop = make_event();
  if (!stop) return stop.error();
  for (int i = 0; i < warmup; ++i) PC_TRY(body());
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    CUDA_TRY(cudaEventRecord(start->get(), stream));
    PC_TRY(body());
    CUDA_TRY(cudaEventRecord(stop->get(), stream));
    CUDA_TRY(cudaEventSynchronize(stop->get()));
    float t = 0;
    CUDA_TRY(cudaEventElapsedTime(&t, start->get(), stop->get()));
    ms.push_back(t);
  }
  return median(ms);
}

// 1 GiB copied: 2 GiB moved, ~35x the H200's L2. Median of 10.
Expected<double> measure_copy_gb_per_s(cudaStream_t stream) {
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  auto src = device_alloc(kBytes);
  if (!src) return src.error();
  auto dst = device_alloc(kBytes);
  if (!dst) return dst.error();
  PC_TRY(fill_random(src->get(), DType::F32, kBytes / 4, 7, stream));
  auto ms = time_median_ms(stream, 2, 10, [&]() -> Status {
    CUDA_TRY(cudaMemcpyAsync(dst->get(), src->get(), kBytes, cudaMemcpyDeviceToDevice, stream));
    return {};
  });
  if (!ms) return ms.error();
  return 2.0 * static_cast<double>(kBytes) / (*ms * 1e6);
}

// 2 GiB read once (~40x the H200's L2), nothing written. Median of 10.
Expected<double> measure_read_gb_per_s(cudaStream_t stream, int multiprocessors) {
  constexpr std::size_t kBytes = std::size_t{2} << 30;
  auto src = device_alloc(kBytes);
  if (!src) return src.error();
  auto sink = device_alloc(sizeof(unsigned));
  if (!sink) return sink.error();
  PC_TRY(fill_random(src->get(), DType::F32, kBytes / 4, 9, stream));
  auto ms = time_median_ms(stream, 2, 10, [&]() -> Status {
    return launch_read_only(src->get(), kBytes, sink->as<unsigned>(), multiprocessors, stream);
  });
  if (!ms) return ms.error();
  return static_cast<double>(kBytes) / (*ms * 1e6);
}

// C = A B, 8192^3, BF16 in and out, F32 accumulation, random inputs.
Expected<double> measure_matmul_tflop_per_s(const Cublas& api, cudaStream_t stream) {
  constexpr int kN = 8192;
  constexpr std::size_t kElems = std::size_t{kN} * kN;
  auto a = device_alloc(kElems * 2);
  if (!a) return a.error();
  auto b = device_alloc(kElems * 2);
  if (!b) return b.error();
  auto c = device_alloc(kElems * 2);
  if (!c) return c.error();
  PC_TRY(fill_random(a->get(), DType::BF16, kElems, 11, stream));
  PC_TRY(fill_random(b->get(), DType::BF16, kElems, 12, stream));
  cublasHandle_t raw = nullptr;
  CUBLAS_TRY(api, api.create(&raw));
  const auto destroy = [&api](cublasHandle_t h) { api.destroy(h); };
  const std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, decltype(destroy)> handle(raw, destroy);
  CUBLAS_TRY(api, api.set_stream(handle.get(), stream));
  const float alpha = 1.0f, beta = 0.0f;
  auto ms = time_median_ms(stream, 2, 5, [&]() -> Status {
    CUBLAS_TRY(api, api.gemm_ex(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &alpha, a->get(), CUDA_R_16BF, kN,
                                b->get(), CUDA_R_16BF, kN, &beta, c->get(), CUDA_R_16BF, kN, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    return {};
  });
  if (!ms) return ms.error();
  return 2.0 * kN * static_cast<double>(kN) * kN / (*ms * 1e9);
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

Expected<std::uint64_t> free_device_memory(int index) {
  CUDA_TRY(cudaSetDevice(index));
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<std::uint64_t>(free_bytes);
}

std::optional<std::string> context_error(int index) {
  // A sticky error (illegal address, trap, assert, launch failure) comes back
  // from every later call; any error here means the next path cannot trust
  // the context.
  if (const cudaError_t set = cudaSetDevice(index); set != cudaSuccess)
    return fmt::format("{}: {}", cudaGetErrorName(set), cudaGetErrorString(set));
  const cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) return std::nullopt;
  return fmt::format("{}: {}", cudaGetErrorName(err), cudaGetErrorString(err));
}

Expected<DeviceInfo> probe_device(int index, bool measure_ceilings) {
  const int count = device_count();
  if (count == 0) return runtime_error("no CUDA device is present", "--device");
  if (index < 0 || index >= count)
    return usage_error(fmt::format("device {} does not exist; {} device(s) present (0..{})", index, count, count - 1),
                       "--device");
  CUDA_TRY(cudaSetDevice(index));
  cudaDeviceProp prop{};
  CUDA_TRY(cudaGetDeviceProperties(&prop, index));
  DeviceInfo info;
  info.name = prop.name;
  info.device_index = index;
  info.multiprocessors = prop.multiProcessorCount;
  if (measure_ceilings) {
    auto stream = make_stream();
    if (!stream) return stream.error();
    auto copy = measure_copy_gb_per_s(stream->get());
    if (!copy) return copy.error();
    info.copy_gb_per_s = *copy;
    auto read = measure_read_gb_per_s(stream->get(), info.multiprocessors);
    if (!read) return read.error();
    info.read_gb_per_s = *read;
    if (const Expected<Cublas>& api = cublas(); api.ok()) {
      auto matmul = measure_matmul_tflop_per_s(*api, stream->get());
      if (!matmul) return matmul.error();
      info.matmul_tflop_per_s = *matmul;
    } else {
      info.matmul_unavailable = api.error().message;
    }
  }
  return info;
}

}  // namespace pagecheck::gpu
