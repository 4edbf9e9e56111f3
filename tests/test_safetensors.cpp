// The strict safetensors reader against malformed files of every kind, and
// the writer against the reader (every dtype).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "pagecheck/safetensors.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using namespace pagecheck;

namespace {

fs::path temp_dir() {
  static const test::ScratchDir dir("safetensors");
  return dir.path;
}

std::vector<std::byte> to_bytes(const std::string& text) {
  std::vector<std::byte> out(text.size());
  if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
  return out;
}

// [u64 LE header length][header][data]; `declared` overrides the length.
std::vector<std::byte> make_file(const std::string& header, std::size_t data_bytes = 0,
                                 std::optional<std::uint64_t> declared = std::nullopt) {
  std::vector<std::byte> out(8);
  std::uint64_t n = declared.value_or(header.size());
  for (auto& b : out) {
    b = static_cast<std::byte>(n & 0xFF);
    n >>= 8;
  }
  const auto h = to_bytes(header);
  out.insert(out.end(), h.begin(), h.end());
  for (std::size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<std::byte>(i * 37 + 1));
  return out;
}

fs::path write_temp(const std::vector<std::byte>& bytes, const std::string& name) {
  const fs::path path = temp_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<std::byte> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

// "{inner}": a JSON object from its entries.
std::string braced(const std::string& inner) { return fmt::format("{{{}}}", inner); }

// Writes `bytes` to a temp file, reads it, requires an InvalidInput error
// and returns its message.
std::string read_error(const std::vector<std::byte>& bytes) {
  const fs::path path = write_temp(bytes, "malformed.safetensors");
  auto file = read_safetensors(path);
  REQUIRE_FALSE(file.ok());
  CHECK(file.error().code == ErrorCode::InvalidInput);
  CHECK(file.error().where == path.string());
  return file.error().message;
}

std::string tensor_entry(const std::string& name, const std::string& dtype, const std::string& shape,
                         std::uint64_t begin, std::uint64_t end) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":[{},{}]}})", name, dtype, shape, begin, end);
}

}  // namespace

TEST_CASE("round trip of every dtype, with metadata, zero-size tensors and alignment") {
  const std::vector<DType> dtypes = {DType::F64, DType::F32,  DType::F16, DType::BF16, DType::F8_E4M3,
                                     DType::F8_E5M2, DType::I64, DType::I32, DType::U8,   DType::BOOL};
  std::mt19937 rng(1234);
  std::map<std::string, Tensor> tensors;
  for (DType d : dtypes) {
    // 3 x 5 elements: an odd byte count for 1- and 2-byte types, so a writer
    // that packs by name alone would misalign the wider tensors after them.
    std::vector<double> values(15);
    for (auto& v : values) {
      if (d == DType::BOOL || d == DType::U8) v = static_cast<double>(rng() % 2);
      else if (d == DType::I32 || d == DType::I64) v = static_cast<double>(static_cast<int>(rng() % 2001) - 1000);
      else v = std::uniform_real_distribution<double>(-4, 4)(rng);
    }
    tensors.emplace(fmt::format("t_{}", dtype_name(d)), Tensor::from_doubles(d, {3, 5}, values));
  }
  tensors.emplace("a_empty", Tensor::zeros(DType::F32, {0, 4}));
  tensors.emplace("b_scalar", Tensor::from_doubles(DType::F32, {}, std::vector<double>{2.5}));
  const std::map<std::string, std::string> metadata = {
      {"description", "utf-8: \xc3\xbc \xe2\x82\xac"}, {"seed", "7"}, {"quote", "a \"b\" \\ c"}};

  const fs::path path = temp_dir() / "every_dtype.safetensors";
  REQUIRE(write_safetensors(path, tensors, metadata).ok());
  auto file = read_safetensors(path);
  REQUIRE_MESSAGE(file.ok(), file.error().describe());
  CHECK(file->metadata == metadata);
  REQUIRE(file->tensors.size() == tensors.size());
  for (const auto& item : tensors) {
    const std::string& name = item.first;  // not a binding: INFO captures it (clang 14)
    const Tensor& original = item.second;
    INFO("tensor ", name);
    REQUIRE(file->tensors.count(name) == 1);
    const Tensor& back = file->tensors.at(name);
    CHECK(back.dtype == original.dtype);
    CHECK(back.shape == original.shape);
    REQUIRE(back.nbytes == original.nbytes);
    // memcmp must not see a null pointer, even for zero bytes.
    if (back.nbytes > 0) CHECK(std::memcmp(back.data, original.data, back.nbytes) == 0);
    // Tensors are views into the mapping, aligned to their element size.
    CHECK(reinterpret_cast<std::uintptr_t>(back.data) % dtype_size(back.dtype) == 0);
  }

  // The header length is a multiple of 8 and the layout is what the
  // reference reader expects: offsets tile the data, larger dtypes first.
  const auto bytes = read_all(path);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<std::uint8_t>(bytes[i]);
  CHECK(header_len % 8 == 0);
  const auto header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, header_len));
  CHECK(header.at("__metadata__").at("seed") == "7");
  CHECK(header.at("t_F64").at("data_offsets")[0] == 0);
}

TEST_CASE("tensors keep the mapping alive after the file object is gone") {
  const fs::path path = temp_dir() / "owner.safetensors";
  std::vector<double> values = {1, 2, 3, 4};
  REQUIRE(write_safetensors(path, {{"x", Tensor::from_doubles(DType::F32, {4}, values)}}, {}).ok());
  Tensor kept;
  {
    auto file = read_safetensors(path);
    REQUIRE(file.ok());
    kept = file->tensors.at("x");
  }
  fs::remove(path);  // the mapping outlives the name too
  REQUIRE(kept.owner != nullptr);
  for (std::size_t i = 0; i < 4; ++i) CHECK(kept.at(i) == values[i]);
}

TEST_CASE("a file laid out as PyTorch's safetensors writes it is read") {
  // Header as safetensors.torch.save_file writes it (metadata first,
  // compact JSON, space padding).
  std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  auto bytes = make_file(header, 12);
  auto file = read_safetensors(write_temp(bytes, "torch_like.safetensors"));
  REQUIRE_MESSAGE(file.ok(), file.error().describe());
  CHECK(file->metadata.at("format") == "pt");
  CHECK(file->tensors.at("b").shape == std::vector<std::int64_t>{1, 2});
}

TEST_CASE("malformed files: each rule gives InvalidInput naming the problem") {
  const std::string ok_entry = tensor_entry("a", "F32", "[2]", 0, 8);

  SUBCASE("shorter than the 8-byte length") {
    for (std::size_t n = 0; n < 8; ++n) {
      std::vector<std::byte> bytes(n, std::byte{0});
      CHECK(read_error(bytes).find("shorter than the 8-byte header length") != std::string::npos);
    }
  }
  SUBCASE("header length beyond the file") {
    CHECK(read_error(make_file("{}", 0, 1000)).find("runs past the end of the file") != std::string::npos);
  }
  SUBCASE("header length above 100 MB") {
    CHECK(read_error(make_file("{}", 0, 100'000'001)).find("above the limit") != std::string::npos);
    CHECK(read_error(make_file("{}", 0, ~0ULL)).find("above the limit") != std::string::npos);
  }
  SUBCASE("header not UTF-8") {
    CHECK(read_error(make_file("{\"a\xff\":1}")).find("not valid UTF-8 (byte 3") != std::string::npos);
    // An overlong encoding and a lone surrogate are invalid too.
    CHECK(read_error(make_file("{\"\xc0\xaf\":1}")).find("UTF-8") != std::string::npos);
    CHECK(read_error(make_file("{\"\xed\xa0\x80\":1}")).find("UTF-8") != std::string::npos);
  }
  SUBCASE("header not JSON") {
    CHECK(read_error(make_file("{\"a\": ")).find("not valid JSON") != std::string::npos);
    CHECK(read_error(make_file("")).find("not valid JSON") != std::string::npos);
    CHECK(read_error(make_file("{} trailing")).find("not valid JSON") != std::string::npos);
  }
  SUBCASE("header not an object") {
    CHECK(read_error(make_file("[1,2]")).find("must be a JSON object") != std::string::npos);
    CHECK(read_error(make_file("\"text\"")).find("must be a JSON object") != std::string::npos);
  }
  SUBCASE("duplicate names") {
    const auto msg = read_error(make_file(braced(ok_entry + "," + ok_entry), 8));
    CHECK(msg.find("duplicate tensor name 'a'") != std::string::npos);
    const auto field =
        read_error(make_file(R"({"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8));
    CHECK(field.find("tensor 'a' has the field 'dtype' twice") != std::string::npos);
    const auto meta = read_error(make_file(R"({"__metadata__":{"k":"1","k":"2"}})"));
    CHECK(meta.find("duplicate metadata key 'k'") != std::string::npos);
  }
  SUBCASE("unknown dtype") {
    const auto msg = read_error(make_file(braced(tensor_entry("w", "I16", "[2]", 0, 4)), 4));
    CHECK(msg.find("tensor 'w' has an unknown dtype 'I16'") != std::string::npos);
    CHECK(read_error(make_file(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,4]}})", 4)).find("dtype of tensor 'w'") !=
          std::string::npos);
  }
  SUBCASE("shape not a list of non-negative integers") {
    for (const char* shape : {"3", "[-1]", "[2.5]", "[\"2\"]", "[[2]]", "null"}) {
      INFO("shape ", shape);
      const auto msg = read_error(make_file(braced(tensor_entry("s", "F32", shape, 0, 8)), 8));
      CHECK(msg.find("shape of tensor 's' must be a list of non-negative integers") != std::string::npos);
    }
  }
  SUBCASE("data_offsets not two integers with begin <= end") {
    for (const char* offsets : {"[0]", "[0,8,9]", "[-1,8]", "[0,8.0]", "\"0,8\""}) {
      INFO("offsets ", offsets);
      const auto header = fmt::format(R"({{"d":{{"dtype":"F32","shape":[2],"data_offsets":{}}}}})", offsets);
      CHECK(read_error(make_file(header, 8)).find("data_offsets of tensor 'd' must be two non-negative integers") !=
            std::string::npos);
    }
    CHECK(read_error(make_file(braced(tensor_entry("d", "F32", "[0]", 8, 4)), 8)).find("reversed: begin 8 > end 4") !=
          std::string::npos);
    CHECK(read_error(make_file(braced(tensor_entry("d", "F32", "[2]", 0, 8)), 4))
              .find("run past the end of the data section (4 bytes)") != std::string::npos);
  }
  SUBCASE("byte range differs from dtype size x shape") {
    const auto msg = read_error(make_file(braced(tensor_entry("m", "F32", "[3]", 0, 8)), 8));
    CHECK(msg.find("tensor 'm' spans 8 bytes") != std::string::npos);
    CHECK(msg.find("needs 12 bytes") != std::string::npos);
  }
  SUBCASE("shape product overflows") {
    // 2^62 * 8 elements, or 2^61 F32 elements (x 4 bytes = 2^63, x 8 overflows).
    const auto msg = read_error(make_file(braced(tensor_entry("o", "F32", "[4611686018427387904, 8]", 0, 8)), 8));
    CHECK(msg.find("byte size of tensor 'o'") != std::string::npos);
    CHECK(msg.find("overflows") != std::string::npos);
    const auto msg2 = read_error(make_file(braced(tensor_entry("o", "F64", "[2305843009213693952]", 0, 8)), 8));
    CHECK(msg2.find("overflows") != std::string::npos);
  }
  SUBCASE("ranges: gap, overlap, not from 0, trailing bytes") {
    const auto gap = read_error(
        make_file(braced(tensor_entry("a", "F32", "[1]", 0, 4) + "," + tensor_entry("b", "F32", "[1]", 8, 12)), 12));
    CHECK(gap.find("gap of 4 bytes between tensor 'a'") != std::string::npos);
    const auto overlap = read_error(
        make_file(braced(tensor_entry("a", "F32", "[2]", 0, 8) + "," + tensor_entry("b", "F32", "[1]", 4, 8)), 8));
    CHECK(overlap.find("overlaps") != std::string::npos);
    const auto start = read_error(make_file(braced(tensor_entry("a", "F32", "[1]", 4, 8)), 8));
    CHECK(start.find("starts with 4 bytes that no tensor covers") != std::string::npos);
    const auto trailing = read_error(make_file(braced(tensor_entry("a", "F32", "[1]", 0, 4)), 9));
    CHECK(trailing.find("5 trailing bytes") != std::string::npos);
    const auto none = read_error(make_file("{}", 3));
    CHECK(none.find("lists no tensors but the data section holds 3 bytes") != std::string::npos);
  }
  SUBCASE("metadata must be an object of strings") {
    CHECK(read_error(make_file(R"({"__metadata__":{"seed":7}})")).find("metadata value of 'seed' must be a string") !=
          std::string::npos);
    CHECK(read_error(make_file(R"({"__metadata__":["x"]})")).find("__metadata__ must be an object") != std::string::npos);
  }
  SUBCASE("entry fields") {
    CHECK(read_error(make_file(R"({"a":{"dtype":"F32","shape":[2]}})", 8)).find("tensor 'a' has no 'data_offsets'") !=
          std::string::npos);
    CHECK(read_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8))
              .find("tensor 'a' has an unknown field 'x'") != std::string::npos);
    CHECK(read_error(make_file(R"({"a":[1]})")).find("entry of tensor 'a' must be an object") != std::string::npos);
    CHECK(read_error(make_file(braced(tensor_entry("", "F32", "[2]", 0, 8)), 8)).find("empty name") !=
          std::string::npos);
  }
}

TEST_CASE("no crash: a header nested a million levels deep") {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  CHECK(read_error(make_file(deep)).find("must be a JSON object, got an array") != std::string::npos);
  const std::string deep_shape = R"({"a":{"dtype":"F32","shape":)" + std::string(100'000, '[') +
                                 std::string(100'000, ']') + R"(,"data_offsets":[0,0]}})";
  CHECK(read_error(make_file(deep_shape)).find("shape of tensor 'a' must be a list") != std::string::npos);
  CHECK(read_error(make_file(std::string(500'000, '{'))).find("not valid JSON") != std::string::npos);
}

TEST_CASE("hostile headers stop where they go wrong: nesting, objects in objects, wrong kinds") {
  // The issue's 100 MB headers took 3.7 and 5.3 GB; the reader now stops at
  // the first value a valid header cannot hold, so these are cheap whatever
  // their length (the parse never builds a JSON document).
  std::string objects;
  for (int i = 0; i < 200'000; ++i) objects += R"({"a":)";
  CHECK(read_error(make_file(objects)).find("tensor 'a' has an unknown field 'a'") != std::string::npos);
  CHECK(read_error(make_file(R"({"a":{"dtype":"F32","shape":[[[[1]]]],"data_offsets":[0,4]}})", 4))
            .find("shape of tensor 'a' must be a list of non-negative integers, got an array at position 0") !=
        std::string::npos);
  CHECK(read_error(make_file(R"({"__metadata__":{"k":{"x":"y"}}})")).find("metadata value of 'k' must be a string") !=
        std::string::npos);
  CHECK(read_error(make_file(R"({"a":{"dtype":["F32"],"shape":[1],"data_offsets":[0,4]}})", 4))
            .find("dtype of tensor 'a' must be a string, got an array") != std::string::npos);
  CHECK(read_error(make_file(R"({"__metadata__":{},"__metadata__":{}})")).find("__metadata__ twice") !=
        std::string::npos);
}

TEST_CASE("the reader's limits: 65536 tensors, 65536 metadata entries, 64 dimensions") {
  std::string shape = "[";
  for (int i = 0; i < 65; ++i) shape += i ? ",1" : "1";
  shape += "]";
  CHECK(read_error(make_file(braced(tensor_entry("s", "U8", shape, 0, 1)), 1)).find("has more than 64 dimensions") !=
        std::string::npos);
  std::string metadata = R"({"__metadata__":{)";
  for (int i = 0; i <= 65536; ++i) metadata += fmt::format(R"({}"k{}":"")", i ? "," : "", i);
  metadata += "}}";
  CHECK(read_error(make_file(metadata)).find("__metadata__ holds more than 65536 entries") != std::string::npos);
  std::string tensors;
  for (int i = 0; i <= 65536; ++i) {
    if (i > 0) tensors += ',';
    tensors += tensor_entry(fmt::format("t{}", i), "U8", "[0]", 0, 0);
  }
  CHECK(read_error(make_file(braced(tensors))).find("the header lists more than 65536 tensors") != std::string::npos);
}

TEST_CASE("names from the file are escaped in messages") {
  // An escape sequence in a tensor name must not reach the terminal raw.
  const auto msg = read_error(make_file(braced(tensor_entry("x\\u001b[31mred", "I16", "[2]", 0, 4)), 4));
  CHECK(msg.find('\x1b') == std::string::npos);
  CHECK(msg.find("'x\\x1b[31mred'") != std::string::npos);
}

TEST_CASE("misaligned tensors are views into the mapping, not copies") {
  // An F32 tensor after a 2-byte one starts 2 bytes off alignment (the
  // header is 8-byte padded, so the data section itself is aligned).
  std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"F32","shape":[3],"data_offsets":[2,14]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  auto bytes = make_file(header, 14);
  const float values[3] = {1.5f, -2.25f, 1e-3f};
  std::memcpy(bytes.data() + 8 + header.size() + 2, values, sizeof values);
  const fs::path path = write_temp(bytes, "misaligned.safetensors");
  auto file = read_safetensors(path);
  REQUIRE_MESSAGE(file.ok(), file.error().describe());
  const Tensor& b = file->tensors.at("b");
  CHECK_FALSE(b.aligned());
  CHECK(b.owner == file->tensors.at("a").owner);  // the mapping, not a private copy
  for (std::size_t i = 0; i < 3; ++i) CHECK(b.at(i) == values[i]);
}

TEST_CASE("paths that are not readable case files") {
  const fs::path fifo = temp_dir() / "fifo.safetensors";
  fs::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto from_fifo = read_safetensors(fifo);  // must not block waiting for a writer
  REQUIRE_FALSE(from_fifo.ok());
  CHECK(from_fifo.error().message.find("not a regular file") != std::string::npos);

  auto missing = read_safetensors(temp_dir() / "does_not_exist.safetensors");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ErrorCode::InvalidInput);
  CHECK(missing.error().message.find("cannot open") != std::string::npos);
  auto directory = read_safetensors(temp_dir());
  REQUIRE_FALSE(directory.ok());
  CHECK(directory.error().message.find("not a regular file") != std::string::npos);
}

TEST_CASE("the writer refuses what it cannot write faithfully") {
  const fs::path path = temp_dir() / "refused.safetensors";
  Tensor wrong = Tensor::zeros(DType::F32, {4});
  wrong.shape = {5};  // 16 bytes for 20 needed
  auto status = write_safetensors(path, {{"w", wrong}}, {});
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().message.find("tensor 'w' holds 16 bytes") != std::string::npos);
  CHECK_FALSE(write_safetensors(path, {{"__metadata__", Tensor::zeros(DType::F32, {1})}}, {}).ok());
  CHECK_FALSE(write_safetensors(path, {{"x", Tensor::zeros(DType::F32, {1})}}, {{"k", "\xff"}}).ok());
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("lazy tensors: the bytes their chunks make, where they go, around a tensor in memory") {
  // Two lazy tensors of 10000 and 7001 bytes in chunks of 3000 and 2101
  // (4 chunks), an in-memory tensor between them (sorted by name: a, b, c);
  // byte i of chunk k of tensor t is a function of (t, k, i), so a chunk
  // written at the wrong place or twice shows.
  const fs::path path = temp_dir() / "lazy.safetensors";
  const auto pattern = [](std::size_t t, std::int64_t chunk, std::size_t i) {
    return static_cast<std::byte>((t * 131 + static_cast<std::size_t>(chunk) * 17 + i * 7) % 251);
  };
  Tensor a, c;
  a.dtype = c.dtype = DType::U8;
  a.shape = {10000};
  a.nbytes = 10000;
  c.shape = {7001};
  c.nbytes = 7001;
  std::vector<std::uint8_t> middle(333);
  for (std::size_t i = 0; i < middle.size(); ++i) middle[i] = static_cast<std::uint8_t>(i * 3);
  const std::map<std::string, Tensor> tensors = {
      {"a", a}, {"b", Tensor::from_vector<std::uint8_t>(DType::U8, {333}, middle)}, {"c", c}};
  LazyTensors lazy;
  lazy.names = {"c", "a"};
  lazy.chunk_bytes = {2101, 3000};
  lazy.chunks = 4;
  lazy.fill = [&](std::int64_t chunk, std::byte* const* out) {
    for (std::size_t i = 0; i < 2101; ++i) out[0][i] = pattern(0, chunk, i);
    for (std::size_t i = 0; i < 3000; ++i) out[1][i] = pattern(1, chunk, i);
  };
  for (const int threads : {1, 3}) {
    CAPTURE(threads);
    lazy.threads = threads;
    REQUIRE(write_safetensors(path, tensors, {{"k", "v"}}, &lazy).ok());
    auto file = read_safetensors(path);
    REQUIRE(file.ok());
    const Tensor& ra = file->tensors.at("a");
    const Tensor& rb = file->tensors.at("b");
    const Tensor& rc = file->tensors.at("c");
    REQUIRE(ra.nbytes == 10000);
    REQUIRE(rc.nbytes == 7001);
    bool same = std::memcmp(rb.data, middle.data(), middle.size()) == 0;
    for (std::size_t i = 0; i < ra.nbytes; ++i) same = same && ra.data[i] == pattern(1, static_cast<std::int64_t>(i / 3000), i % 3000);
    for (std::size_t i = 0; i < rc.nbytes; ++i) same = same && rc.data[i] == pattern(0, static_cast<std::int64_t>(i / 2101), i % 2101);
    CHECK(same);
    CHECK(file->metadata.at("k") == "v");
  }
  // Chunks that do not cover a lazy tensor exactly, or a name not among the
  // tensors, are refused before anything is written.
  fs::remove(path);
  lazy.chunks = 3;  // 3 x 3000 < 10000
  CHECK_FALSE(write_safetensors(path, tensors, {}, &lazy).ok());
  lazy.chunks = 5;  // the fifth chunk of c would be empty
  CHECK_FALSE(write_safetensors(path, tensors, {}, &lazy).ok());
  lazy.chunks = 4;
  lazy.names = {"c", "z"};
  CHECK_FALSE(write_safetensors(path, tensors, {}, &lazy).ok());
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("no crash: every truncation of a valid file fails cleanly") {
  const fs::path path = temp_dir() / "valid.safetensors";
  std::vector<double> values(24, 1.5);
  REQUIRE(write_safetensors(path,
                            {{"a", Tensor::from_doubles(DType::BF16, {2, 3, 4}, values)},
                             {"b", Tensor::from_doubles(DType::I32, {6}, std::vector<double>(6, 3))}},
                            {{"k", "v"}})
              .ok());
  const auto bytes = read_all(path);
  REQUIRE(parse_safetensors(bytes, nullptr).ok());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto file = parse_safetensors(std::span(bytes.data(), n), nullptr);
    INFO("prefix of ", n, " bytes");
    REQUIRE_FALSE(file.ok());
    CHECK(file.error().code == ErrorCode::InvalidInput);
  }
  // Through the file reader (mmap) too, for a few lengths.
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{20}, bytes.size() - 1}) {
    const auto prefix = std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK_FALSE(read_safetensors(write_temp(prefix, "truncated.safetensors")).ok());
  }
}

TEST_CASE("no crash: random garbage and corrupted valid files") {
  std::mt19937 rng(42);
  const fs::path path = temp_dir() / "valid2.safetensors";
  REQUIRE(write_safetensors(path, {{"x", Tensor::zeros(DType::F16, {3, 3})}, {"y", Tensor::zeros(DType::F8_E4M3, {5})}},
                            {{"description", "d"}})
              .ok());
  const auto valid = read_all(path);

  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> bytes;
    if (trial % 3 == 0) {
      // Pure garbage, sometimes with a plausible header length.
      bytes.resize(rng() % 200);
      for (auto& b : bytes) b = static_cast<std::byte>(rng());
      if (bytes.size() >= 8 && rng() % 2) {
        const std::uint64_t n = rng() % (bytes.size() - 7);
        for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
      }
    } else {
      // A valid file with a few bytes flipped or replaced by JSON-ish ones.
      bytes = valid;
      const int edits = 1 + static_cast<int>(rng() % 4);
      static const char kJsonish[] = "{}[]\":,0123456789-e. ";
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = rng() % bytes.size();
        bytes[at] = trial % 3 == 1 ? static_cast<std::byte>(rng())
                                   : static_cast<std::byte>(kJsonish[rng() % (sizeof(kJsonish) - 1)]);
      }
    }
    auto file = parse_safetensors(bytes, nullptr);
    if (file.ok()) {
      ++accepted;
      // Whatever was accepted is self-consistent.
      for (const auto& [name, t] : file->tensors) CHECK(static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype) == t.nbytes);
    } else {
      CHECK(file.error().code == ErrorCode::InvalidInput);
      CHECK_FALSE(file.error().message.empty());
    }
  }
  // Edits inside the data section leave the file valid: some must pass.
  CHECK(accepted > 0);
}
