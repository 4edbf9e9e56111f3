#include "table.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string_view>

namespace pagecheck::app {

bool stream_wants_color(std::FILE* stream, bool no_color) {
  if (no_color || std::getenv("NO_COLOR") != nullptr) return false;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::string_view(term) == "dumb") return false;
  return ::isatty(::fileno(stream)) == 1;
}

}  // namespace pagecheck::app
