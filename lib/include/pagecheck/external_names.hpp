// The names of external kernel paths (`--kernel [PREFIX=]FILE`,
// docs/external-kernels.md): entry NAME of a library is the path PREFIX:NAME,
// PREFIX "ext" unless the user gives one, so that two builds of one library
// (the same entry names) can run side by side as old:NAME and new:NAME.
// Host-only: the CLI checks the names before any library is loaded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pagecheck/status.hpp"

namespace pagecheck {

inline constexpr std::string_view kDefaultExternalPrefix = "ext";

struct KernelLibraryArg {
  std::string prefix;  // kDefaultExternalPrefix unless given
  std::string file;
  bool prefix_given = false;
};

// "lib.so" or "PREFIX=lib.so". PREFIX is 1-32 letters, digits, '_', '-' or
// '.'; a text before the first '=' that holds a '/' is part of the file name
// (write ./a=b.so for a file named a=b.so). Usage errors name the argument.
Expected<KernelLibraryArg> parse_kernel_argument(const std::string& arg);

// The argument with its file made absolute and normal, the prefix kept: what
// a saved replay command or a soak's drawn-case command passes on. An
// argument that does not parse is returned as it is.
std::string absolute_kernel_argument(const std::string& arg);

// PREFIX:NAME.
std::string external_path_name(std::string_view prefix, std::string_view entry);

// Whether `path` names an external path (built-in names have no ':').
bool is_external_path_name(std::string_view path);

// The path names each --kernel library gives, in command-line order. The
// first name two libraries share (or one library given twice) is a usage
// error naming both files and, when the prefix was not chosen for both, the
// way out: "--kernel old=a.so --kernel new=b.so".
struct LibraryPathNames {
  KernelLibraryArg library;
  std::vector<std::string> paths;
};
Status check_distinct_path_names(const std::vector<LibraryPathNames>& libraries);

}  // namespace pagecheck
