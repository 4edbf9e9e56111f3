// The read-only stream of probe_device (probe_read.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

// Reads `bytes` (a multiple of 16, 16-byte aligned) of `data` once; `sink` is
// a device word the kernel writes only by chance.
Status launch_read_only(const void* data, std::size_t bytes, unsigned* sink, int multiprocessors,
                        cudaStream_t stream);

}  // namespace pagecheck::gpu
