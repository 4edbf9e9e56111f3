/* pagecheck external kernels: the C ABI between pagecheck and a kernel
 * library loaded with `pagecheck run --kernel lib.so` (docs/external-kernels.md).
 *
 * Plain C99: fixed-width integers, no C++ or CUDA types. The CUDA stream is
 * a `void*` holding a cudaStream_t; every buffer pointer is device memory.
 *
 * A library exports one function, pagecheck_kernels_v1, returning a table of
 * entries. Each entry becomes a pagecheck path named `ext:<name>` and goes
 * through every check a built-in path does: applicability, NaN-poisoned
 * outputs and the unwritten count, bitwise repeatability, CUDA graph capture
 * and replay with changed tables and lengths, timing with L2 flush, reports
 * and --save-failing bundles.
 *
 * VERSIONING. The table carries the ABI version the library was compiled
 * against (PAGECHECK_ABI_MAJOR / _MINOR of this header).
 *   - Same major: compatible. pagecheck loads a library of any minor of its
 *     own major, and refuses another major (exit 3, naming the library).
 *   - A minor version only appends fields at the END of a struct and adds new
 *     codes; nothing is removed, reordered or redefined. Each struct that can
 *     grow carries its size (struct_size / entry_size) as its writer compiled
 *     it, so a reader never reads past what the writer wrote.
 *   - A library compiled against a newer minor than the pagecheck that loads
 *     it must check desc->abi_minor (and struct_size) before reading a field
 *     added in that minor; fields of an older minor are always present.
 *   - A new major (2) would export pagecheck_kernels_v2.
 *
 * WHAT A KERNEL MAY KEEP BETWEEN CALLS. pagecheck launches an entry several
 * times per case on the same buffers: eager runs, a CUDA graph captured ONCE
 * at the case's capacity, and graph replays after it has changed the table
 * (page_indices, page_indptr stays) and the lengths (seq_lens) IN PLACE, and
 * moved a page. Therefore:
 *   - launch must read every length and table entry from device memory at run
 *     time, in the kernel (from the buffers, or from what plan wrote into the
 *     plan-owned workspace, 1.1); never copy them to the host, never bake
 *     them into kernel arguments. Grid sizes and kernel arguments may depend only on the
 *     description (capacity fields: num_seqs, num_tokens, num_blocks,
 *     max_seq_len, max_q_len, max_blocks_per_seq, heads, dims, ...), which
 *     does not change between calls for one case;
 *   - launch must be capturable into a CUDA graph: no host synchronisation,
 *     no cudaMalloc/cudaFree, no synchronous copies, work only on `stream`
 *     (never the legacy default stream);
 *   - a kernel may cache between calls only what depends on the description
 *     alone (e.g. a chosen kernel variant, a function attribute set once);
 *     nothing that depends on lengths, table entries, buffer contents or
 *     pointers (pagecheck may run another case at other addresses next);
 *   - the workspace is the same pointer on every call of a case but its
 *     contents are not preserved: pagecheck fills it with NaN bytes before
 *     each eager run and each graph replay. A kernel must write what it reads
 *     there in the same launch, except the plan-owned part below (1.1);
 *   - every output element, and every LSE element when buffers->lse is not
 *     NULL, must be written on every call: outputs are filled with a NaN bit
 *     pattern before each run and any element still holding it is a failure;
 *   - results must be bitwise repeatable for identical inputs.
 * pagecheck calls an entry from one host thread at a time. Pointers passed to
 * a function are valid only during that call.
 *
 * THE PLAN STEP (ABI 1.1, optional). Libraries such as FlashInfer split an
 * attention call into a host-side plan, which reads the lengths on the host
 * and writes a work partition, and a launch that reads that partition on
 * the device. An entry with a `plan` function gets that shape:
 *   - pagecheck calls plan on the host before every eager run and before
 *     every graph replay, after it has changed the table and lengths, with
 *     HOST copies of that call's seq_lens, query_start_loc and page_indptr
 *     (pagecheck_plan_inputs) and the device buffers. It never calls plan
 *     inside a stream capture, and it calls plan once before the timed
 *     repeats (the repeats and graph replays of timing reuse that plan);
 *   - the first plan_workspace_bytes(desc) bytes of the workspace are
 *     plan-owned: plan may write them (on `stream`, e.g. a cudaMemcpyAsync
 *     from the host staging buffer, or a kernel of its own), and launch may
 *     read them. pagecheck fills the WHOLE workspace with NaN bytes before
 *     plan and never between plan and launch (or the replay), so launch
 *     finds exactly what this plan wrote there; the rest of the workspace is
 *     NaN bytes when launch starts, as in 1.0;
 *   - host_staging_bytes(desc) > 0 asks for a pinned host buffer of that
 *     size, the same pointer for every plan of a case, given to plan only.
 *     pagecheck synchronises the stream before it calls plan again, so plan
 *     may overwrite what an earlier plan's asynchronous copy read from it;
 *   - launch (and so the graph captured once at the case's capacity) may
 *     still take its grid and kernel arguments only from the description.
 *     Anything plan derives from the lengths reaches the kernels through the
 *     plan-owned workspace, read on the device. A plan result that depends
 *     only on the description (an offset inside the workspace, a padded grid
 *     size, a chosen variant) may be kept on the host and used by launch;
 *     a length baked into a kernel argument replays stale in the graph check
 *     (plan with the new lengths, then replay the graph captured once) and
 *     fails it;
 *   - plan may keep host state between its call and the next launch of the
 *     same case only; it must not keep pointers from pagecheck_plan_inputs.
 * A 1.0 entry (no plan) behaves exactly as before: its table's entry_size is
 * PAGECHECK_ENTRY_SIZE_1_0 and pagecheck reads none of the 1.1 fields.
 *
 * FEATURES OF ABI 1.2 (docs/external-kernels.md). Cases that an older
 * description cannot express: attention sinks (a logit per query head that
 * joins every softmax denominator as exp(sink - max) and the LSE, never the
 * output's weights), ALiBi (a slope per query head) and latent (MLA)
 * caches (value_in_key: V a column prefix of K, one pointer). They are
 * opt-in, for libraries of every minor:
 *   - an entry is given such a case only when its features mask has the bit
 *     (PAGECHECK_FEATURE_SINKS, _ALIBI, _LATENT); a mask of 0 ("everything")
 *     takes everything of ABI 1.1 and none of these;
 *   - and only when its library's table says abi_minor >= 2: an older
 *     library never sees one (its description has no field for it), and the
 *     case is n/a for it with the reason;
 *   - head sizes that pagecheck's suite added with 1.2 (32, 80, 96, 112,
 *     120) reach an older library only when its head_dims list names them:
 *     a 1.0/1.1 entry that declares no list ("any") is not given them.
 * The description and buffers a 1.2 pagecheck fills carry the 1.2 fields
 * (struct_size says so); a library built against 1.2 that may be loaded by
 * an older pagecheck checks desc->struct_size >= PAGECHECK_DESC_SIZE_1_2
 * before reading them.
 *
 * LENGTHS AND POSITIONS (docs/case-format.md). seq_len[s] keys are in the
 * cache, including those of the new query tokens; q_len[s] =
 * query_start_loc[s+1] - query_start_loc[s]; query token i of s sits at
 * position seq_len[s] - q_len[s] + i and sees key j when (!causal || j <= pos)
 * and (window == 0 || j > pos - window). Key j of s lives in page
 * page_indices[page_indptr[s] + j / block_size], slot j % block_size. Query
 * head h reads KV head h / (q_heads / kv_heads). Logits are scale * q.k, then
 * softcap * tanh(logit / softcap) when softcap > 0. A stored key (value)
 * element x means x * k_scale (x * v_scale). LSE is the natural log of the
 * softmax normaliser; with sinks (1.2) the normaliser of a row of query head
 * h is sum_j exp(logit_j - m) + exp(sinks[h] - m), m any finite shift (the
 * reference takes the maximum over the logits and the sink), so LSE =
 * m + log(normaliser) and output = sum_j exp(logit_j - m) v_j / normaliser.
 * With ALiBi (1.2) the logit of query head h at position pos for key j gains
 * alibi_slopes[h] * (j - pos), after the softcap (positions are absolute:
 * a chunked-prefill token's pos is its place in the sequence).
 */
#ifndef PAGECHECK_EXTERNAL_H
#define PAGECHECK_EXTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PAGECHECK_ABI_MAJOR 1
#define PAGECHECK_ABI_MINOR 2

/* The one symbol a library exports, and its type. */
#define PAGECHECK_KERNELS_SYMBOL "pagecheck_kernels_v1"

#if defined(_WIN32)
#define PAGECHECK_EXPORT __declspec(dllexport)
#else
#define PAGECHECK_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Element types (pagecheck_case_desc::query_dtype, kv_dtype, output_dtype). */
#define PAGECHECK_DTYPE_F32 1
#define PAGECHECK_DTYPE_F16 2
#define PAGECHECK_DTYPE_BF16 3
#define PAGECHECK_DTYPE_F8_E4M3 4 /* OCP E4M3 "fn" (torch.float8_e4m3fn) */
#define PAGECHECK_DTYPE_F8_E5M2 5 /* torch.float8_e5m2 */

/* Cache layouts (kv_layout). */
#define PAGECHECK_LAYOUT_NHD 0 /* [num_blocks, block_size, kv_heads, dim] */
#define PAGECHECK_LAYOUT_HND 1 /* [num_blocks, kv_heads, block_size, dim] */

/* How the case gave its table (table_form). The buffers always hold the CSR
 * form (page_indptr, page_indices); a DENSE table is also a row-major
 * block_table[num_seqs][max_blocks_per_seq] at page_indices, with
 * page_indptr[s] = s * max_blocks_per_seq and padding entries that may hold
 * anything (never read them). */
#define PAGECHECK_TABLE_DENSE 0 /* vLLM */
#define PAGECHECK_TABLE_CSR 1   /* FlashInfer (page_indptr is int64 here) */

/* Bit masks of the declared capabilities (pagecheck_kernel_entry). */
#define PAGECHECK_DTYPE_BIT(code) (1u << (code))
#define PAGECHECK_LAYOUT_BIT(code) (1u << (code))
#define PAGECHECK_TABLE_BIT(code) (1u << (code))
#define PAGECHECK_FEATURE_DECODE 0x01u     /* cases where every q_len is 1 */
#define PAGECHECK_FEATURE_PREFILL 0x02u    /* cases with some q_len > 1 */
#define PAGECHECK_FEATURE_WINDOW 0x04u     /* window > 0 */
#define PAGECHECK_FEATURE_SOFTCAP 0x08u    /* softcap > 0 */
#define PAGECHECK_FEATURE_KV_SCALES 0x10u  /* k_scale or v_scale != 1 */
#define PAGECHECK_FEATURE_NON_CAUSAL 0x20u /* causal == 0 */
/* ABI 1.2, opt-in (see "FEATURES OF ABI 1.2"): */
#define PAGECHECK_FEATURE_SINKS 0x40u      /* has_sinks: buffers->sinks */
#define PAGECHECK_FEATURE_ALIBI 0x80u      /* has_alibi: buffers->alibi_slopes */
#define PAGECHECK_FEATURE_LATENT 0x100u    /* value_in_key: a latent (MLA) cache, V a column prefix of K */

/* One attention call, as the kernel sees it: geometry, parameters and the
 * element strides of the buffers. Filled by pagecheck; the same for every
 * call of one case. Sizes are capacities (the largest value any call of the
 * case will see). */
typedef struct pagecheck_case_desc {
  uint32_t abi_major;   /* of the pagecheck that filled it */
  uint32_t abi_minor;
  uint32_t struct_size; /* sizeof(pagecheck_case_desc) as pagecheck compiled it */
  uint32_t reserved0;

  int32_t query_dtype;  /* PAGECHECK_DTYPE_*: F32, F16 or BF16 */
  int32_t kv_dtype;     /* key and value caches: any PAGECHECK_DTYPE_* */
  int32_t output_dtype; /* = query_dtype */
  int32_t kv_layout;    /* PAGECHECK_LAYOUT_* */
  int32_t table_form;   /* PAGECHECK_TABLE_* */
  int32_t causal;       /* 1: causal, bottom-right aligned */
  int32_t is_decode;    /* 1: every sequence has q_len 1 (num_tokens == num_seqs) */
  int32_t reserved1;

  int64_t num_seqs;
  int64_t num_tokens;         /* query tokens of all sequences */
  int64_t num_blocks;         /* pages in each cache */
  int64_t table_entries;      /* elements of page_indices */
  int64_t max_blocks_per_seq; /* DENSE: the table's row length; CSR: the most pages of one sequence */
  int32_t block_size;         /* tokens per page */
  int32_t q_heads;
  int32_t kv_heads;           /* q_heads % kv_heads == 0 */
  int32_t head_dim;           /* query and key */
  int32_t v_head_dim;         /* value and output */
  int32_t max_q_len;
  int32_t max_seq_len;        /* no seq_len exceeds it, in any call of the case */
  int32_t reserved2;
  int64_t window;             /* sliding window in keys; 0: none */
  float scale;                /* logit scale (1/sqrt(head_dim) unless the case set it) */
  float softcap;              /* 0: none */
  float k_scale;              /* stored key x means x * k_scale */
  float v_scale;

  /* Element strides (the last dim has stride 1). */
  int64_t query_stride_token, query_stride_head;  /* query [num_tokens, q_heads, head_dim] */
  int64_t key_stride_block, key_stride_slot, key_stride_head;
  int64_t value_stride_block, value_stride_slot, value_stride_head;
  int64_t output_stride_token, output_stride_head; /* output [num_tokens, q_heads, v_head_dim] */
  int64_t lse_stride_token;                        /* lse [num_tokens, q_heads], head stride 1 */

  /* ---- ABI 1.2 (struct_size >= PAGECHECK_DESC_SIZE_1_2) ---- */
  int32_t has_sinks; /* 1: buffers->sinks holds one logit per query head */
  int32_t has_alibi; /* 1: buffers->alibi_slopes holds one slope per query head */
  /* 1: a latent (MLA) cache. One KV head; V of a slot is the first
   * v_head_dim columns of its key row (head_dim columns: latent, then rope),
   * so buffers->value_cache == buffers->key_cache and the value strides are
   * the key strides (one pointer, nothing copied). */
  int32_t value_in_key;
  int32_t reserved3;
} pagecheck_case_desc;

/* The struct_size of a description filled by pagecheck 1.0 / 1.1 (no 1.2
 * fields), and by 1.2. */
#define PAGECHECK_DESC_SIZE_1_1 (offsetof(pagecheck_case_desc, has_sinks))
#define PAGECHECK_DESC_SIZE_1_2 (offsetof(pagecheck_case_desc, reserved3) + sizeof(int32_t))

/* Host copies of one call's lengths and offsets, for plan (ABI 1.1). Valid
 * only during the call; the same values the device buffers hold then. */
typedef struct pagecheck_plan_inputs {
  uint32_t struct_size; /* sizeof(pagecheck_plan_inputs) as pagecheck compiled it */
  uint32_t reserved0;
  const int32_t* seq_lens;        /* host [num_seqs] */
  const int32_t* query_start_loc; /* host [num_seqs + 1] */
  const int64_t* page_indptr;     /* host [num_seqs + 1] */
} pagecheck_plan_inputs;

/* The device buffers of one call. */
typedef struct pagecheck_buffers {
  uint32_t struct_size; /* sizeof(pagecheck_buffers) as pagecheck compiled it */
  uint32_t reserved0;
  const void* query;              /* [num_tokens, q_heads, head_dim], query_dtype */
  const void* key_cache;          /* kv_layout, kv_dtype, [.., head_dim] */
  const void* value_cache;        /* kv_layout, kv_dtype, [.., v_head_dim]; == key_cache when desc->value_in_key (1.2) */
  const int64_t* page_indptr;     /* [num_seqs + 1] */
  const int32_t* page_indices;    /* [table_entries] */
  const int32_t* seq_lens;        /* [num_seqs] (CSR last page: seq_len - (pages - 1) * block_size) */
  const int32_t* query_start_loc; /* [num_seqs + 1] */
  void* output;                   /* [num_tokens, q_heads, v_head_dim], output_dtype */
  float* lse;                     /* [num_tokens, q_heads], natural log; NULL: not wanted */
  /* ---- ABI 1.2 ---- */
  const float* sinks;        /* [q_heads] F32 sink logits; NULL unless desc->has_sinks */
  const float* alibi_slopes; /* [q_heads] F32 ALiBi slopes; NULL unless desc->has_alibi */
} pagecheck_buffers;

/* One kernel. Every function pointer except supports and launch may be
 * NULL. Return codes: 0 success, anything else failure. */
typedef struct pagecheck_kernel_entry {
  /* Unique within the library; letters, digits, '_', '-', '.'; at most 64
   * characters. The pagecheck path is "ext:<name>". */
  const char* name;
  const char* description; /* one line for reports; may be NULL */

  /* Declared capabilities, checked by pagecheck before supports() so that
   * common refusals read the same for every library. A mask of 0 declares
   * nothing: supports() decides. */
  uint32_t query_dtypes;   /* PAGECHECK_DTYPE_BIT(...) | ... */
  uint32_t kv_dtypes;
  uint32_t layouts;        /* PAGECHECK_LAYOUT_BIT(...) */
  uint32_t table_forms;    /* PAGECHECK_TABLE_BIT(...) */
  uint32_t features;       /* PAGECHECK_FEATURE_*: what it takes; 0: everything of ABI 1.1 (1.2's are opt-in) */
  int32_t min_block_size;  /* 0: no bound */
  int32_t max_block_size;  /* 0: no bound */
  uint32_t head_dim_count; /* pairs in head_dims; 0: any */
  const int32_t* head_dims; /* head_dim_count pairs {head_dim, v_head_dim} */

  /* 1 when the entry takes the case, 0 when not: then it writes why into
   * reason (NUL-terminated, at most reason_size bytes), e.g. "head_dim 96
   * is not built; built: 64, 128". Host only: no CUDA call (pagecheck asks
   * it on machines without a GPU too). */
  int (*supports)(const pagecheck_case_desc* desc, char* reason, size_t reason_size);

  /* Device bytes of workspace the entry needs for this description; 0 or a
   * NULL function: none. */
  uint64_t (*workspace_bytes)(const pagecheck_case_desc* desc);

  /* Enqueues the attention on `stream` (a cudaStream_t). See "WHAT A
   * KERNEL MAY KEEP BETWEEN CALLS" above. `workspace` is NULL when no
   * workspace was asked for. Returns 0, or non-zero with last_error() saying
   * why (an unsupported value, a CUDA launch error). */
  int (*launch)(const pagecheck_case_desc* desc, const pagecheck_buffers* buffers, void* workspace, void* stream);

  /* The message of the last non-zero return on this thread; may be NULL. */
  const char* (*last_error)(void);

  /* ---- ABI 1.1: the plan step (see "THE PLAN STEP"); all may be NULL. ---- */

  /* Host-side plan of one call: reads `host` (lengths and offsets on the
   * host), writes the plan-owned part of `workspace` on `stream`, using
   * `host_staging` (pinned, NULL when none was asked for) as it likes.
   * Never called inside a capture. Returns 0, or non-zero with last_error(). */
  int (*plan)(const pagecheck_case_desc* desc, const pagecheck_plan_inputs* host, const pagecheck_buffers* buffers,
              void* workspace, void* host_staging, void* stream);

  /* The leading bytes of the workspace that plan owns (not poisoned between
   * plan and launch); at most workspace_bytes(desc). NULL or 0: none. */
  uint64_t (*plan_workspace_bytes)(const pagecheck_case_desc* desc);

  /* Bytes of pinned host memory plan wants; NULL or 0: none. */
  uint64_t (*host_staging_bytes)(const pagecheck_case_desc* desc);
} pagecheck_kernel_entry;

/* The entry_size of a table built against ABI 1.0 (no plan fields). */
#define PAGECHECK_ENTRY_SIZE_1_0 (offsetof(pagecheck_kernel_entry, plan))

typedef struct pagecheck_kernel_table {
  uint32_t abi_major;  /* PAGECHECK_ABI_MAJOR the library was compiled with */
  uint32_t abi_minor;  /* PAGECHECK_ABI_MINOR */
  uint32_t entry_size; /* sizeof(pagecheck_kernel_entry) as the library compiled it */
  uint32_t count;      /* entries */
  const pagecheck_kernel_entry* entries;
} pagecheck_kernel_table;

typedef const pagecheck_kernel_table* (*pagecheck_kernels_fn)(void);

/* Defined by the library (PAGECHECK_EXPORT it); the table must stay valid
 * until the library is unloaded. pagecheck never unloads it before exit. */
PAGECHECK_EXPORT const pagecheck_kernel_table* pagecheck_kernels_v1(void);

#ifdef __cplusplus
}
#endif

#endif /* PAGECHECK_EXTERNAL_H */
