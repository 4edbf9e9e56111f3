// The path harness: a GPU path is an applicability rule plus a list of
// stages, each a launch closure with its byte and FLOP model. The harness
// runs any such path through the same checks and timing:
//   1. poison output and LSE with a NaN bit pattern (and the workspace with
//      NaN bytes), call the path's plan step if it has one, run, count
//      unwritten; every eager run holds the legacy default stream shut until
//      its output is read (stream_gate.cuh) and reads it again after a
//      device-wide synchronise: a difference is work outside the path's
//      stream, reported as such, and the checks and timing below are skipped;
//   2. run again, compare bitwise (a moving result is a race);
//   3. capture the stages into a CUDA graph at the case's capacity, change
//      the table and lengths in place (shorter and longer contexts, a page
//      moved to a free page), plan again with them, replay, compare bitwise with an eager run on
//      the same changed inputs; in round 1 the new last key of a sequence
//      that grew is NaN, and that sequence must give another output than
//      before (the new lengths reached the kernels); in each round the first
//      keys past a shortened sequence's new length (that no sequence sees)
//      are changed to other finite values and an eager run must give the
//      same bits (a kernel that kept the old lengths reads them); restore
//      the table, lengths and keys;
//   4. time: warm-up, repeats between CUDA events with L2 flushed before each
//      (unless hot), per stage and in total; then the graph replay.
// docs/gpu-paths.md describes the checks and the timing model.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/cuda_resources.cuh"
#include "harness/upload.cuh"
#include "pagecheck/case.hpp"
#include "pagecheck/path.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu {

struct Stage {
  std::string name;                                // "total" is reserved
  std::function<Status(cudaStream_t)> launch;      // capturable: no sync, no allocation
  double bytes = 0;                                // byte model of the stage
  double flops = 0;                                // FLOP model of the stage
};

// What a path sets up for one uploaded case.
struct PreparedPath {
  std::vector<Stage> stages;
  std::vector<DeviceBuffer> workspace;  // owned for the run's duration
  // A host-side plan step (external kernels of ABI 1.1): called with the
  // case's current host lengths before each eager run and each graph replay,
  // after the workspace is poisoned and never inside a capture; once before
  // the timed repeats. It may write the workspace on the stream; the harness
  // synchronises the stream before calling it again. Empty: no plan.
  std::function<Status(const DeviceCase&, cudaStream_t)> plan_step;
  std::vector<PinnedBuffer> host_buffers;  // pinned staging of the plan step
  std::string plan;                     // PathRun::plan
  std::map<std::string, std::string> notes;
  // Byte/FLOP model of the whole path (the "total" timing row): by default
  // the sum of the stages; a path with an internal round trip (fmha's gather)
  // reports the effective model of the attention instead.
  std::optional<double> total_bytes, total_flops;
};

class GpuPath : public Path {
 public:
  // Sets up stages and workspace for `d` (uploaded from `c`).
  virtual Expected<PreparedPath> prepare(const Case& c, DeviceCase& d, const RunOptions& options) = 0;
  Expected<PathRun> run(const Case& c, const RunOptions& options) override;
};

// The model of attention over a paged cache (docs/gpu-paths.md):
//   bytes: per sequence and KV head, the keys any query token sees (with a
//   window only the window) times (head_dim + v_head_dim) KV elements, plus
//   Q, O and the table entries read;
//   flops: 2 * visible (query, key) pairs * (head_dim + v_head_dim) per query head.
struct AttentionModel {
  double kv_bytes = 0;
  double q_bytes = 0;
  double o_bytes = 0;
  double table_bytes = 0;
  double flops = 0;
  double bytes() const { return kv_bytes + q_bytes + o_bytes + table_bytes; }
};
AttentionModel attention_model(const Case& c);

// Runs `path` on `c` with the checks and timing above. Called by GpuPath::run.
Expected<PathRun> run_gpu_path(GpuPath& path, const Case& c, const RunOptions& options);

}  // namespace pagecheck::gpu
