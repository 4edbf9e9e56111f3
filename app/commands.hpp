// The subcommands. Each returns its exit code (pagecheck::exit_code) and
// prints its own errors; main.cpp only parses and dispatches.
#pragma once

#include "config.hpp"

namespace pagecheck::app {

int cmd_run(const RunConfig& config, const Invocation& invocation);
int cmd_list_presets();
int cmd_replay(const ReplayConfig& config, const Invocation& invocation);
int cmd_gen(const GenConfig& config);
int cmd_inspect(const InspectConfig& config);
int cmd_tune(const TuneConfig& config, const Invocation& invocation);
int cmd_bench(const BenchConfig& config, const Invocation& invocation);
int cmd_reduce(const ReduceConfig& config, const Invocation& invocation);
int cmd_soak(const SoakConfig& config, const Invocation& invocation);  // app/soak.cpp
int cmd_merge(const MergeConfig& config, const Invocation& invocation);  // app/merge.cpp
int cmd_compare(const CompareConfig& config);                            // app/compare.cpp

}  // namespace pagecheck::app
