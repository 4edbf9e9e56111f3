// simple_decode: a first paged-attention decode kernel, written the way one
// writes a first kernel to try pagecheck on: plain CUDA, no tensor cores,
// one thread block per (sequence, query head).
//
// Each block walks the sequence's keys in tiles of kThreads: every thread
// computes one logit (q . k through the block table), the block takes the
// tile's max, rescales its running sum and accumulators (online softmax), and
// each thread accumulates p * v for its own output dims. F16/BF16 query and
// caches, NHD layout, any block size, head dims up to 256, sliding window,
// softcap, k/v scales.
//
// The kernel, its parameters and the launch are in simple_decode_kernel.cuh;
// this file holds the entries. Built four times from this file (examples/external/CMakeLists.txt), by
// SIMPLE_DECODE_VARIANT:
//   0 libsimple_decode.so          entry simple_decode
//   1 libsimple_decode_faulty.so   entries with a deliberate bug each, for the
//                                  GPU test that proves pagecheck's checks
//                                  reach a plugin:
//     simple_decode_stale_key      reads the last key from the slot before it
//     simple_decode_no_lse         never writes the LSE
//   2 libplanned_decode.so         the plan step of ABI 1.1, for the tests of
//                                  its contract:
//     planned_decode               plan copies the host lengths, query offsets
//                                  and page offsets into the plan-owned
//                                  workspace; the kernel reads them from there
//                                  alone, and checks that the rest of the
//                                  workspace was poisoned before this plan
//                                  (else it writes nothing: unwritten)
//     planned_decode_baked         plan keeps the host lengths and launch bakes
//                                  them into the kernel's arguments: right on
//                                  every eager run, stale in a graph replay
//   3 libsimple_decode_abi1_0.so   entry simple_decode_abi1_0, exported as a
//                                  library built against ABI 1.0 exports it
//                                  (abi_minor 0, the 1.0 entry size)
//
// Run (one line):
//   pagecheck run --kernel build/examples/external/libsimple_decode.so
//       --paths reference,ext:simple_decode --kv-dtype BF16 --q-dtype BF16
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "pagecheck/external.h"
#include "simple_decode_kernel.cuh"  // the kernel, supports, launch and make_entry

#ifndef SIMPLE_DECODE_VARIANT
#define SIMPLE_DECODE_VARIANT 0
#endif

namespace {

#if SIMPLE_DECODE_VARIANT == 2
// ---- planned_decode: the plan step of ABI 1.1 --------------------------------
// The plan-owned workspace, all offsets in bytes:
//   [0, 8)        the plan's number (uint32), then padding
//   page_indptr   int64 [num_seqs + 1]
//   seq_lens      int32 [num_seqs]
//   query offsets int32 [num_seqs + 1]
// and after it, one probe word (uint32) per (sequence, query head).
struct PlanLayout {
  std::uint64_t indptr, lens, starts, plan_bytes, probe, total;
};

PlanLayout plan_layout(const pagecheck_case_desc* d) {
  PlanLayout l{};
  const auto n = static_cast<std::uint64_t>(d->num_seqs);
  l.indptr = 8;
  l.lens = l.indptr + 8 * (n + 1);
  l.starts = l.lens + 4 * n;
  l.plan_bytes = (l.starts + 4 * (n + 1) + 15) / 16 * 16;
  l.probe = l.plan_bytes;
  l.total = l.probe + 4 * n * static_cast<std::uint64_t>(d->q_heads);
  return l;
}

std::uint64_t planned_workspace_bytes(const pagecheck_case_desc* d) { return plan_layout(d).total; }
std::uint64_t planned_plan_bytes(const pagecheck_case_desc* d) { return plan_layout(d).plan_bytes; }

std::uint32_t plans_made = 0;  // numbers the plans; never 0xFFFFFFFF in a test's lifetime

int planned_plan(const pagecheck_case_desc* d, const pagecheck_plan_inputs* host, const pagecheck_buffers*,
                 void* workspace, void* staging, void* stream) {
  const PlanLayout l = plan_layout(d);
  const auto n = static_cast<std::size_t>(d->num_seqs);
  auto* bytes = static_cast<unsigned char*>(staging);
  const std::uint32_t number = ++plans_made;
  std::memcpy(bytes, &number, sizeof(number));
  std::memcpy(bytes + l.indptr, host->page_indptr, 8 * (n + 1));
  std::memcpy(bytes + l.lens, host->seq_lens, 4 * n);
  std::memcpy(bytes + l.starts, host->query_start_loc, 4 * (n + 1));
  const cudaError_t err = cudaMemcpyAsync(workspace, staging, l.plan_bytes, cudaMemcpyHostToDevice,
                                          static_cast<cudaStream_t>(stream));
  return err == cudaSuccess ? 0 : fail("planned_decode plan: copy to the workspace", err);
}

int planned_launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void* workspace, void* stream) {
  const PlanLayout l = plan_layout(d);
  auto* bytes = static_cast<unsigned char*>(workspace);
  Params p = params_of(d, b);
  // Lengths and offsets from what plan wrote; the table entries from the buffers.
  p.plan_number = reinterpret_cast<const std::uint32_t*>(bytes);
  p.page_indptr = reinterpret_cast<const std::int64_t*>(bytes + l.indptr);
  p.seq_lens = reinterpret_cast<const std::int32_t*>(bytes + l.lens);
  p.query_start_loc = reinterpret_cast<const std::int32_t*>(bytes + l.starts);
  p.probe = reinterpret_cast<std::uint32_t*>(bytes + l.probe);
  return enqueue<kNoFault>(d, p, stream);
}

// planned_decode_baked: the lengths of the last plan, kept on the host.
std::vector<int> baked_lens;

int baked_supports(const pagecheck_case_desc* d, char* reason, size_t size) {
  if (d->num_seqs > kMaxBakedSeqs) {
    std::snprintf(reason, size, "planned_decode_baked: at most %d sequences (lengths passed by value)", kMaxBakedSeqs);
    return 0;
  }
  return supports(d, reason, size);
}

int baked_plan(const pagecheck_case_desc* d, const pagecheck_plan_inputs* host, const pagecheck_buffers*, void*, void*,
               void*) {
  baked_lens.assign(host->seq_lens, host->seq_lens + d->num_seqs);
  return 0;
}

int baked_launch(const pagecheck_case_desc* d, const pagecheck_buffers* b, void*, void* stream) {
  Params p = params_of(d, b);
  p.baked = 1;
  for (std::size_t s = 0; s < baked_lens.size() && s < kMaxBakedSeqs; ++s) p.baked_lens[s] = baked_lens[s];
  return enqueue<kNoFault>(d, p, stream);
}
#endif


#if SIMPLE_DECODE_VARIANT == 1
const pagecheck_kernel_entry kEntries[] = {
    make_entry("simple_decode_stale_key", "simple_decode with a bug: the last key is read from the slot before it",
               launch<kStaleLastKey>),
    make_entry("simple_decode_no_lse", "simple_decode with a bug: the LSE is never written", launch<kNoLse>),
};
#elif SIMPLE_DECODE_VARIANT == 2
pagecheck_kernel_entry planned_entry() {
  pagecheck_kernel_entry e = make_entry(
      "planned_decode", "simple_decode reading lengths and offsets from the plan-owned workspace", planned_launch);
  e.workspace_bytes = planned_workspace_bytes;
  e.plan = planned_plan;
  e.plan_workspace_bytes = planned_plan_bytes;
  e.host_staging_bytes = planned_plan_bytes;
  return e;
}
pagecheck_kernel_entry baked_entry() {
  pagecheck_kernel_entry e = make_entry(
      "planned_decode_baked", "simple_decode with a bug: plan's host lengths baked into the kernel's arguments",
      baked_launch);
  e.supports = baked_supports;
  e.plan = baked_plan;
  return e;
}
const pagecheck_kernel_entry kEntries[] = {planned_entry(), baked_entry()};
#elif SIMPLE_DECODE_VARIANT == 3
// What a library built against ABI 1.0 exports: entries of the 1.0 size
// (the prefix of today's entry), abi_minor 0.
struct alignas(pagecheck_kernel_entry) EntryAbi10 {
  unsigned char bytes[PAGECHECK_ENTRY_SIZE_1_0];
};
EntryAbi10 as_abi_1_0(const pagecheck_kernel_entry& e) {
  EntryAbi10 out;
  std::memcpy(out.bytes, &e, sizeof(out.bytes));
  return out;
}
const EntryAbi10 kEntries[] = {as_abi_1_0(make_entry(
    "simple_decode_abi1_0", "simple_decode exported as an ABI 1.0 library", launch<kNoFault>))};
#else
const pagecheck_kernel_entry kEntries[] = {
    make_entry("simple_decode", "a first decode kernel: one block per (sequence, head), online softmax", launch<kNoFault>),
};
#endif

#if SIMPLE_DECODE_VARIANT == 3
const pagecheck_kernel_table kTable = {PAGECHECK_ABI_MAJOR, 0, PAGECHECK_ENTRY_SIZE_1_0,
                                       sizeof(kEntries) / sizeof(kEntries[0]),
                                       reinterpret_cast<const pagecheck_kernel_entry*>(kEntries)};
#else
const pagecheck_kernel_table kTable = {PAGECHECK_ABI_MAJOR, PAGECHECK_ABI_MINOR, sizeof(pagecheck_kernel_entry),
                                       sizeof(kEntries) / sizeof(kEntries[0]), kEntries};
#endif

}  // namespace

extern "C" PAGECHECK_EXPORT const pagecheck_kernel_table* pagecheck_kernels_v1(void) { return &kTable; }
