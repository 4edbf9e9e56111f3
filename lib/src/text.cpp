#include "pagecheck/text.hpp"

#include <algorithm>
#include <cstdint>
#include <fmt/format.h>

namespace pagecheck {

namespace {

// Length of the UTF-8 sequence at text[i] and its code point, or 0 when the
// bytes there are not valid UTF-8 (overlong forms and surrogates included).
std::size_t utf8_sequence(std::string_view text, std::size_t i, std::uint32_t& code) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char c = s[i];
  std::size_t length;
  std::uint32_t min_code;
  if ((c & 0xE0) == 0xC0) { length = 2; min_code = 0x80; code = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { length = 3; min_code = 0x800; code = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { length = 4; min_code = 0x10000; code = c & 0x07; }
  else return 0;
  if (text.size() - i < length) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) return 0;
    code = (code << 6) | (s[i + k] & 0x3F);
  }
  if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

bool steers_terminal(std::uint32_t code) {
  return (code >= 0x80 && code <= 0x9F) || (code >= 0x202A && code <= 0x202E) || (code >= 0x2066 && code <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  const std::size_t end = std::min(text.size(), max_bytes);
  out.reserve(end);
  std::size_t i = 0;
  while (i < end) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '\\') out += "\\\\";
      else if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c == '\r') out += "\\r";
      else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02x}", c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    std::uint32_t code = 0;
    const std::size_t length = utf8_sequence(text, i, code);
    if (length == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else if (steers_terminal(code)) {
      out += fmt::format("\\u{{{:04x}}}", code);
      i += length;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  if (i < text.size()) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace pagecheck
