// A dense, row-major tensor whose bytes are owned by a vector or by a mapped
// file (the owner keeps the mapping alive). A tensor read from a file may be
// misaligned for its dtype (a foreign writer's packing): read its elements
// with at() or memcpy, as every reader in the library does; as<T>() needs
// aligned() data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pagecheck/dtype.hpp"

namespace pagecheck {

struct Tensor {
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::shared_ptr<const void> owner;  // keeps `data` alive
  const std::byte* data = nullptr;
  std::size_t nbytes = 0;

  // A zero-filled tensor that owns its bytes.
  static Tensor zeros(DType dtype, std::vector<std::int64_t> shape);
  // A tensor that owns a copy of `values`, stored as `dtype` (rounded).
  static Tensor from_doubles(DType dtype, std::vector<std::int64_t> shape, std::span<const double> values);
  template <class T>
  static Tensor from_vector(DType dtype, std::vector<std::int64_t> shape, std::vector<T> values) {
    auto storage = std::make_shared<std::vector<T>>(std::move(values));
    Tensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = reinterpret_cast<const std::byte*>(storage->data());
    t.nbytes = storage->size() * sizeof(T);
    t.owner = std::move(storage);
    return t;
  }

  bool empty() const { return data == nullptr; }
  std::int64_t rank() const { return static_cast<std::int64_t>(shape.size()); }
  std::int64_t dim(std::size_t i) const { return shape.at(i); }
  std::int64_t numel() const;
  // Element `index` (row-major) widened to double.
  double at(std::size_t index) const { return load_element(dtype, data, index); }
  // Writable bytes; only valid for tensors made by zeros()/from_*().
  std::byte* mutable_data() { return const_cast<std::byte*>(data); }
  // True when `data` is aligned for typed access through as<T>().
  bool aligned() const { return reinterpret_cast<std::uintptr_t>(data) % dtype_size(dtype) == 0; }
  template <class T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(data), nbytes / sizeof(T)};
  }
  // "[4, 16, 8, 128] BF16"
  std::string describe() const;
};

}  // namespace pagecheck
