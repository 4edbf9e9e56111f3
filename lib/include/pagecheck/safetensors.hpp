// Strict safetensors reader and writer (the format PyTorch's safetensors
// writes: u64 little-endian header length, JSON header, packed data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
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
// Tensors whose bytes are made while the file is written (a generated case's
// KV caches, never held in memory). Their entries in write_safetensors'
// `tensors` give the dtype and shape and hold no data. The bytes come in
// chunks spanning every lazy tensor at once (a generator that makes a
// block's keys and values from one engine fills both together): chunk i of
// names[k] is its bytes [i * chunk_bytes[k], (i + 1) * chunk_bytes[k]) (the
// last chunk shorter), and fill(i, out) writes it at out[k]. fill is called
// from several threads at once, once per chunk, in no fixed order.
struct LazyTensors {
  std::vector<std::string> names;
  std::vector<std::size_t> chunk_bytes;
  std::int64_t chunks = 0;
  std::function<void(std::int64_t chunk, std::byte* const* out)> fill;
  int threads = 0;  // chunks made at once (0: the cores, plus one that waits on the disk)
};

// Writes beside `path` and renames into place. Lazy tensors' chunks are
// written where they go as they are made, through O_DIRECT where the file
// system takes it (no page-cache copy of gigabytes), else plainly.
Status write_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                         const std::map<std::string, std::string>& metadata, const LazyTensors* lazy = nullptr);

}  // namespace pagecheck
