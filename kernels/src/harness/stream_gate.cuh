// The legacy default stream held shut while a path's eager run is read back
// (harness.cpp, eager_run). A kernel that a path launches on the legacy
// default stream instead of the stream it was given then waits behind the
// gate: the output read after synchronising the path's stream still holds
// the poison, and the same output read again after the gate opens and the
// device synchronises holds the kernel's numbers. The harness reports that
// difference as work outside the path's stream, not as a numerical failure.
// The path's own stream is non-blocking, so a path that keeps to it never
// waits for the gate.
#pragma once

#include <cuda_runtime.h>

#include "harness/cuda_resources.cuh"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

class LegacyStreamGate {
 public:
  static Expected<LegacyStreamGate> make();

  // Puts a one-thread kernel on the legacy default stream that waits until
  // open() (`stream`: the path's stream, used to reset the gate first). It
  // gives up after kMaxHoldSeconds, so a library that synchronises the
  // device inside its launch (a synchronous copy, cudaFree) is delayed by
  // that much per eager run, not deadlocked. Half a second covers the launch
  // and the read-back of every case pagecheck makes; past it the check can
  // only miss work outside the stream, never report it falsely. (5 s held
  // test_gpu_core's synchronising test paths past a 300 s limit on the H200.)
  Status close(cudaStream_t stream);
  // Lets the waiting kernel finish (a write on `stream`, which runs beside it).
  Status open(cudaStream_t stream);

  static constexpr double kMaxHoldSeconds = 0.5;

 private:
  explicit LegacyStreamGate(DeviceBuffer flag) : flag_(std::move(flag)) {}
  DeviceBuffer flag_;  // one uint32: 0 shut, anything else open
};

}  // namespace pagecheck::gpu
