// libpagecheck_flashinfer.so: FlashInfer's paged kernels through pagecheck's
// external-kernel ABI 1.1 (include/pagecheck/external.h). Entries:
//   flashinfer_decode   CUDA-core batch decode, split-KV + merge (decode.cu)
//   flashinfer_prefill  FA2 batch prefill over pages (prefill.cu)
// Built with -DPAGECHECK_FLASHINFER_INCLUDE_DIR=<FlashInfer's include/>;
// docs/external-kernels.md lists what the adapter translates.
//
// Run (one line):
//   pagecheck run --kernel build/examples/external/flashinfer/libpagecheck_flashinfer.so
//       --paths reference,split,ext:flashinfer_decode,ext:flashinfer_prefill --kv-dtype BF16 --q-dtype BF16
#include "common.cuh"

namespace {

const pagecheck_kernel_entry kEntries[] = {fi_adapter::decode_entry(), fi_adapter::prefill_entry()};

const pagecheck_kernel_table kTable = {PAGECHECK_ABI_MAJOR, PAGECHECK_ABI_MINOR, sizeof(pagecheck_kernel_entry),
                                       sizeof(kEntries) / sizeof(kEntries[0]), kEntries};

}  // namespace

extern "C" PAGECHECK_EXPORT const pagecheck_kernel_table* pagecheck_kernels_v1(void) { return &kTable; }
