/* abi_mismatch: a library that says it was built for the next ABI major.
 * pagecheck must refuse to load it (exit 3, naming the library); the CLI
 * tests check that. Written in plain C99 and compiled with -pedantic, it
 * also proves that include/pagecheck/external.h is a C header. */
#include <stddef.h>

#include "pagecheck/external.h"

static int supports(const pagecheck_case_desc* desc, char* reason, size_t reason_size) {
  (void)desc;
  (void)reason;
  (void)reason_size;
  return 0;
}

static int launch(const pagecheck_case_desc* desc, const pagecheck_buffers* buffers, void* workspace, void* stream) {
  (void)desc;
  (void)buffers;
  (void)workspace;
  (void)stream;
  return 1;
}

static const pagecheck_kernel_entry entries[] = {
    {.name = "from_the_future", .description = "ABI major 2", .supports = supports, .launch = launch},
};

static const pagecheck_kernel_table table = {
    .abi_major = PAGECHECK_ABI_MAJOR + 1,
    .abi_minor = 0,
    .entry_size = sizeof(pagecheck_kernel_entry),
    .count = 1,
    .entries = entries,
};

PAGECHECK_EXPORT const pagecheck_kernel_table* pagecheck_kernels_v1(void) { return &table; }
