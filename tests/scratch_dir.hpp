// A scratch folder per test process, removed when the process exits.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace pagecheck::test {

struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& area)
      : path(std::filesystem::temp_directory_path() /
             ("pagecheck_test_" + area + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace pagecheck::test
