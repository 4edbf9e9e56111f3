// RAII for CUDA resources: device and pinned buffers, streams, events, graphs
// and graph execs. Each is move-only and owns its handle through a
// std::unique_ptr with a deleter, so a moved-from object never frees twice
// (no defaulted move over a raw handle). Creation returns Expected<T>.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "common/cuda_check.cuh"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

struct DeviceFree {
  void operator()(void* p) const noexcept { cudaFree(p); }
};
struct PinnedFree {
  void operator()(void* p) const noexcept { cudaFreeHost(p); }
};
struct StreamDestroy {
  void operator()(cudaStream_t s) const noexcept { cudaStreamDestroy(s); }
};
struct EventDestroy {
  void operator()(cudaEvent_t e) const noexcept { cudaEventDestroy(e); }
};
struct GraphDestroy {
  void operator()(cudaGraph_t g) const noexcept { cudaGraphDestroy(g); }
};
struct GraphExecDestroy {
  void operator()(cudaGraphExec_t g) const noexcept { cudaGraphExecDestroy(g); }
};

// Bytes of device (or pinned host) memory; size in bytes, 64-bit.
template <class Free>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept : ptr_(std::move(other.ptr_)), bytes_(std::exchange(other.bytes_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    ptr_ = std::move(other.ptr_);
    bytes_ = std::exchange(other.bytes_, 0);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return ptr_.get(); }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_.get());
  }
  std::size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  template <class F>
  friend Expected<Buffer<F>> make_buffer(std::size_t bytes);
  std::unique_ptr<void, Free> ptr_;
  std::size_t bytes_ = 0;
};

using DeviceBuffer = Buffer<DeviceFree>;
using PinnedBuffer = Buffer<PinnedFree>;

template <class Free>
Expected<Buffer<Free>> make_buffer(std::size_t bytes) {
  Buffer<Free> buffer;
  if (bytes == 0) return Expected<Buffer<Free>>(std::move(buffer));
  void* p = nullptr;
  if constexpr (std::is_same_v<Free, DeviceFree>) {
    CUDA_TRY(cudaMalloc(&p, bytes));
  } else {
    CUDA_TRY(cudaMallocHost(&p, bytes));
  }
  buffer.ptr_.reset(p);
  buffer.bytes_ = bytes;
  return Expected<Buffer<Free>>(std::move(buffer));
}

inline Expected<DeviceBuffer> device_alloc(std::size_t bytes) { return make_buffer<DeviceFree>(bytes); }
inline Expected<PinnedBuffer> pinned_alloc(std::size_t bytes) { return make_buffer<PinnedFree>(bytes); }

// A handle type T* (cudaStream_t is CUstream_st*) owned with deleter D.
template <class Handle, class Destroy>
class Owned {
 public:
  Owned() = default;
  explicit Owned(Handle h) : ptr_(h) {}
  Handle get() const { return ptr_.get(); }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  std::unique_ptr<std::remove_pointer_t<Handle>, Destroy> ptr_;
};

using Stream = Owned<cudaStream_t, StreamDestroy>;
using Event = Owned<cudaEvent_t, EventDestroy>;
using Graph = Owned<cudaGraph_t, GraphDestroy>;
using GraphExec = Owned<cudaGraphExec_t, GraphExecDestroy>;

inline Expected<Stream> make_stream() {
  cudaStream_t s = nullptr;
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

inline Expected<Event> make_event() {
  cudaEvent_t e = nullptr;
  CUDA_TRY(cudaEventCreate(&e));
  return Event(e);
}

inline Expected<GraphExec> instantiate(const Graph& graph) {
  cudaGraphExec_t exec = nullptr;
  CUDA_TRY(cudaGraphInstantiate(&exec, graph.get(), 0));
  return GraphExec(exec);
}

}  // namespace pagecheck::gpu
