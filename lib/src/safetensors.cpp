// Strict safetensors reader and writer.
//
// File layout: [u64 little-endian N][N bytes of UTF-8 JSON header][data].
// The header is an object: one entry per tensor, {"dtype", "shape",
// "data_offsets": [begin, end]} with offsets relative to the data section,
// plus an optional "__metadata__" object of string values. The reader checks
// every rule of docs/case-format.md before handing out a view; the writer
// produces what PyTorch's safetensors (the Rust reader underneath
// safetensors.torch.load_file) accepts: header padded with spaces to a
// multiple of 8, tensors packed with no gaps, larger dtypes first so that
// every tensor is aligned to its element size.
#include "pagecheck/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

namespace pagecheck {

namespace {

using json = nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the limit of the reference implementation
constexpr std::string_view kMetadataKey = "__metadata__";

// Offset of the first invalid byte, or nullopt when `text` is valid UTF-8
// (no overlong forms, no surrogates, nothing above U+10FFFF).
std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length;
    std::uint32_t min_code;
    std::uint32_t code;
    if ((c & 0xE0) == 0xC0) { length = 2; min_code = 0x80; code = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { length = 3; min_code = 0x800; code = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { length = 4; min_code = 0x10000; code = c & 0x07; }
    else return i;
    if (n - i < length) return i;
    for (std::size_t k = 1; k < length; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      code = (code << 6) | (s[i + k] & 0x3F);
    }
    if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    i += length;
  }
  return std::nullopt;
}

std::string supported_dtype_list() {
  std::string out;
  for (DType d : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2, DType::I64,
                  DType::I32, DType::U8, DType::BOOL}) {
    if (!out.empty()) out += ", ";
    out += dtype_name(d);
  }
  return out;
}

// True when `value` nests no deeper than `levels` (bounded recursion).
bool shallow(const json& value, int levels) {
  if (!value.is_structured()) return true;
  if (levels == 0) return false;
  for (const auto& child : value) {
    if (!shallow(child, levels - 1)) return false;
  }
  return true;
}

// A short rendering of a JSON value for error messages. Deeply nested
// values are only named: dump() recurses, and a hostile header nests
// millions deep.
std::string excerpt(const json& value) {
  if (!shallow(value, 4)) return fmt::format("a deeply nested {}", value.type_name());
  std::string text = value.dump(-1, ' ', true, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// Finds duplicate keys while nlohmann parses (it silently keeps the last
// one). Each open object gets a set of the keys seen so far.
class DuplicateKeyDetector {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        levels_.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!levels_.empty()) levels_.pop_back();
        break;
      case json::parse_event_t::key: {
        if (levels_.empty() || !parsed.is_string()) break;
        Level& top = levels_.back();
        std::string key = parsed.get<std::string>();
        if (!top.keys.insert(key).second && !error_) error_ = describe_duplicate(key);
        top.last_key = std::move(key);
        break;
      }
      default:
        break;
    }
    return true;
  }
  const std::optional<std::string>& error() const { return error_; }

 private:
  struct Level {
    std::set<std::string> keys;
    std::string last_key;
  };

  std::string describe_duplicate(const std::string& key) const {
    if (levels_.size() == 1) {
      if (key == kMetadataKey) return "header has __metadata__ twice";
      return fmt::format("duplicate tensor name '{}' in the header", key);
    }
    if (levels_.size() == 2) {
      const std::string& parent = levels_[0].last_key;
      if (parent == kMetadataKey) return fmt::format("duplicate metadata key '{}'", key);
      return fmt::format("tensor '{}' has the field '{}' twice", parent, key);
    }
    return fmt::format("duplicate key '{}' in the header", key);
  }

  std::vector<Level> levels_;
  std::optional<std::string> error_;
};

struct ParsedEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

Expected<ParsedEntry> parse_entry(const std::string& name, const json& entry, std::uint64_t data_bytes) {
  if (name.empty()) return invalid_input("a tensor has an empty name");
  if (!entry.is_object())
    return invalid_input(fmt::format("entry of tensor '{}' must be an object, got {}", name, excerpt(entry)));
  for (const auto& [field, value] : entry.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets")
      return invalid_input(
          fmt::format("tensor '{}' has an unknown field '{}' (expected dtype, shape, data_offsets)", name, field));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) return invalid_input(fmt::format("tensor '{}' has no '{}' field", name, field));
  }

  ParsedEntry out;
  out.name = name;

  const json& dtype = entry.at("dtype");
  if (!dtype.is_string())
    return invalid_input(fmt::format("dtype of tensor '{}' must be a string, got {}", name, excerpt(dtype)));
  const auto parsed_dtype = parse_dtype(dtype.get<std::string>());
  if (!parsed_dtype)
    return invalid_input(fmt::format("tensor '{}' has an unknown dtype '{}' (known: {})", name,
                                     dtype.get<std::string>(), supported_dtype_list()));
  out.dtype = *parsed_dtype;

  const json& shape = entry.at("shape");
  if (!shape.is_array())
    return invalid_input(
        fmt::format("shape of tensor '{}' must be a list of non-negative integers, got {}", name, excerpt(shape)));
  // Element count with checked multiplication: a shape whose product
  // overflows is an error, not a small number.
  std::uint64_t elements = 1;
  bool overflow = false;
  for (const json& dim : shape) {
    if (!dim.is_number_unsigned() || dim.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      return invalid_input(fmt::format("shape of tensor '{}' must be a list of non-negative integers, got {}", name,
                                       excerpt(shape)));
    const std::uint64_t d = dim.get<std::uint64_t>();
    out.shape.push_back(static_cast<std::int64_t>(d));
    if (__builtin_mul_overflow(elements, d, &elements)) overflow = true;
  }
  std::uint64_t expected_bytes = 0;
  if (overflow || __builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_size(out.dtype)), &expected_bytes))
    return invalid_input(fmt::format("the byte size of tensor '{}' (shape {}, {}) overflows 64 bits", name,
                                     excerpt(shape), dtype_name(out.dtype)));

  const json& offsets = entry.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    return invalid_input(fmt::format(
        "data_offsets of tensor '{}' must be two non-negative integers [begin, end], got {}", name, excerpt(offsets)));
  out.begin = offsets[0].get<std::uint64_t>();
  out.end = offsets[1].get<std::uint64_t>();
  if (out.begin > out.end)
    return invalid_input(fmt::format("data_offsets of tensor '{}' are reversed: begin {} > end {}", name, out.begin,
                                     out.end));
  if (out.end > data_bytes)
    return invalid_input(fmt::format("data_offsets [{}, {}] of tensor '{}' run past the end of the data section ({} bytes)",
                                     out.begin, out.end, name, data_bytes));
  if (out.end - out.begin != expected_bytes)
    return invalid_input(fmt::format(
        "tensor '{}' spans {} bytes (data_offsets [{}, {}]) but shape {} of {} needs {} bytes", name,
        out.end - out.begin, out.begin, out.end, excerpt(shape), dtype_name(out.dtype), expected_bytes));
  return out;
}

// The byte ranges must tile the data section: sorted by offset, each starts
// where the previous ended, the first at 0, the last at the final byte.
Status check_coverage(std::vector<const ParsedEntry*> entries, std::uint64_t data_bytes) {
  std::stable_sort(entries.begin(), entries.end(), [](const ParsedEntry* a, const ParsedEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t position = 0;
  const ParsedEntry* previous = nullptr;
  for (const ParsedEntry* e : entries) {
    if (e->begin < position)
      return invalid_input(fmt::format("tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", e->name,
                                       e->begin, e->end, previous->name, previous->begin, previous->end));
    if (e->begin > position) {
      if (previous == nullptr)
        return invalid_input(fmt::format("the data section starts with {} bytes that no tensor covers (first tensor "
                                         "'{}' starts at {})",
                                         e->begin, e->name, e->begin));
      return invalid_input(fmt::format("gap of {} bytes between tensor '{}' (ends at {}) and tensor '{}' (starts at {})",
                                       e->begin - position, previous->name, position, e->name, e->begin));
    }
    position = e->end;
    previous = e;
  }
  if (position != data_bytes) {
    if (previous == nullptr)
      return invalid_input(fmt::format("the header lists no tensors but the data section holds {} bytes", data_bytes));
    return invalid_input(fmt::format("the data section holds {} bytes but the tensors end at byte {} (last tensor "
                                     "'{}'): {} trailing bytes",
                                     data_bytes, position, previous->name, data_bytes - position));
  }
  return {};
}

}  // namespace

Expected<SafetensorsFile> parse_safetensors(std::span<const std::byte> bytes, std::shared_ptr<const void> owner) {
  if (bytes.size() < 8)
    return invalid_input(fmt::format("file is {} bytes, shorter than the 8-byte header length", bytes.size()));
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<std::uint8_t>(bytes[i]);
  if (header_bytes > kMaxHeaderBytes)
    return invalid_input(
        fmt::format("header length {} is above the limit of {} bytes", header_bytes, kMaxHeaderBytes));
  if (header_bytes > bytes.size() - 8)
    return invalid_input(fmt::format("header length {} runs past the end of the file ({} bytes after the length)",
                                     header_bytes, bytes.size() - 8));
  const std::uint64_t data_bytes = bytes.size() - 8 - header_bytes;
  const std::byte* data_start = bytes.data() + 8 + header_bytes;

  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8), header_bytes);
  if (const auto bad = first_invalid_utf8(header))
    return invalid_input(fmt::format("header is not valid UTF-8 (byte {} of the header)", *bad));

  DuplicateKeyDetector detector;
  json root;
  try {
    root = json::parse(header, std::ref(detector));
  } catch (const json::exception& e) {
    return invalid_input(fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (detector.error()) return invalid_input(*detector.error());
  if (!root.is_object()) return invalid_input(fmt::format("header must be a JSON object, got {}", excerpt(root)));

  SafetensorsFile file;
  std::vector<ParsedEntry> entries;
  for (const auto& [name, value] : root.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object())
        return invalid_input(fmt::format("__metadata__ must be an object of strings, got {}", excerpt(value)));
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string())
          return invalid_input(
              fmt::format("metadata value of '{}' must be a string, got {}", key, excerpt(text)));
        file.metadata.emplace(key, text.get<std::string>());
      }
      continue;
    }
    auto entry = parse_entry(name, value, data_bytes);
    if (!entry) return entry.error();
    entries.push_back(std::move(entry.value()));
  }

  std::vector<const ParsedEntry*> order;
  for (const auto& e : entries) order.push_back(&e);
  PC_TRY(check_coverage(order, data_bytes));

  for (const auto& e : entries) {
    Tensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.nbytes = static_cast<std::size_t>(e.end - e.begin);
    const std::byte* source = data_start + e.begin;
    const auto alignment = dtype_size(e.dtype);
    if (reinterpret_cast<std::uintptr_t>(source) % alignment == 0) {
      t.data = source;
      t.owner = owner;
    } else {
      // Files that pack tensors without regard to alignment are legal; copy
      // those tensors so that typed access through as<T>() stays aligned.
      auto storage = std::make_shared<std::vector<std::uint64_t>>((t.nbytes + 7) / 8);
      if (t.nbytes > 0) std::memcpy(storage->data(), source, t.nbytes);
      t.data = reinterpret_cast<const std::byte*>(storage->data());
      t.owner = std::move(storage);
    }
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

Expected<SafetensorsFile> read_safetensors(const std::filesystem::path& path) {
  const std::string where = path.string();
  // O_NONBLOCK: opening a FIFO must not hang; it is then refused as not a
  // regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return invalid_input(fmt::format("cannot open: {}", std::strerror(errno)), where);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    return runtime_error(fmt::format("cannot stat: {}", std::strerror(err)), where);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return invalid_input("not a regular file", where);
  }
  const auto size = static_cast<std::size_t>(info.st_size);
  if (size < 8) {
    ::close(fd);
    return invalid_input(fmt::format("file is {} bytes, shorter than the 8-byte header length", size), where);
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) return runtime_error(fmt::format("cannot map: {}", std::strerror(map_errno)), where);
  std::shared_ptr<const void> owner(mapping, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });

  auto file = parse_safetensors({static_cast<const std::byte*>(mapping), size}, owner);
  if (!file) {
    Error error = file.error();
    if (error.where.empty()) error.where = where;
    return error;
  }
  return file;
}

Status write_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  const std::string where = path.string();
  // Largest element size first, then by name: with the header padded to 8
  // bytes every tensor starts aligned to its element size (what the
  // reference writer does too).
  std::vector<const std::pair<const std::string, Tensor>*> order;
  for (const auto& item : tensors) {
    const auto& [name, t] = item;
    if (name.empty()) return invalid_input("cannot write a tensor with an empty name", where);
    if (name == kMetadataKey) return invalid_input("cannot write a tensor named __metadata__", where);
    if (first_invalid_utf8(name)) return invalid_input("a tensor name is not valid UTF-8", where);
    std::uint64_t elements = 1;
    for (auto d : t.shape) {
      if (d < 0) return invalid_input(fmt::format("tensor '{}' has a negative dimension ({})", name, t.describe()), where);
      if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements))
        return invalid_input(fmt::format("tensor '{}' has too many elements ({})", name, t.describe()), where);
    }
    std::uint64_t expected = 0;
    if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_size(t.dtype)), &expected) ||
        expected != t.nbytes)
      return invalid_input(fmt::format("tensor '{}' holds {} bytes but {} needs {}", name, t.nbytes, t.describe(),
                                       expected),
                           where);
    if (t.nbytes > 0 && t.data == nullptr)
      return invalid_input(fmt::format("tensor '{}' has no data", name), where);
    order.push_back(&item);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->second.dtype) > dtype_size(b->second.dtype);
  });

  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto* item : order) {
    const Tensor& t = item->second;
    header[item->first] = {{"dtype", std::string(dtype_name(t.dtype))},
                           {"shape", t.shape},
                           {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [key, value] : metadata) {
      if (first_invalid_utf8(key) || first_invalid_utf8(value))
        return invalid_input(fmt::format("metadata entry '{}' is not valid UTF-8", key), where);
      meta[key] = value;
    }
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::byte length[8];
  std::uint64_t n = text.size();
  for (auto& b : length) {
    b = static_cast<std::byte>(n & 0xFF);
    n >>= 8;
  }

  // Write beside the target and rename, so a failed write never leaves a
  // half-written case file under the real name.
  std::filesystem::path temp = path;
  temp += fmt::format(".tmp{}", static_cast<long>(::getpid()));
  std::FILE* out = std::fopen(temp.c_str(), "wb");
  if (out == nullptr) return runtime_error(fmt::format("cannot create: {}", std::strerror(errno)), temp.string());
  bool ok = std::fwrite(length, 1, 8, out) == 8 && std::fwrite(text.data(), 1, text.size(), out) == text.size();
  for (const auto* item : order) {
    if (!ok) break;
    const Tensor& t = item->second;
    if (t.nbytes > 0) ok = std::fwrite(t.data, 1, t.nbytes, out) == t.nbytes;
  }
  const int write_errno = errno;
  if (std::fclose(out) != 0) ok = false;
  if (!ok) {
    std::remove(temp.c_str());
    return runtime_error(fmt::format("write failed: {}", std::strerror(write_errno)), where);
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    return runtime_error(fmt::format("cannot rename the written file into place: {}", ec.message()), where);
  }
  return {};
}

}  // namespace pagecheck
