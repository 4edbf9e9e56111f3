#!/usr/bin/env python3
"""Writes the fuzz seed corpus (tests/fuzz/corpus/): small case files, each a
few hundred bytes, that cover the reader's and the case builder's branches:
both table forms, both layouts, the four cache forms, every cache dtype, recorded output and LSE,
metadata of every known key, a misaligned packing, non-finite inputs, and a
few broken files. Deterministic (fixed seed); rerun after changing it:
    python3 tests/fuzz/make_corpus.py
"""
import json
import math
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
rng = random.Random(9)

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "U8": 1}


def f16(x):
    return struct.pack("<e", x)


def bf16(x):
    return struct.pack("<f", x)[2:]


def encode(dtype, values):
    out = b""
    for v in values:
        if dtype == "F32":
            out += struct.pack("<f", v)
        elif dtype == "F64":
            out += struct.pack("<d", v)
        elif dtype == "F16":
            out += f16(v)
        elif dtype == "BF16":
            out += bf16(v)
        elif dtype in ("F8_E4M3", "F8_E5M2"):
            out += bytes([int(v) & 0xFF])  # raw codes
        elif dtype == "I32":
            out += struct.pack("<i", int(v))
        elif dtype == "I64":
            out += struct.pack("<q", int(v))
        else:
            out += bytes([int(v) & 0xFF])
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def safetensors(tensors, metadata=None, align=True):
    """tensors: list of (name, dtype, shape, values)."""
    if align:
        tensors = sorted(tensors, key=lambda t: -SIZES[t[1]])
    header, data = {}, b""
    for name, dtype, shape, values in tensors:
        raw = encode(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    if align:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def floats(n, dtype, scale=1.0):
    if dtype.startswith("F8"):
        return [rng.choice([0x38, 0x30, 0xB8, 0x3C, 0x28, 0xA8]) for _ in range(n)]
    return [round(rng.gauss(0, 1) * scale, 3) for _ in range(n)]


def case(kv_dtype="BF16", q_dtype="F32", layout="NHD", form="dense", block=2, kv_heads=1, q_heads=2, d=4, dv=4,
         seq_lens=(3, 2), q_lens=(1, 1), blocks=5, metadata=None, recorded=False, poison=None, align=True,
         cache="separate", x=2):
    """cache: "separate" (key_cache + value_cache in `layout`), "vllm" (kv_cache [2, blocks, ...] NHD),
    "flashinfer" (paged_kv_cache [blocks, 2, ...] in `layout`) or "classic" (vLLM's 5-D key, 4-D value)."""
    tokens = sum(q_lens)
    t = [("query", q_dtype, [tokens, q_heads, d], floats(tokens * q_heads * d, q_dtype))]
    shape = (lambda dim: [blocks, block, kv_heads, dim]) if layout == "NHD" else (lambda dim: [blocks, kv_heads, block, dim])
    if cache == "separate":
        t.append(("key_cache", kv_dtype, shape(d), floats(numel(shape(d)), kv_dtype)))
        t.append(("value_cache", kv_dtype, shape(dv), floats(numel(shape(dv)), kv_dtype)))
    elif cache == "vllm":
        combined = [2] + shape(d)
        t.append(("kv_cache", kv_dtype, combined, floats(numel(combined), kv_dtype)))
    elif cache == "flashinfer":
        combined = shape(d)[:1] + [2] + shape(d)[1:]
        t.append(("paged_kv_cache", kv_dtype, combined, floats(numel(combined), kv_dtype)))
    else:
        key, value = [blocks, kv_heads, d // x, block, x], [blocks, kv_heads, dv, block]
        t.append(("key_cache", kv_dtype, key, floats(numel(key), kv_dtype)))
        t.append(("value_cache", kv_dtype, value, floats(numel(value), kv_dtype)))
    pages = [(n + block - 1) // block for n in seq_lens]
    pool = list(range(blocks))
    rng.shuffle(pool)
    rows, k = [], 0
    for p in pages:
        rows.append(pool[k:k + p])
        k += p
    if form == "dense":
        width = max(pages) + 1
        table = [r + [-1] * (width - len(r)) for r in rows]
        t.append(("block_table", "I32", [len(rows), width], sum(table, [])))
        t.append(("seq_lens", "I32", [len(rows)], list(seq_lens)))
    else:
        indptr = [0]
        for r in rows:
            indptr.append(indptr[-1] + len(r))
        t.append(("kv_indptr", "I32", [len(rows) + 1], indptr))
        t.append(("kv_indices", "I32", [indptr[-1]], sum(rows, [])))
        t.append(("kv_last_page_len", "I32", [len(rows)], [n - (p - 1) * block for n, p in zip(seq_lens, pages)]))
    if any(q != 1 for q in q_lens):
        qsl = [0]
        for q in q_lens:
            qsl.append(qsl[-1] + q)
        t.append(("query_start_loc", "I32", [len(qsl)], qsl))
    if recorded:
        t.append(("output", "F32", [tokens, q_heads, dv], floats(tokens * q_heads * dv, "F32", 0.3)))
        t.append(("lse", "F32", [tokens, q_heads], floats(tokens * q_heads, "F32")))
    if poison:
        name, index = poison
        for i, entry in enumerate(t):
            if entry[0] == name:
                values = list(entry[3])
                values[index] = 0x7F if entry[1].startswith("F8") else math.nan
                t[i] = (entry[0], entry[1], entry[2], values)
    return safetensors(t, metadata, align)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    seeds = {
        "dense_nhd_bf16_decode": case(),
        "dense_hnd_f16_prefill": case("F16", "F16", "HND", seq_lens=(3, 4), q_lens=(3, 2)),
        "csr_nhd_e4m3_scales": case("F8_E4M3", "BF16", form="csr", metadata={"k_scale": "0.5", "v_scale": "0.25"}),
        "csr_hnd_e5m2_window": case("F8_E5M2", "F32", "HND", "csr", seq_lens=(5, 1), q_lens=(2, 1), blocks=6,
                                    metadata={"sliding_window": "2", "causal": "True", "softcap": "30.0"}),
        "dense_f32_gqa_recorded": case("F32", "F32", kv_heads=2, q_heads=4, d=2, dv=3, recorded=True,
                                       metadata={"scale": "0.5", "kv_layout": "NHD", "block_size": "2",
                                                 "description": "recorded \u001b[31m output", "seed": "7"}),
        "dense_block1_noncausal": case("BF16", "BF16", block=1, seq_lens=(2, 3), q_lens=(2, 1), blocks=6,
                                       metadata={"causal": "false", "sliding_window": "0"}),
        "misaligned_packing": case("F16", "F32", align=False, metadata={"format": "pt"}),
        "nan_query": case(poison=("query", 3)),
        "nan_referenced_key": case("F8_E4M3", "F32", form="csr", poison=("key_cache", 0)),
        "invalid_page": safetensors([("query", "F32", [1, 1, 2], [1, 2]),
                                     ("key_cache", "F32", [1, 1, 1, 2], [1, 2]),
                                     ("value_cache", "F32", [1, 1, 1, 2], [1, 2]),
                                     ("block_table", "I32", [1, 1], [7]), ("seq_lens", "I32", [1], [1])]),
        "unknown_tensor": safetensors([("blocktable", "I32", [1], [0])]),
        "empty_header": struct.pack("<Q", 2) + b"{}",
        "metadata_only": safetensors([], {"description": "d"}),
        # The combined and classic cache forms (appended: the seeds above keep their bytes).
        "vllm_kv_cache_bf16": case(cache="vllm", seq_lens=(3, 4), q_lens=(2, 1)),
        "flashinfer_hnd_csr_f16": case("F16", "F16", "HND", "csr", cache="flashinfer", metadata={"kv_layout": "HND"}),
        "flashinfer_nhd_e4m3": case("F8_E4M3", "F32", cache="flashinfer", kv_heads=2, q_heads=4),
        "vllm_classic_x2": case(cache="classic", d=4, dv=4, x=2, metadata={"kv_layout": "vllm-classic"}),
        "vllm_classic_f32_x4": case("F32", "F32", cache="classic", d=4, dv=2, x=4),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()
