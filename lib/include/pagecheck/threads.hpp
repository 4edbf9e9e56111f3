// Runs one work loop on several threads: the calling thread and up to
// workers - 1 more. The loop itself takes its items from shared state (an
// atomic counter), so fewer threads than asked (the system refused one) only
// means the others take more items.
#pragma once

#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

namespace pagecheck {

template <class Work>
void run_on_threads(std::int64_t workers, const Work& work) {
  std::vector<std::thread> threads;
  for (std::int64_t w = 1; w < workers; ++w) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer threads: the others take the work
    }
  }
  work();
  for (auto& t : threads) t.join();
}

}  // namespace pagecheck
