// The names of external kernel paths: --kernel [PREFIX=]FILE parsing, the
// PREFIX:NAME names, and the error when two libraries give one name
// (pagecheck/external_names.hpp; issue 22: two builds of one library in one
// run).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "pagecheck/external_names.hpp"

using namespace pagecheck;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

KernelLibraryArg parsed(const std::string& arg) {
  auto r = parse_kernel_argument(arg);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().describe()));
  return *r;
}

std::string refusal(const std::string& arg) {
  auto r = parse_kernel_argument(arg);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::Usage);
  return r.error().describe();
}

}  // namespace

TEST_CASE("--kernel FILE and PREFIX=FILE") {
  const KernelLibraryArg plain = parsed("build/libsimple_decode.so");
  CHECK(plain.prefix == "ext");
  CHECK_FALSE(plain.prefix_given);
  CHECK(plain.file == "build/libsimple_decode.so");
  const KernelLibraryArg old = parsed("old=build-base/libsimple_decode.so");
  CHECK(old.prefix == "old");
  CHECK(old.prefix_given);
  CHECK(old.file == "build-base/libsimple_decode.so");
  CHECK(parsed("v1.2_rc-3=lib.so").prefix == "v1.2_rc-3");
  // Everything after the first '=' is the file.
  CHECK(parsed("new=dir/a=b.so").file == "dir/a=b.so");
  // A '/' before the '=': a file name with '=' in it.
  const KernelLibraryArg odd = parsed("./a=b.so");
  CHECK(odd.file == "./a=b.so");
  CHECK_FALSE(odd.prefix_given);
  CHECK(parsed("/abs/x=y/lib.so").file == "/abs/x=y/lib.so");
}

TEST_CASE("--kernel: a bad prefix or no file is a usage error naming the argument") {
  CHECK(contains(refusal("=lib.so"), "'=lib.so': the prefix before '=' must be 1-32 letters"));
  CHECK(contains(refusal("a b=lib.so"), "the prefix before '='"));
  CHECK(contains(refusal("old:x=lib.so"), "the prefix before '='"));
  CHECK(contains(refusal(std::string(33, 'p') + "=lib.so"), "1-32"));
  CHECK(contains(refusal("old="), "'old=': no library file after '='"));
  CHECK(contains(refusal(""), "no library file"));
  CHECK(contains(refusal("=x"), "--kernel"));
}

TEST_CASE("path names: PREFIX:NAME; a name with ':' is external") {
  CHECK(external_path_name("ext", "simple_decode") == "ext:simple_decode");
  CHECK(external_path_name("old", "simple_decode") == "old:simple_decode");
  CHECK(is_external_path_name("ext:simple_decode"));
  CHECK(is_external_path_name("new:x"));
  CHECK_FALSE(is_external_path_name("direct"));
  CHECK_FALSE(is_external_path_name("reference"));
}

TEST_CASE("two libraries giving one path name: refused, naming both files and the way out") {
  const auto lib = [](const std::string& arg, std::vector<std::string> names) {
    return LibraryPathNames{parsed(arg), std::move(names)};
  };
  // Two builds of one library, no prefix: both export ext:simple_decode.
  auto clash = check_distinct_path_names({lib("base/libsimple_decode.so", {"ext:simple_decode"}),
                                          lib("head/libsimple_decode.so", {"ext:simple_decode"})});
  REQUIRE_FALSE(clash.ok());
  CHECK(clash.error().code == ErrorCode::Usage);
  const std::string said = clash.error().describe();
  CHECK(contains(said, "path ext:simple_decode is exported by both base/libsimple_decode.so and "
                       "head/libsimple_decode.so"));
  CHECK(contains(said, "--kernel old=base/libsimple_decode.so --kernel new=head/libsimple_decode.so"));
  // With prefixes they are told apart.
  CHECK(check_distinct_path_names({lib("old=base/libsimple_decode.so", {"old:simple_decode"}),
                                   lib("new=head/libsimple_decode.so", {"new:simple_decode"})})
            .ok());
  // One prefix given to both: the same clash, said so.
  auto same_prefix = check_distinct_path_names({lib("x=base/lib.so", {"x:k"}), lib("x=head/lib.so", {"x:k"})});
  REQUIRE_FALSE(same_prefix.ok());
  CHECK(contains(same_prefix.error().describe(), "give them different prefixes (both are x=)"));
  // One library given twice.
  auto twice = check_distinct_path_names({lib("lib.so", {"ext:k"}), lib("lib.so", {"ext:k"})});
  REQUIRE_FALSE(twice.ok());
  CHECK(contains(twice.error().describe(), "lib.so is given twice"));
  // Different names: fine.
  CHECK(check_distinct_path_names({lib("a.so", {"ext:a"}), lib("b.so", {"ext:b"})}).ok());
}

TEST_CASE("the argument passed on to a replay keeps its prefix, with the file made absolute") {
  const std::string cwd = std::filesystem::current_path().string();
  CHECK(absolute_kernel_argument("old=build/../lib.so") == "old=" + cwd + "/lib.so");
  CHECK(absolute_kernel_argument("lib.so") == cwd + "/lib.so");
  CHECK(absolute_kernel_argument("/abs/lib.so") == "/abs/lib.so");
  CHECK(absolute_kernel_argument("=bad") == "=bad");
}
