// doctest's main for the GPU tests: skip visibly (exit 77, ctest's
// SKIP_RETURN_CODE) where no CUDA device is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "pagecheck/gpu.hpp"

int main(int argc, char** argv) {
  if (pagecheck::gpu::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
