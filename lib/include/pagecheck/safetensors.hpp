// Strict safetensors reader and writer (the format PyTorch's safetensors
// writes: u64 little-endian header length, JSON header, packed data).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "pagecheck/status.hpp"
#include "pagecheck/tensor.hpp"

namespace pagecheck {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // views into the mapped file, possibly misaligned (tensor.hpp)
  std::map<std::string, std::string> metadata;
};

// Maps the file and checks every rule of docs/case-format.md; errors are
// InvalidInput naming the tensor or header field at fault (names escaped
// with printable()). Memory grows with the number of tensors, dimensions and
// metadata entries the header holds, never with its nesting.
Expected<SafetensorsFile> read_safetensors(const std::filesystem::path& path);
Expected<SafetensorsFile> parse_safetensors(std::span<const std::byte> bytes, std::shared_ptr<const void> owner);
Status write_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                         const std::map<std::string, std::string>& metadata);

}  // namespace pagecheck
