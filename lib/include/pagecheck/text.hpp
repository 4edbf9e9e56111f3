// Text from case files (tensor names, metadata, descriptions) made safe to
// print on a terminal.
#pragma once

#include <string>
#include <string_view>

namespace pagecheck {

// `text` with every byte or character that could steer a terminal written as
// an escape: C0 controls and DEL as \n, \t, \r or \xNN, C1 controls (U+0080 to
// U+009F) and the bidirectional overrides and isolates (U+202A-202E,
// U+2066-2069) as \u{NNNN}, bytes that are not UTF-8 as \xNN, and the
// backslash as \\ so that an escape cannot be forged. Printable text,
// non-ASCII letters included, is kept as it is. Text longer than `max_bytes`
// is cut there and ends with "... (N bytes)", for messages that quote a
// name from a hostile file.
std::string printable(std::string_view text, std::size_t max_bytes = std::string_view::npos);

}  // namespace pagecheck
