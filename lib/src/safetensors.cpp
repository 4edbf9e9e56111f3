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
#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "pagecheck/atomic_file.hpp"
#include "pagecheck/text.hpp"
#include "pagecheck/threads.hpp"

namespace pagecheck {

namespace {

using json = nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the limit of the reference implementation
constexpr std::string_view kMetadataKey = "__metadata__";
// Limits of this reader (docs/case-format.md), so that what a header makes it
// hold stays a small multiple of the header: a std::map entry or a shape
// dimension costs 10 to 50 times the few bytes of its text. A case file holds
// 11 tensors of rank 4 at most and a few metadata keys.
constexpr std::size_t kMaxTensors = 65536;
constexpr std::size_t kMaxMetadataEntries = 65536;
constexpr std::size_t kMaxRank = 64;

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

// The header is read with nlohmann's SAX parser into these entries directly,
// never into a JSON document: a document costs 16 to 100 bytes per value of a
// few bytes of text, and nesting costs a frame per level. A valid header nests
// three levels (the object, an entry, its shape), so anything deeper, and
// every value of the wrong kind, stops the parse where it is found. What is
// kept grows with the tensors and metadata the header names, not with how
// deep or how wide the JSON is.
struct ParsedEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

// "'name'" for messages: the name escaped so that it cannot steer a terminal.
// Names are cut at 200 bytes: a header may hold a name of 100 MB.
std::string name_text(std::string_view name) { return fmt::format("'{}'", printable(name, 200)); }

class HeaderReader {
 public:
  explicit HeaderReader(std::uint64_t data_bytes) : data_bytes_(data_bytes) {}

  std::vector<ParsedEntry> entries;
  std::map<std::string, std::string> metadata;
  const std::optional<std::string>& error() const { return error_; }

  // --- nlohmann::json SAX interface; false stops the parse ------------------
  bool null() { return scalar("null"); }
  bool boolean(bool value) { return scalar(value ? "true" : "false"); }
  bool number_integer(json::number_integer_t value) {
    if (state_ == State::Shape || state_ == State::Offsets)
      return value >= 0 ? number_unsigned(static_cast<std::uint64_t>(value)) : scalar(std::to_string(value));
    return scalar(std::to_string(value));
  }
  bool number_unsigned(json::number_unsigned_t value) {
    if (state_ == State::Shape) {
      if (value > static_cast<std::uint64_t>(INT64_MAX)) return fail(shape_error(std::to_string(value)));
      if (raw_.shape.size() == kMaxRank)
        return fail(fmt::format("shape of tensor {} has more than {} dimensions", name_text(raw_.name), kMaxRank));
      raw_.shape.push_back(static_cast<std::int64_t>(value));
      return true;
    }
    if (state_ == State::Offsets) {
      if (raw_.offsets.size() == 2) return fail(offsets_error("more than two values"));
      raw_.offsets.push_back(value);
      return true;
    }
    return scalar(std::to_string(value));
  }
  bool number_float(json::number_float_t, const json::string_t& text) { return scalar(text); }
  bool string(json::string_t& value) {
    if (state_ == State::Metadata) {
      metadata[metadata_key_] = std::move(value);
      return true;
    }
    if (state_ == State::Entry && field_ == Field::Dtype) {
      const auto parsed = parse_dtype(value);
      if (!parsed)
        return fail(fmt::format("tensor {} has an unknown dtype {} (known: {})", name_text(raw_.name), name_text(value),
                                supported_dtype_list()));
      raw_.dtype = *parsed;
      return true;
    }
    return scalar(json(value).dump(-1, ' ', true, json::error_handler_t::replace));
  }
  bool binary(json::binary_t&) { return scalar("binary data"); }

  bool start_object(std::size_t) {
    switch (state_) {
      case State::Start: state_ = State::Root; return true;
      case State::Root:
        if (pending_metadata_) {
          state_ = State::Metadata;
          return true;
        }
        state_ = State::Entry;
        return true;
      default: return scalar("an object");
    }
  }
  bool end_object() {
    switch (state_) {
      case State::Root: state_ = State::Done; return true;
      case State::Metadata:
        pending_metadata_ = false;
        state_ = State::Root;
        return true;
      case State::Entry: {
        auto entry = finish_entry();
        if (!entry) return fail(entry.error().message);
        entries.push_back(std::move(*entry));
        raw_ = {};
        state_ = State::Root;
        return true;
      }
      default: return true;  // the parser reports anything unbalanced
    }
  }
  bool start_array(std::size_t) {
    if (state_ == State::Entry && field_ == Field::Shape) {
      state_ = State::Shape;
      return true;
    }
    if (state_ == State::Entry && field_ == Field::Offsets) {
      state_ = State::Offsets;
      return true;
    }
    return scalar("an array");
  }
  bool end_array() {
    if (state_ == State::Shape) {
      raw_.shape.shrink_to_fit();
      state_ = State::Entry;
      return true;
    }
    if (state_ == State::Offsets) {
      if (raw_.offsets.size() != 2)
        return fail(offsets_error(fmt::format("{} value{}", raw_.offsets.size(), raw_.offsets.size() == 1 ? "" : "s")));
      state_ = State::Entry;
      return true;
    }
    return true;
  }
  bool key(json::string_t& key) {
    switch (state_) {
      case State::Root:
        if (key == kMetadataKey) {
          if (seen_metadata_) return fail("header has __metadata__ twice");
          seen_metadata_ = pending_metadata_ = true;
          return true;
        }
        if (key.empty()) return fail("a tensor has an empty name");
        if (entries.size() == kMaxTensors)
          return fail(fmt::format("the header lists more than {} tensors", kMaxTensors));
        raw_ = {};
        raw_.name = std::move(key);
        return true;
      case State::Metadata: {
        if (metadata.size() == kMaxMetadataEntries)
          return fail(fmt::format("__metadata__ holds more than {} entries", kMaxMetadataEntries));
        const auto [it, inserted] = metadata.emplace(key, std::string());
        if (!inserted) return fail(fmt::format("duplicate metadata key {}", name_text(key)));
        metadata_key_ = std::move(key);
        return true;
      }
      case State::Entry: {
        Field field;
        if (key == "dtype") field = Field::Dtype;
        else if (key == "shape") field = Field::Shape;
        else if (key == "data_offsets") field = Field::Offsets;
        else
          return fail(fmt::format("tensor {} has an unknown field {} (expected dtype, shape, data_offsets)",
                                  name_text(raw_.name), name_text(key)));
        const unsigned bit = 1u << static_cast<unsigned>(field);
        if (raw_.fields & bit) return fail(fmt::format("tensor {} has the field {} twice", name_text(raw_.name), name_text(key)));
        raw_.fields |= bit;
        field_ = field;
        return true;
      }
      default: return true;
    }
  }
  bool parse_error(std::size_t, const std::string&, const json::exception& e) {
    return fail(fmt::format("header is not valid JSON: {}", e.what()));
  }

 private:
  enum class State { Start, Root, Metadata, Entry, Shape, Offsets, Done };
  enum class Field : unsigned { Dtype = 0, Shape = 1, Offsets = 2 };
  struct RawEntry {
    std::string name;
    unsigned fields = 0;  // bit per Field seen
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::vector<std::uint64_t> offsets;
  };

  bool fail(std::string message) {
    if (!error_) error_ = std::move(message);
    return false;
  }
  std::string shape_error(const std::string& got) const {
    return fmt::format("shape of tensor {} must be a list of non-negative integers, got {}{}", name_text(raw_.name), got,
                       state_ == State::Shape ? fmt::format(" at position {}", raw_.shape.size()) : "");
  }
  std::string offsets_error(const std::string& got) const {
    return fmt::format("data_offsets of tensor {} must be two non-negative integers [begin, end], got {}",
                       name_text(raw_.name), got);
  }
  // A value (scalar, or the start of an object or array, named) where the
  // state does not take it: always an error.
  bool scalar(const std::string& got_text) {
    std::string got = got_text.size() > 80 ? got_text.substr(0, 77) + "..." : got_text;
    switch (state_) {
      case State::Start: return fail(fmt::format("header must be a JSON object, got {}", got));
      case State::Root:
        if (pending_metadata_) return fail(fmt::format("__metadata__ must be an object of strings, got {}", got));
        return fail(fmt::format("entry of tensor {} must be an object, got {}", name_text(raw_.name), got));
      case State::Metadata:
        return fail(fmt::format("metadata value of {} must be a string, got {}", name_text(metadata_key_), got));
      case State::Entry:
        switch (field_) {
          case Field::Dtype: return fail(fmt::format("dtype of tensor {} must be a string, got {}", name_text(raw_.name), got));
          case Field::Shape: return fail(shape_error(got));
          case Field::Offsets: return fail(offsets_error(got));
        }
        return false;
      case State::Shape: return fail(shape_error(got));
      case State::Offsets: return fail(offsets_error(got + " in the list"));
      case State::Done: return fail("header is not valid JSON: a value after the object");
    }
    return false;
  }

  Expected<ParsedEntry> finish_entry() {
    const std::string name = name_text(raw_.name);
    for (auto [field, text] : {std::pair{Field::Dtype, "dtype"}, {Field::Shape, "shape"}, {Field::Offsets, "data_offsets"}})
      if (!(raw_.fields & (1u << static_cast<unsigned>(field))))
        return invalid_input(fmt::format("tensor {} has no '{}' field", name, text));
    ParsedEntry out;
    out.name = std::move(raw_.name);
    out.dtype = raw_.dtype;
    out.shape = std::move(raw_.shape);
    // Element count with checked multiplication: a shape whose product
    // overflows is an error, not a small number.
    std::uint64_t elements = 1;
    bool overflow = false;
    for (auto d : out.shape)
      if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements)) overflow = true;
    std::uint64_t expected_bytes = 0;
    if (overflow ||
        __builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_size(out.dtype)), &expected_bytes))
      return invalid_input(fmt::format("the byte size of tensor {} (shape {}, {}) overflows 64 bits", name,
                                       shape_text(out.shape), dtype_name(out.dtype)));
    out.begin = raw_.offsets[0];
    out.end = raw_.offsets[1];
    if (out.begin > out.end)
      return invalid_input(fmt::format("data_offsets of tensor {} are reversed: begin {} > end {}", name, out.begin,
                                       out.end));
    if (out.end > data_bytes_)
      return invalid_input(fmt::format(
          "data_offsets [{}, {}] of tensor {} run past the end of the data section ({} bytes)", out.begin, out.end,
          name, data_bytes_));
    if (out.end - out.begin != expected_bytes)
      return invalid_input(fmt::format(
          "tensor {} spans {} bytes (data_offsets [{}, {}]) but shape {} of {} needs {} bytes", name,
          out.end - out.begin, out.begin, out.end, shape_text(out.shape), dtype_name(out.dtype), expected_bytes));
    return out;
  }
  static std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string text = fmt::format("[{}]", fmt::join(shape, ","));
    return text.size() > 80 ? text.substr(0, 77) + "..." : text;
  }

  std::uint64_t data_bytes_;
  State state_ = State::Start;
  Field field_ = Field::Dtype;
  bool seen_metadata_ = false;
  bool pending_metadata_ = false;  // the root's current key is __metadata__
  std::string metadata_key_;
  RawEntry raw_;
  std::optional<std::string> error_;
};

// Names are unique: sorted once, neighbours compared (no set of names kept
// beside the entries).
Status check_unique_names(const std::vector<ParsedEntry>& entries) {
  std::vector<const ParsedEntry*> sorted;
  sorted.reserve(entries.size());
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const ParsedEntry* a, const ParsedEntry* b) { return a->name < b->name; });
  for (std::size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i]->name == sorted[i - 1]->name)
      return invalid_input(fmt::format("duplicate tensor name {} in the header", name_text(sorted[i]->name)));
  return {};
}

// The byte ranges must tile the data section: sorted by offset, each starts
// where the previous ended, the first at 0, the last at the final byte.
Status check_coverage(const std::vector<ParsedEntry>& parsed, std::uint64_t data_bytes) {
  std::vector<const ParsedEntry*> entries;
  entries.reserve(parsed.size());
  for (const auto& e : parsed) entries.push_back(&e);
  std::stable_sort(entries.begin(), entries.end(), [](const ParsedEntry* a, const ParsedEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t position = 0;
  const ParsedEntry* previous = nullptr;
  for (const ParsedEntry* e : entries) {
    if (e->begin < position)
      return invalid_input(fmt::format("tensor {} (bytes [{}, {})) overlaps tensor {} (bytes [{}, {}))", name_text(e->name),
                                       e->begin, e->end, name_text(previous->name), previous->begin, previous->end));
    if (e->begin > position) {
      if (previous == nullptr)
        return invalid_input(fmt::format("the data section starts with {} bytes that no tensor covers (first tensor "
                                         "{} starts at {})",
                                         e->begin, name_text(e->name), e->begin));
      return invalid_input(fmt::format("gap of {} bytes between tensor {} (ends at {}) and tensor {} (starts at {})",
                                       e->begin - position, name_text(previous->name), position, name_text(e->name),
                                       e->begin));
    }
    position = e->end;
    previous = e;
  }
  if (position != data_bytes) {
    if (previous == nullptr)
      return invalid_input(fmt::format("the header lists no tensors but the data section holds {} bytes", data_bytes));
    return invalid_input(fmt::format("the data section holds {} bytes but the tensors end at byte {} (last tensor "
                                     "{}): {} trailing bytes",
                                     data_bytes, position, name_text(previous->name), data_bytes - position));
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

  HeaderReader reader(data_bytes);
  const bool parsed = json::sax_parse(header.begin(), header.end(), &reader);
  if (reader.error()) return invalid_input(*reader.error());
  if (!parsed) return invalid_input("header is not valid JSON");
  PC_TRY(check_unique_names(reader.entries));
  PC_TRY(check_coverage(reader.entries, data_bytes));

  SafetensorsFile file;
  file.metadata = std::move(reader.metadata);
  for (auto& e : reader.entries) {
    // Views into the mapping, also when a foreign writer left a tensor
    // misaligned for its dtype: every reader of tensor bytes (at(),
    // load_element, the reference, the uploads) copies elements with memcpy,
    // so nothing is copied up front (a 2 GiB cache 2 bytes off alignment
    // would cost 2 GiB more).
    Tensor t;
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.nbytes = static_cast<std::size_t>(e.end - e.begin);
    t.data = data_start + e.begin;
    t.owner = owner;
    file.tensors.emplace(std::move(e.name), std::move(t));
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

namespace {

// The writer's file: plain writes (header, tensors in memory) and, for lazy
// tensors, chunks made by several threads and written where they go. A chunk
// is written through a second, O_DIRECT descriptor for its whole aligned
// pieces (4 KiB, or the file system's block when larger: the disk reads the
// thread's buffer, and gigabytes never pass through the page cache, whose
// fresh pages cost a fault each on a virtual machine) and plainly for the
// partial pieces at its ends; each piece of the file is written one way only.
// Where O_DIRECT is refused (by the open or by a write) everything from there
// on is written plainly.
class FileWriter {
 public:
  Status open(const std::filesystem::path& file) {
    fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) return runtime_error(fmt::format("cannot create: {}", std::strerror(errno)), file.string());
    path_ = file;
    return {};
  }
  bool write_plain(std::uint64_t offset, const void* data, std::size_t n) { return write_all(fd_, offset, data, n); }

  bool write_lazy(const LazyTensors& lazy, const std::vector<std::uint64_t>& offsets,
                  const std::map<std::string, Tensor>& tensors, std::uint64_t file_size) {
    // The final size first: chunk writes land inside the file in any order.
    if (::ftruncate(fd_, static_cast<off_t>(file_size)) != 0) return fail(errno);
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && st.st_blksize > 0) align_ = std::max<std::size_t>(align_, static_cast<std::size_t>(st.st_blksize));
    const bool power_of_two = (align_ & (align_ - 1)) == 0 && align_ <= (std::size_t{1} << 20);
    if (std::getenv("PAGECHECK_NO_DIRECT_IO") == nullptr && power_of_two)
      direct_fd_ = ::open(path_.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
    std::vector<std::uint64_t> nbytes;
    for (const auto& name : lazy.names) nbytes.push_back(tensors.at(name).nbytes);
    const std::int64_t cores = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
    const std::int64_t threads =
        std::clamp<std::int64_t>(lazy.threads > 0 ? lazy.threads : std::min<std::int64_t>(cores, 32) + 1, 1, lazy.chunks);
    std::atomic<std::int64_t> next{0};
    auto work = [&] {
      // Per tensor: the chunk plus a piece before it, so that the chunk's
      // first whole file piece sits on an aligned address.
      std::vector<std::unique_ptr<std::byte, decltype(&std::free)>> buffers;
      std::vector<std::byte*> out(lazy.names.size());
      for (auto bytes : lazy.chunk_bytes) {
        void* p = std::aligned_alloc(align_, (bytes + 3 * align_ - 1) / align_ * align_);
        if (p == nullptr) return (void)fail(ENOMEM);
        buffers.emplace_back(static_cast<std::byte*>(p), &std::free);
      }
      for (std::int64_t chunk = next++; chunk < lazy.chunks && !failed_; chunk = next++) {
        for (std::size_t k = 0; k < out.size(); ++k) {
          const std::uint64_t at = offsets[k] + static_cast<std::uint64_t>(chunk) * lazy.chunk_bytes[k];
          out[k] = buffers[k].get() + at % align_;
        }
        lazy.fill(chunk, out.data());
        for (std::size_t k = 0; k < out.size(); ++k) {
          const std::uint64_t begin = static_cast<std::uint64_t>(chunk) * lazy.chunk_bytes[k];
          const std::uint64_t end = std::min<std::uint64_t>(nbytes[k], begin + lazy.chunk_bytes[k]);
          if (begin < end && !write_chunk(offsets[k] + begin, out[k], end - begin)) return;
        }
      }
    };
    run_on_threads(threads, work);  // fewer threads than asked: the others take the chunks
    return !failed_;
  }

  bool close() {
    bool ok = true;
    if (direct_fd_ >= 0 && ::close(direct_fd_) != 0) ok = fail(errno);
    if (fd_ >= 0 && ::close(fd_) != 0) ok = fail(errno);
    direct_fd_ = fd_ = -1;
    return ok && !failed_;
  }
  int error() const { return error_; }
  ~FileWriter() {
    if (direct_fd_ >= 0) ::close(direct_fd_);
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  bool fail(int e) {
    if (!failed_.exchange(true)) error_ = e == 0 ? EIO : e;
    return false;
  }
  bool write_all(int fd, std::uint64_t offset, const void* data, std::size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    while (n > 0) {
      const ssize_t done = ::pwrite(fd, p, std::min<std::size_t>(n, std::size_t{1} << 30), static_cast<off_t>(offset));
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) return fd == direct_fd_ ? false : fail(done < 0 ? errno : EIO);
      p += done, offset += static_cast<std::uint64_t>(done), n -= static_cast<std::size_t>(done);
    }
    return true;
  }
  // Bytes [offset, offset + n) of the file from `data`, where data + (the
  // first multiple of align_ at or after offset) - offset is aligned.
  bool write_chunk(std::uint64_t offset, const std::byte* data, std::size_t n) {
    const std::uint64_t end = offset + n;
    const std::uint64_t first = (offset + align_ - 1) / align_ * align_, last = end / align_ * align_;
    if (direct_ok_ && direct_fd_ >= 0 && first < last) {
      if (write_all(direct_fd_, first, data + (first - offset), last - first)) {
        return write_plain(offset, data, first - offset) && write_plain(last, data + (last - offset), end - last);
      }
      direct_ok_ = false;  // refused (EINVAL and friends): plainly from here on, this piece included
    }
    return write_plain(offset, data, n);
  }

  std::filesystem::path path_;
  int fd_ = -1, direct_fd_ = -1;
  std::size_t align_ = 4096;
  std::atomic<bool> direct_ok_{true};
  std::atomic<bool> failed_{false};
  int error_ = 0;
};

}  // namespace

Status write_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                         const std::map<std::string, std::string>& metadata, const LazyTensors* lazy) {
  const std::string where = path.string();
  // Index of `name` among the lazy tensors, or -1.
  const auto lazy_index = [lazy](const std::string& name) -> std::ptrdiff_t {
    if (lazy == nullptr) return -1;
    const auto found = std::find(lazy->names.begin(), lazy->names.end(), name);
    return found == lazy->names.end() ? -1 : found - lazy->names.begin();
  };
  if (lazy != nullptr) {
    if (lazy->chunk_bytes.size() != lazy->names.size() || !lazy->fill || lazy->chunks < 0)
      return invalid_input("lazy tensors need one chunk size per name and a fill function", where);
    for (std::size_t k = 0; k < lazy->names.size(); ++k) {
      const auto found = tensors.find(lazy->names[k]);
      if (found == tensors.end()) return invalid_input(fmt::format("lazy tensor '{}' is not among the tensors", lazy->names[k]), where);
      const std::uint64_t nbytes = found->second.nbytes, chunk = lazy->chunk_bytes[k];
      const auto chunks = static_cast<std::uint64_t>(lazy->chunks);
      if (chunk * chunks < nbytes || (nbytes > 0 && chunk * (chunks - 1) >= nbytes))
        return invalid_input(fmt::format("lazy tensor '{}': {} chunks of {} bytes do not cover its {} bytes exactly",
                                         lazy->names[k], chunks, chunk, nbytes),
                             where);
    }
  }
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
    if (t.nbytes > 0 && t.data == nullptr && lazy_index(name) < 0)
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

  // Through a temporary file beside the target: a failed write never
  // leaves a half-written case file under the real name.
  return replace_file(path, [&](const std::filesystem::path& file) -> Status {
    FileWriter out;
    if (const Status opened = out.open(file); !opened.ok()) return runtime_error(opened.error().message, where);
    bool ok = out.write_plain(0, length, 8) && out.write_plain(8, text.data(), text.size());
    std::vector<std::uint64_t> lazy_offsets(lazy ? lazy->names.size() : 0);
    std::uint64_t position = 8 + text.size();  // where the data starts
    for (const auto* item : order) {
      if (!ok) break;
      const Tensor& t = item->second;
      if (const std::ptrdiff_t k = lazy_index(item->first); k >= 0) {
        lazy_offsets[static_cast<std::size_t>(k)] = position;
      } else if (t.nbytes > 0) {
        ok = out.write_plain(position, t.data, t.nbytes);
      }
      position += t.nbytes;
    }
    if (ok && lazy != nullptr && lazy->chunks > 0) ok = out.write_lazy(*lazy, lazy_offsets, tensors, position);
    ok = out.close() && ok;
    if (!ok) return runtime_error(fmt::format("write failed: {}", std::strerror(out.error())), where);
    return {};
  });
}

}  // namespace pagecheck
