#!/usr/bin/env python3
"""Writes scripts/mutants/NN-name.patch from the table below: each mutant is
one (file, old text, new text) edit of HEAD, old text occurring exactly once.
Run from the repository root after a kernel change moved the text, then check
the patches with scripts/mutants/build.sh. MUTANTS.md explains each one.

usage: make_patches.py [--worktree] [NN ...]
  NN ...      only these mutants (the table in MUTANTS.md is then left alone)
  --worktree  edit the working tree's files instead of HEAD's: for a kernel
              change not committed yet, whose patches must apply once it is"""
import difflib
import pathlib
import subprocess
import sys

M = []  # (name, header, [(path, old, new), ...])
EXTRA = {  # the run.sh step a mutant needs beyond the default suite
    "09-decode-missing-barrier": "racecheck",
    "17-sm90-32bit-offsets": "huge",
    "33-ws-rows-32bit-bytes": "huge",
}
# What each mutant should break and which check should see it.
EXPECT = {
    "01": ("direct, auto", "output vs reference: a decode case whose sliding window is shorter than the context"),
    "02": ("direct, split, auto", "output vs reference: a decode case over an FP8 cache with k_scale != 1"),
    "03": ("direct, split, auto", "output vs reference (NaN from poisoned slots): a decode case with block size 7"),
    "04": ("direct, auto", "LSE vs reference: any decode case"),
    "05": ("split, auto", "output vs reference: a context of 2+ partitions"),
    "06": ("split, auto", "output NaN: a decode case whose window leaves whole split partitions empty"),
    "07": ("split, auto", "output NaN once the harness poisons the workspace (stale partials otherwise)"),
    "08": ("auto", "unwritten: a decode sequence of exactly threshold tokens under a split plan"),
    "09": ("direct, split, auto", "racecheck hazards (extra step); maybe repeatability or output"),
    "10": ("prefill (mma.sync: head dims 64/192/256 on the H200)", "output vs reference: causal prefill rows"),
    "11": ("prefill (mma.sync)", "output vs reference: any context past one page"),
    "12": ("prefill (F32 cache: CUDA-core kernel)", "output vs reference: a windowed case over an F32 cache"),
    "13": ("prefill, fmha (wgmma: head dim 128)", "output vs reference: a softcap case at head dim 128"),
    "14": ("prefill, fmha (wgmma)", "output vs reference: head dim 128, GQA with 2+ KV heads"),
    "15": ("prefill, fmha (wgmma)", "output NaN (P = 0 times a poisoned slot): head dim 128"),
    "16": ("prefill (wgmma-ws rows)", "output vs reference: an F8_E5M2 cache at head dim 128"),
    "17": ("prefill (wgmma)", "output vs reference on the huge case (> 2^31 elements; extra step)"),
    "18": ("fmha", "output vs reference (NaN once the harness poisons the workspace)"),
    "19": ("direct, split, auto, prefill, fmha", "graph check: changed lengths must change the output (new check)"),
    # Faults the default suite is not built to meet (issue 21: how strong is
    # soak?); soak should kill them, and docs/validation.md records how soon.
    "20": ("direct, split, auto", "output vs reference: a decode case with block size 48 (soak; not in the suite)"),
    "21": ("split, auto", "output vs reference: a decode context past 512 tokens under a 512-token partition (soak's plans)"),
    "22": ("direct, auto", "output vs reference: F8_E5M2 cache, a block size not a power of two and a window, at once"),
    # The warp-specialised kernel (head dim 128, BF16/F16 K/V on an H100/H200).
    "23": ("prefill, fmha (wgmma-ws)", "output vs reference: a softcap case at head dim 128, 16-bit K/V"),
    "24": ("prefill, fmha (wgmma-ws)", "output vs reference: head dim 128, GQA with 2+ KV heads, 16-bit output"),
    "25": ("prefill (wgmma-ws rows: pages under 32 slots or not a power of two)", "output NaN or vs reference: a sequence whose length is not a multiple of 128 (or a window)"),
    "26": ("prefill (wgmma-ws tma: pages of 32+ slots)", "output NaN (P = 0 times a poisoned slot): a sequence ending inside a page"),
    "27": ("prefill, fmha (wgmma-ws)", "output vs reference: causal prefill rows at head dim 128"),
    # Issue 23's logit features in the decode paths.
    "28": ("split, auto", "output and LSE vs reference: a sink case of 2+ active partitions (the device check's split:64 plan; the default plan's where a context passes one partition)"),
    "29": ("direct, auto", "LSE vs reference: a sink case whose sink is not negligible next to its row (short contexts)"),
    "30": ("direct, split, auto", "output vs reference: any ALiBi decode case past one key"),
    "31": ("prefill, fmha", "output vs reference: a sink case whose sink is above its row's largest logit"),
    "32": ("prefill", "output vs reference: any ALiBi prefill case past one key"),
    # Session 12: the 32-bit-offset class again, in the kernel that runs by default.
    "33": ("prefill (wgmma-ws rows: pages under 32 slots or not a power of two)",
           "output vs reference on the huge case (> 2^32 bytes of cache; extra step)"),
    # Session 13: issue 23's head sizes (80, 112, 120 pad a token's lanes).
    "34": ("direct, split, auto", "output vs reference (or an illegal address): a decode case at head dim 80, 112 or 120"),
    "35": ("direct, split, auto", "output vs reference: a latent (MLA) decode case (the mla family's decode rows)"),
    "36": ("direct, split, auto (the wgmma MLA kernel: compute capability 9.0)",
           "output vs reference: a latent decode case over a BF16/F16 cache with a query of its dtype (mla-decode rows)"),
}


def mutant(name, header, *edits):
    M.append((name, header, list(edits)))


# ---- direct (decode_direct.cu) ------------------------------------------------
mutant("01-direct-window-off-by-one",
       "window off by one: the direct kernel's window takes one key more (window + 1; as written, no window becomes a window of 1)",
       ("kernels/src/decode/decode_direct.cu",
        "window_begin(seq_len, p.window), seq_len, smem);",
        "window_begin(seq_len, p.window + 1), seq_len, smem);"))
mutant("02-decode-dropped-k-scale",
       "dropped scale: the decode q multiplier forgets k_scale (direct, split, auto over FP8 caches)",
       ("kernels/src/decode/decode_direct.cu",
        "p.q_multiplier = view.scale * view.k_scale * (capped ? 1.0f : kLog2e);",
        "p.q_multiplier = view.scale * (capped ? 1.0f : kLog2e);"))
mutant("03-decode-page-npot",
       "page index wrong for non-power-of-two block sizes: token / block_size as a shift by floor(log2 block_size)",
       ("kernels/src/decode/decode_direct.cu",
        "  make_fast_divisor(static_cast<std::uint32_t>(kv.block_size), p.block_magic, p.block_shift);\n",
        "  p.block_magic = 0;  // token >> floor(log2 block_size): right for powers of two only\n"
        "  for (p.block_shift = 0; (2 << p.block_shift) <= kv.block_size; ++p.block_shift) {\n  }\n"))
mutant("04-direct-lse-base",
       "LSE base: the direct kernel stores the base-2 LSE (m + log2 l) instead of the natural one",
       ("kernels/src/decode/decode_direct.cu",
        "p.lse[row * p.q_heads + q_head] = state_lse(m, l);",
        "p.lse[row * p.q_heads + q_head] = l > 0.0f ? m + log2f(l) : -INFINITY;"))

# ---- split + merge (decode_split.cu, decode_common.cuh) -------------------------
mutant("05-split-merge-no-rescale",
       "merge without rescale: partitions are summed with weight sum_p, without 2^(max_p - max)",
       ("kernels/src/decode/decode_split.cu",
        "  for (int j = 0; j < kChunk; ++j) acc += ps[j] * fast_exp2(pm[j] - m_use) * o[j];\n",
        "  for (int j = 0; j < kChunk; ++j) acc += ps[j] * o[j];\n"),
       ("kernels/src/decode/decode_split.cu",
        "    acc += psum[part] * fast_exp2(pmax[part] - m_use) * out[static_cast<std::int64_t>(part) * DV];\n",
        "    acc += psum[part] * out[static_cast<std::int64_t>(part) * DV];\n"),
       ("kernels/src/decode/decode_split.cu",
        "  for (int w = 0; w < warps; ++w) total += reduce_l[w] * fast_exp2(reduce_m[w] - m_use);\n",
        "  for (int w = 0; w < warps; ++w) total += reduce_l[w];\n"))
mutant("06-split-empty-partition-nan",
       "NaN from an empty partition: normalising an empty state divides 0 by 0 (split partitions the window leaves empty)",
       ("kernels/src/decode/decode_common.cuh",
        "__device__ __forceinline__ float state_normalize(float acc, float l) { return l > 0.0f ? acc / l : 0.0f; }",
        "__device__ __forceinline__ float state_normalize(float acc, float l) { return acc / l; }"))
mutant("07-split-skip-empty-stores",
       "skipped stores: a split partition with no keys returns without writing its empty state to the workspace",
       ("kernels/src/decode/decode_split.cu",
        "  const KeyRange keys = key_range(p, seq_len, partition, whole);\n",
        "  const KeyRange keys = key_range(p, seq_len, partition, whole);\n"
        "  if (!whole && keys.end == keys.begin) return;  // nothing to attend\n"))
mutant("08-auto-threshold-gap",
       "boundary off by one: auto's partition kernel attends seq_len < threshold whole while its merge takes seq_len > threshold; a sequence of exactly the threshold is split and never merged",
       ("kernels/src/decode/decode_split.cu",
        "  if constexpr (kAuto) whole = seq_len <= p.threshold_tokens;\n",
        "  if constexpr (kAuto) whole = seq_len < p.threshold_tokens;\n"))
mutant("09-decode-missing-barrier",
       "missing barrier: the cross-warp merge writes into the pipeline buffer while other warps may still read it",
       ("kernels/src/decode/decode_common.cuh",
        "  // Across warps through shared memory (reusing the drained pipeline).\n  __syncthreads();\n",
        "  // Across warps through shared memory (reusing the drained pipeline).\n"))

# ---- prefill, mma.sync (prefill_common.cuh) and F32 (prefill.cu) ----------------
mutant("10-mma-causal-off-by-one",
       "causal off by one: the mma.sync kernel lets each query row see the key after it",
       ("kernels/src/prefill/prefill_common.cuh",
        "          const int vis_hi = min(key_hi, causal ? pos + 1 : key_hi);  // keys < vis_hi",
        "          const int vis_hi = min(key_hi, causal ? pos + 2 : key_hi);  // keys < vis_hi"))
mutant("11-mma-page-edge",
       "page-edge off by one: the mma.sync kernel looks up the page of key + 1, so the last slot of each page is read from the next page",
       ("kernels/src/prefill/prefill_common.cuh",
        "    return ld_global_nc(view.kv.page_indices + table_begin + block_of(p, key));",
        "    return ld_global_nc(view.kv.page_indices + table_begin + block_of(p, key + 1));"))
mutant("12-f32-prefill-window-off-by-one",
       "window off by one: the F32 (CUDA-core) prefill kernel starts the window one key late (window - 1 keys)",
       ("kernels/src/prefill/prefill.cu",
        "  if (view.window > 0) key_lo = static_cast<int>(max(static_cast<std::int64_t>(0), pos - view.window + 1));",
        "  if (view.window > 0) key_lo = static_cast<int>(max(static_cast<std::int64_t>(0), pos - view.window + 2));"))

# ---- wgmma prefill / fmha (attn_sm90.cu) -----------------------------------------
mutant("13-sm90-softcap-twice",
       "softcap scaled twice: the wgmma kernel multiplies capped logits by the logit scale again in the exponent",
       ("kernels/src/prefill/attn_sm90.cu",
        "  const float exp_scale = has_softcap ? 1.f : p.logit_mul;\n  const std::uint32_t q_wg",
        "  const float exp_scale = p.logit_mul;\n  const std::uint32_t q_wg"))
mutant("14-sm90-gqa-mapping",
       "wrong GQA mapping: the wgmma kernel stores output rows to head (row % group) * kv_heads + kv_head (interleaved) while Q is loaded grouped",
       ("kernels/src/prefill/attn_sm90.cu",
        "    const int head = kv_head * group + row % group;\n    float m_row = m[h];",
        "    const int head = (row % group) * static_cast<int>(view.kv.kv_heads) + kv_head;\n    float m_row = m[h];"))
mutant("15-sm90-read-past-seq-len",
       "read past seq_len: the wgmma producer loads key seq_len too (its slot is not zero-filled; P = 0 times NaN)",
       ("kernels/src/prefill/attn_sm90.cu",
        "        const bool valid = key >= key_lo && key < key_hi;\n        row_offsets[my_key]",
        "        const bool valid = key >= key_lo && key <= key_hi;\n        row_offsets[my_key]"))
mutant("16-sm90-e5m2-as-e4m3",
       "e5m2 decoded with the e4m3 rule: the warp-specialised kernel's FP8 producer widens every FP8 cache as E4M3 "
       "(FP8 caches take that kernel since session 12; before, attn_sm90.cu's producer)",
       ("kernels/src/prefill/attn_sm90_ws.cu",
        "    fp8x16_widen<KV, kToF16>(ld_shared16(slot + slot_lane + jj * 512), lo, hi);",
        "    fp8x16_widen<KvKind::E4M3, kToF16>(ld_shared16(slot + slot_lane + jj * 512), lo, hi);"))
mutant("17-sm90-32bit-offsets",
       "32-bit offsets: the wgmma producer forms page * block stride in 32 bits (wraps past 2^31 elements)",
       ("kernels/src/prefill/attn_sm90.cu",
        "        row_offsets[my_key] = valid ? kv_row_offset<T, false>(p, seq, key, page, kv_head) : -1;\n"
        "        row_offsets[kBlockN + my_key] = valid ? kv_row_offset<T, true>(p, seq, key, page, kv_head) : -1;\n",
        "        row_offsets[my_key] = valid ? static_cast<std::int32_t>(kv_row_offset<T, false>(p, seq, key, page, kv_head)) : -1;\n"
        "        row_offsets[kBlockN + my_key] = valid ? static_cast<std::int32_t>(kv_row_offset<T, true>(p, seq, key, page, kv_head)) : -1;\n"))

# ---- gather (fmha.cu) -------------------------------------------------------------
mutant("18-gather-skip-last-token",
       "skipped stores: the gather copies seq_len - 1 tokens per sequence; the FMHA reads the last key from stale workspace",
       ("kernels/src/prefill/fmha.cu",
        "  const std::int64_t chunks = static_cast<std::int64_t>(view.kv.seq_lens[seq]) * kv_heads * kRowChunks;",
        "  const std::int64_t chunks = static_cast<std::int64_t>(view.kv.seq_lens[seq] - 1) * kv_heads * kRowChunks;"))

# ---- beyond the suite (issue 21) ----------------------------------------------------
mutant("20-decode-block48",
       "a special case gone wrong at one block size: the decode page divisor of block size 48 is 32's",
       ("kernels/src/decode/decode_direct.cu",
        "  make_fast_divisor(static_cast<std::uint32_t>(kv.block_size), p.block_magic, p.block_shift);\n",
        "  make_fast_divisor(static_cast<std::uint32_t>(kv.block_size == 48 ? 32 : kv.block_size), p.block_magic,\n"
        "                    p.block_shift);\n"))
mutant("21-split-partition512-merge",
       "one partition size: with 512-token partitions the merge leaves out a sequence's last partition",
       ("kernels/src/decode/decode_split.cu",
        "  const int active = static_cast<int>((static_cast<std::int64_t>(seq_len) + p.partition_tokens - 1) /\n"
        "                                      p.partition_tokens);\n"
        "  // This sequence's groups",
        "  const int active = static_cast<int>((static_cast<std::int64_t>(seq_len) + p.partition_tokens - 1) /\n"
        "                                      p.partition_tokens) -\n"
        "                     (p.partition_tokens == 512 && seq_len > 512 ? 1 : 0);\n"
        "  // This sequence's groups"))
mutant("22-direct-three-features",
       "three features at once: over an F8_E5M2 cache with a block size not a power of two and a window, v_scale is 1/16 too large",
       ("kernels/src/decode/decode_direct.cu",
        "  p.v_scale = view.v_scale;\n",
        "  p.v_scale = view.v_scale * (view.kv_dtype == DType::F8_E5M2 && (kv.block_size & (kv.block_size - 1)) != 0 &&\n"
        "                                      view.window > 0\n"
        "                                  ? 1.0625f\n"
        "                                  : 1.0f);\n"))

# ---- the warp-specialised sm_90a kernel (attn_sm90_ws.cu: head dim 128, 16-bit K/V) ----
# Issue 24: since the warp-specialised kernel took head dim 128 with 16-bit
# K/V from attn_sm90.cu, 13-17 reach attn_sm90.cu only through FP8 caches;
# these are the same bug classes in the kernel that serves the bench shapes.
mutant("23-ws-softcap-twice",
       "softcap scaled twice: the warp-specialised kernel multiplies capped logits by the logit scale again in the exponent",
       ("kernels/src/prefill/attn_sm90_ws.cu",
        "      const float exp_scale = kSoftcap ? 1.f : p.a.logit_mul;\n",
        "      const float exp_scale = p.a.logit_mul;\n"))
mutant("24-ws-gqa-mapping",
       "wrong GQA mapping: the warp-specialised kernel stores KV head h's 16-bit output rows from query head h on "
       "(tensor copies) and to head (row % group) * kv_heads + h (per-lane stores, interleaved)",
       ("kernels/src/prefill/attn_sm90_ws.cu",
        "        const int token0 = static_cast<int>(k.q_begin + (k.row0 + wg_row) / group);\n"
        "        const int head0 = k.kv_head * group;\n",
        "        const int token0 = static_cast<int>(k.q_begin + (k.row0 + wg_row) / group);\n"
        "        const int head0 = k.kv_head;\n"),
       ("kernels/src/prefill/attn_sm90_ws.cu",
        "            const std::int64_t o_row = (k.q_begin + tok) * view.q_heads + k.kv_head * group + rem;\n",
        "            const std::int64_t o_row =\n"
        "                (k.q_begin + tok) * view.q_heads + rem * static_cast<int>(view.kv.kv_heads) + k.kv_head;\n"))
mutant("25-ws-rows-past-key-hi",
       "read past the range: the row producer copies key key_hi too instead of zero-filling it (P = 0 times a poisoned slot)",
       ("kernels/src/prefill/attn_sm90_ws.cu",
        "          const bool valid = key >= k.key_lo && key < k.key_hi;\n          if (valid) {",
        "          const bool valid = key >= k.key_lo && key <= k.key_hi;\n          if (valid) {"))
mutant("26-ws-tma-last-page-whole",
       "read past seq_len: the tensor-copy producer copies a sequence's last page as a whole box (its slots past seq_len are not zero-filled)",
       ("kernels/src/prefill/attn_sm90_ws.cu",
        "      if (k0 < k.key_lo || k0 + box_rows > k.seq_len) edge_boxes |= 1u << b;",
        "      if (k0 < k.key_lo) edge_boxes |= 1u << b;"))
mutant("27-ws-causal-off-by-one",
       "causal off by one: the wgmma kernels' tile mask (wgmma_tile.cuh) lets each query row see the key after it",
       ("kernels/src/prefill/wgmma_tile.cuh",
        "    const int vis_hi = min(key_hi, causal ? pos + 1 : key_hi);",
        "    const int vis_hi = min(key_hi, causal ? pos + 2 : key_hi);"))

# ---- issue 23: attention sinks and ALiBi in decode (decode_split.cu, decode_common.cuh)
mutant("28-split-sink-per-partition",
       "sink counted per partition: the merge adds the sink's 2^(sink - max) once for every active partition instead of once",
       ("kernels/src/decode/decode_split.cu",
        "  if (has_sink) total += fast_exp2(sink2 - m_use);  // once, not per partition\n",
        "  if (has_sink) total += active * fast_exp2(sink2 - m_use);  // once per partition\n"))
mutant("29-decode-sink-not-in-lse",
       "sink left out of the LSE: add_sink() rescales the output but hands back the state without the sink, so direct (and auto's whole sequences) write the sinkless LSE",
       ("kernels/src/decode/decode_common.cuh",
        "__device__ __forceinline__ float add_sink(float o, float& m, float& l, float sink2) {",
        "__device__ __forceinline__ float add_sink(float o, float m, float l, float sink2) {"))
mutant("30-decode-alibi-sign-flipped",
       "ALiBi's distance with its sign flipped: the decode loop biases key j by slope * (query_pos - j), favouring the far keys",
       ("kernels/src/decode/decode_common.cuh",
        "        const float distance = static_cast<float>(key - query_pos);  // key position - query position\n",
        "        const float distance = static_cast<float>(query_pos - key);  // key position - query position\n"))
mutant("31-prefill-sink-not-rescaled",
       "sink added to the sum at the wrong scale: the prefill epilogues divide by the sum with the sink but do not rescale the output to the sink's max",
       ("kernels/src/prefill/prefill_common.cuh",
        "  return keep;\n}\n\n// Stores two",
        "  return 1.f;\n}\n\n// Stores two"))
mutant("33-ws-rows-32bit-bytes",
       "32-bit offsets: the warp-specialised kernel's row producer forms the byte offsets of whole K and V tiles in 32 bits "
       "(wraps past 4 GiB of cache) where it multiplies its 32-bit row (in 16-byte units) into 64 bits",
       ("kernels/src/prefill/attn_sm90_ws.cu",
        "      asm(\"mad.wide.u32 %0, %1, 16, %2;\\n\" : \"=l\"(src) : \"r\"(r), \"l\"(chunk_base));\n"
        "      asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" ::\"r\"(dst[j % kDst] + (j / kDst) * 1024), \"l\"(src)\n",
        "      src = chunk_base + static_cast<std::uint32_t>(r * 16u);\n"
        "      asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" ::\"r\"(dst[j % kDst] + (j / kDst) * 1024), \"l\"(src)\n"))
mutant("32-prefill-alibi-sign-flipped",
       "ALiBi's distance with its sign flipped in prefill: the CUDA-core kernel biases key j by slope * (pos - j)",
       ("kernels/src/prefill/prefill.cu",
        "    x += alibi2 * static_cast<float>(j - pos);\n",
        "    x += alibi2 * static_cast<float>(pos - j);\n"))

mutant("34-decode-padded-dims-read-past-row",
       "a head size read past its row: the decode loop's padded lanes (head dims 80, 112, 120) take the query's and the key's next columns (the next head's, or the next slot's) as if the row were that much wider",
       ("kernels/src/decode/decode_common.cuh",
        "                                    valid && (!T::kKPadded || r + TPT * i < T::kKVecs));\n",
        "                                    valid);\n"),
       ("kernels/src/decode/decode_common.cuh",
        "            h < heads_here && (!T::kKPadded || dim < T::kHeadDim)\n",
        "            h < heads_here\n"))

mutant("35-decode-mla-v-from-rope",
       "MLA V read from the rope columns: over a latent cache (V narrower than its 576-column rows) the decode paths take V as the last 512 columns, rope included, instead of the first 512",
       ("kernels/src/decode/decode_direct.cu",
        "  p.kv = kv;\n",
        "  p.kv = kv;\n"
        "  if (kv.v_head_dim < kv.head_dim && kv.value_strides.slot == kv.key_strides.slot)  // V = the row's last columns\n"
        "    p.kv.value_data = static_cast<const char*>(kv.value_data) +\n"
        "                      (kv.head_dim - kv.v_head_dim) * static_cast<std::int64_t>(dtype_size(view.kv_dtype));\n"))

mutant("36-mla-wgmma-v-from-rope",
       "MLA V read from the rope columns in the wgmma kernel: each warpgroup's P V reads V one 64-column atom to the right (columns 64..575: the rope part in, the first 64 latent columns out)",
       ("kernels/src/decode/decode_mla_sm90.cu",
        "    const std::uint32_t vs = ks + wg * 4 * kAtomBytes;\n",
        "    const std::uint32_t vs = ks + (wg * 4 + 1) * kAtomBytes;\n"))

# ---- upload / launchers ------------------------------------------------------------
mutant("19-upload-lengths-snapshot",
       "lengths baked in at capture: the kernels read a snapshot of seq_lens taken at upload; later length updates never reach them",
       ("kernels/src/harness/upload.cu",
        "  v.kv.seq_lens = d.seq_lens.as<std::int32_t>();\n",
        "  // A private copy of the lengths, made once (a graph input buffer nobody updates).\n"
        "  static std::vector<DeviceBuffer> snapshots;\n"
        "  auto snapshot = upload_vector(d.host_seq_lens);\n"
        "  if (!snapshot) return snapshot.error();\n"
        "  v.kv.seq_lens = snapshot->as<std::int32_t>();\n"
        "  snapshots.push_back(std::move(*snapshot));\n"))


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    out_dir = root / "scripts" / "mutants"
    worktree = "--worktree" in sys.argv[1:]
    only = set(a for a in sys.argv[1:] if a != "--worktree")
    table = []
    for name, header, edits in M:
        if only and name[:2] not in only:
            continue
        files = {}
        for path, old, new in edits:
            text = files.get(path)
            if text is None:
                text = (root / path).read_text() if worktree else subprocess.run(
                    ["git", "show", f"HEAD:{path}"], cwd=root, check=True, capture_output=True, text=True).stdout
                files[path] = text
                files.setdefault("__orig__" + path, text)
            count = text.count(old)
            if count != 1:
                sys.exit(f"{name}: {path}: the old text occurs {count} times")
            files[path] = text.replace(old, new)
        lines = [f"# mutant {name}: {header}\n"]
        paths, check = EXPECT[name[:2]]
        lines.append(f"# paths: {paths}\n")
        lines.append(f"# check: {check}\n")
        if name in EXTRA:
            lines.append(f"# extra: {EXTRA[name]}\n")
        for path in [p for p in files if not p.startswith("__orig__")]:
            orig = files["__orig__" + path].splitlines(keepends=True)
            new = files[path].splitlines(keepends=True)
            diff = list(difflib.unified_diff(orig, new, f"a/{path}", f"b/{path}", n=3))
            lines.append(f"diff --git a/{path} b/{path}\n")
            lines.extend(diff)
        (out_dir / f"{name}.patch").write_text("".join(lines))
        print(f"wrote {name}.patch")
        table.append(f"| {name[:2]} | `{name}.patch` | {header} | "
                     f"{', '.join(sorted({e[0].split('/')[-1] for e in edits}))} | {paths} | {check} | "
                     f"{EXTRA.get(name, '')} |\n")
    if not only:
        md = out_dir / "MUTANTS.md"
        text = md.read_text()
        begin, end = "<!-- table: make_patches.py -->\n", "<!-- end of table -->\n"
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        md.write_text(head + begin + "| NN | patch | bug class: fault | file | breaks | should be caught by | extra |\n"
                      "| --- | --- | --- | --- | --- | --- | --- |\n" + "".join(table) + end + tail)


if __name__ == "__main__":
    main()
