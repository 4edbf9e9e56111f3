#include "pagecheck/tensor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pagecheck {

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

Tensor Tensor::zeros(DType dtype, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  auto storage = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(n) * dtype_size(dtype));
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = storage->data();
  t.nbytes = storage->size();
  t.owner = std::move(storage);
  return t;
}

Tensor Tensor::from_doubles(DType dtype, std::vector<std::int64_t> shape, std::span<const double> values) {
  Tensor t = zeros(dtype, std::move(shape));
  for (std::size_t i = 0; i < values.size(); ++i) store_element(dtype, t.mutable_data(), i, values[i]);
  return t;
}

std::string Tensor::describe() const {
  return fmt::format("[{}] {}", fmt::join(shape, ", "), dtype_name(dtype));
}

}  // namespace pagecheck
