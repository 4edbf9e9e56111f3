#!/usr/bin/env python3
"""Writes pagecheck's recorded reference cases (data/*.safetensors).

An implementation independent of the project: PyTorch in float64, sharing no
code with pagecheck. Each case is a paged KV cache, a block table (vLLM dense
or FlashInfer CSR), a query, and the attention output and LSE computed here in
float64 and stored as F32 under `output` and `lse`. The C++ reference must
reproduce them at float32 rounding level (relative L2 under 1e-5).

The cases cover both table forms, both cache layouts, every KV dtype (F32,
F16, BF16, F8_E4M3 = float8_e4m3fn, F8_E5M2) with k/v scales on the fp8 ones,
every query dtype (F32, F16, BF16), decode, prefill, chunked and mixed batches,
sliding windows, softcap, an explicit scale, non-causal attention, MHA, GQA,
MQA, a 192/128 head, block size 1, pages shared between sequences, junk in the
padding of dense tables and NaN in every unreferenced page and in the slots
past each sequence's length.

Usage (needs torch and safetensors; no GPU):
    python3 scripts/make_reference_cases.py --out data
"""
import argparse
import math
import os
import sys

import torch
from safetensors.torch import load_file, save_file

STORAGE = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
FP8_MAX = {"F8_E4M3": 448.0, "F8_E5M2": 57344.0}


def case(name, **kw):
    spec = dict(
        name=name, seed=1, seq_lens=[16], q_lens=None, q_heads=4, kv_heads=2,
        head_dim=32, v_head_dim=None, block_size=16, q_dtype="BF16", kv_dtype="BF16",
        layout="NHD", form="dense", causal=True, window=0, softcap=0.0, scale=None,
        k_scale=1.0, v_scale=1.0, magnitude=1.0, share_prefix=False, write_qsl=True,
        spare_pages=3, description="")
    for key in kw:
        if key not in spec:
            raise KeyError(f"case {name}: unknown setting {key}")
    spec.update(kw)
    if spec["q_lens"] is None:
        spec["q_lens"] = [1] * len(spec["seq_lens"])
    if spec["v_head_dim"] is None:
        spec["v_head_dim"] = spec["head_dim"]
    return spec


CASES = [
    case("dense_nhd_bf16_decode", seed=11, seq_lens=[1, 15, 17, 40], q_heads=8, kv_heads=2,
         head_dim=64, write_qsl=False, description="decode, GQA 4, BF16, dense table with junk padding"),
    case("csr_hnd_f16_prefill", seed=12, seq_lens=[5, 16, 23], q_lens=[5, 16, 23], q_heads=4,
         kv_heads=4, head_dim=32, block_size=8, q_dtype="F16", kv_dtype="F16", layout="HND",
         form="csr", description="prefill, MHA, F16, HND, CSR"),
    case("dense_hnd_f32_mixed_window", seed=13, seq_lens=[9, 20, 33, 12], q_lens=[1, 7, 1, 12],
         q_heads=8, kv_heads=2, head_dim=64, q_dtype="F32", kv_dtype="F32", layout="HND",
         window=8, description="mixed prefill and decode, sliding window 8, F32"),
    case("csr_nhd_e4m3_decode_softcap", seed=14, seq_lens=[3, 16, 31, 50], q_heads=8, kv_heads=1,
         head_dim=64, kv_dtype="F8_E4M3", k_scale=0.05, v_scale=0.02, softcap=30.0, form="csr",
         write_qsl=False, description="decode, MQA, fp8 E4M3 KV with scales, softcap 30"),
    case("dense_nhd_e5m2_chunked_window", seed=15, seq_lens=[24, 40, 7], q_lens=[8, 3, 7],
         q_heads=8, kv_heads=2, head_dim=32, q_dtype="F16", kv_dtype="F8_E5M2", k_scale=0.5,
         v_scale=0.25, window=16, description="chunked prefill, fp8 E5M2 KV with scales, window 16"),
    case("csr_nhd_bf16_192_128_mixed", seed=16, seq_lens=[20, 9, 13], q_lens=[20, 1, 4],
         q_heads=4, kv_heads=1, head_dim=192, v_head_dim=128, block_size=8, form="csr",
         description="DeepSeek-like 192/128 head, mixed"),
    case("dense_nhd_f32_noncausal_scale", seed=17, seq_lens=[12, 21], q_lens=[12, 5], q_heads=4,
         kv_heads=2, head_dim=32, block_size=4, q_dtype="F32", kv_dtype="F32", causal=False,
         scale=0.3, description="non-causal, explicit scale 0.3"),
    case("dense_hnd_f16_noncausal_window", seed=18, seq_lens=[30], q_lens=[6], q_heads=2,
         kv_heads=2, head_dim=16, block_size=8, q_dtype="F16", kv_dtype="F16", layout="HND",
         causal=False, window=5, description="non-causal with window 5"),
    case("csr_hnd_f32_large_logits", seed=19, seq_lens=[33, 64], q_lens=[1, 4], q_heads=4,
         kv_heads=2, head_dim=32, q_dtype="F32", kv_dtype="F32", layout="HND", form="csr",
         magnitude=10.0, description="logits in the hundreds: needs max subtraction"),
    case("dense_nhd_f16_block1_decode", seed=20, seq_lens=[1, 2, 9], q_heads=4, kv_heads=2,
         head_dim=32, block_size=1, q_dtype="F16", kv_dtype="BF16", write_qsl=False,
         description="block size 1"),
    case("dense_nhd_bf16_shared_prefix", seed=21, seq_lens=[35, 20, 16, 3], q_lens=[1, 4, 1, 3],
         q_heads=4, kv_heads=2, head_dim=32, share_prefix=True,
         description="first page shared between sequences (prefix caching)"),
    case("csr_nhd_e4m3_prefill_gqa8", seed=22, seq_lens=[19, 7], q_lens=[19, 7], q_heads=8,
         kv_heads=1, head_dim=32, q_dtype="F32", kv_dtype="F8_E4M3", k_scale=0.125, v_scale=0.0625,
         form="csr", description="prefill, fp8 E4M3, F32 query, GQA 8"),
    case("dense_hnd_e5m2_decode_softcap", seed=23, seq_lens=[17, 8, 33], q_heads=8, kv_heads=8,
         head_dim=64, block_size=16, q_dtype="BF16", kv_dtype="F8_E5M2", layout="HND",
         softcap=50.0, magnitude=3.0, description="decode, E5M2 HND, softcap 50 with large logits"),
    case("csr_hnd_bf16_window1_prefill", seed=24, seq_lens=[10, 17], q_lens=[10, 6], q_heads=4,
         kv_heads=2, head_dim=32, block_size=8, layout="HND", form="csr", window=1,
         description="window 1: each token sees only itself"),
    case("dense_nhd_f32_window_eq_len", seed=25, seq_lens=[16, 15], q_lens=[2, 1], q_heads=4,
         kv_heads=4, head_dim=16, block_size=16, q_dtype="F32", kv_dtype="F32", window=15,
         description="window equal to the length and one less"),
]


def to_storage(x64, dtype_name):
    """float64 (NaN allowed) -> stored dtype; fp8 saturates at its finite max."""
    if dtype_name in FP8_MAX:
        limit = FP8_MAX[dtype_name]
        return x64.clamp(-limit, limit).to(torch.float32).to(STORAGE[dtype_name])
    return x64.to(STORAGE[dtype_name])


def to_hnd(stored):
    """[blocks, slots, heads, dim] -> [blocks, heads, slots, dim], bytes moved as integers."""
    size = stored.element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[size]
    return stored.view(as_int).permute(0, 2, 1, 3).contiguous().view(stored.dtype)


def build(spec):
    gen = torch.Generator().manual_seed(spec["seed"])
    seq_lens, q_lens = spec["seq_lens"], spec["q_lens"]
    num_seqs = len(seq_lens)
    bs = spec["block_size"]
    hq, hkv = spec["q_heads"], spec["kv_heads"]
    dk, dv = spec["head_dim"], spec["v_head_dim"]
    assert hq % hkv == 0 and all(1 <= q <= s for q, s in zip(q_lens, seq_lens)), spec["name"]

    # Logical pages of each sequence; with share_prefix the first (full) page
    # of sequence 0 also serves every other sequence whose first page is full.
    pages_needed = [math.ceil(length / bs) for length in seq_lens]
    logical = []
    next_page = 0
    for s in range(num_seqs):
        row = []
        for p in range(pages_needed[s]):
            if spec["share_prefix"] and s > 0 and p == 0 and seq_lens[s] >= bs and seq_lens[0] >= bs:
                row.append(logical[0][0])
            else:
                row.append(next_page)
                next_page += 1
        logical.append(row)
    num_blocks = next_page + spec["spare_pages"]
    physical = torch.randperm(num_blocks, generator=gen).tolist()
    rows = [[physical[p] for p in row] for row in logical]

    # The true K/V (float64) in NHD order; NaN everywhere no sequence reads.
    mag = spec["magnitude"]
    key64 = torch.full((num_blocks, bs, hkv, dk), float("nan"), dtype=torch.float64)
    val64 = torch.full((num_blocks, bs, hkv, dv), float("nan"), dtype=torch.float64)
    for s in range(num_seqs):
        for p, page in enumerate(rows[s]):
            used = min(bs, seq_lens[s] - p * bs)
            key64[page, :used] = mag * torch.randn((used, hkv, dk), generator=gen, dtype=torch.float64)
            val64[page, :used] = torch.randn((used, hkv, dv), generator=gen, dtype=torch.float64)
    # A stored x means x * scale: store true / scale.
    key_stored = to_storage(key64 / spec["k_scale"], spec["kv_dtype"])
    val_stored = to_storage(val64 / spec["v_scale"], spec["kv_dtype"])
    key_deq = key_stored.to(torch.float64) * spec["k_scale"]
    val_deq = val_stored.to(torch.float64) * spec["v_scale"]

    num_tokens = sum(q_lens)
    query_stored = to_storage(mag * torch.randn((num_tokens, hq, dk), generator=gen, dtype=torch.float64),
                              spec["q_dtype"])
    query = query_stored.to(torch.float64)

    # Attention, per sequence, in float64.
    scale = spec["scale"] if spec["scale"] is not None else 1.0 / math.sqrt(dk)
    group = hq // hkv
    out = torch.zeros((num_tokens, hq, dv), dtype=torch.float64)
    lse = torch.zeros((num_tokens, hq), dtype=torch.float64)
    start = 0
    for s in range(num_seqs):
        length, n = seq_lens[s], q_lens[s]
        index = torch.tensor(rows[s], dtype=torch.long)
        k = key_deq[index].reshape(-1, hkv, dk)[:length].repeat_interleave(group, dim=1)  # [L, hq, dk]
        v = val_deq[index].reshape(-1, hkv, dv)[:length].repeat_interleave(group, dim=1)  # [L, hq, dv]
        q = query[start:start + n]                                                        # [n, hq, dk]
        logits = torch.einsum("nhd,lhd->hnl", q, k) * scale
        if spec["softcap"] > 0:
            logits = spec["softcap"] * torch.tanh(logits / spec["softcap"])
        pos = torch.arange(n).unsqueeze(1) + (length - n)  # absolute position of each query token
        key_pos = torch.arange(length).unsqueeze(0)
        visible = torch.ones((n, length), dtype=torch.bool)
        if spec["causal"]:
            visible &= key_pos <= pos
        if spec["window"] > 0:
            visible &= key_pos > pos - spec["window"]
        assert bool(visible.any(dim=1).all()), spec["name"]
        logits = logits.masked_fill(~visible.unsqueeze(0), float("-inf"))
        norm = torch.logsumexp(logits, dim=-1)                     # [hq, n]
        probs = torch.exp(logits - norm.unsqueeze(-1))             # [hq, n, L]
        out[start:start + n] = torch.einsum("hnl,lhd->nhd", probs, v)
        lse[start:start + n] = norm.transpose(0, 1)
        start += n
    assert torch.isfinite(out).all() and torch.isfinite(lse).all(), spec["name"]

    tensors = {
        "query": query_stored.contiguous(),
        "key_cache": key_stored if spec["layout"] == "NHD" else to_hnd(key_stored),
        "value_cache": val_stored if spec["layout"] == "NHD" else to_hnd(val_stored),
        "output": out.to(torch.float32).contiguous(),
        "lse": lse.to(torch.float32).contiguous(),
    }
    if spec["form"] == "dense":
        width = max(pages_needed) + 2
        table = torch.empty((num_seqs, width), dtype=torch.int32)
        junk = [-1, 0, 999999, -123456]
        for s in range(num_seqs):
            for j in range(width):
                table[s, j] = rows[s][j] if j < len(rows[s]) else junk[(s + j) % len(junk)]
        tensors["block_table"] = table
        tensors["seq_lens"] = torch.tensor(seq_lens, dtype=torch.int32)
    else:
        indptr = [0]
        for row in rows:
            indptr.append(indptr[-1] + len(row))
        tensors["kv_indptr"] = torch.tensor(indptr, dtype=torch.int32)
        tensors["kv_indices"] = torch.tensor([p for row in rows for p in row], dtype=torch.int32)
        tensors["kv_last_page_len"] = torch.tensor(
            [length - (len(row) - 1) * bs for length, row in zip(seq_lens, rows)], dtype=torch.int32)
    if spec["write_qsl"] or max(q_lens) > 1:
        qsl = [0]
        for n in q_lens:
            qsl.append(qsl[-1] + n)
        tensors["query_start_loc"] = torch.tensor(qsl, dtype=torch.int32)

    metadata = {
        "description": spec["description"],
        "generator": "scripts/make_reference_cases.py (PyTorch float64)",
        "torch_version": torch.__version__,
        "seed": str(spec["seed"]),
    }
    if spec["layout"] != "NHD" or spec["seed"] % 2 == 0:
        metadata["kv_layout"] = spec["layout"]
    if not spec["causal"]:
        metadata["causal"] = "false"
    elif spec["seed"] % 3 == 0:
        metadata["causal"] = "true"
    if spec["scale"] is not None:
        metadata["scale"] = repr(float(spec["scale"]))
    if spec["window"] > 0:
        metadata["sliding_window"] = str(spec["window"])
    if spec["softcap"] > 0:
        metadata["softcap"] = repr(float(spec["softcap"]))
    if spec["k_scale"] != 1.0:
        metadata["k_scale"] = repr(float(spec["k_scale"]))
    if spec["v_scale"] != 1.0:
        metadata["v_scale"] = repr(float(spec["v_scale"]))
    return tensors, metadata


def same_bytes(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the .safetensors files")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    failures = 0
    total = 0
    for spec in CASES:
        try:
            tensors, metadata = build(spec)
            path = os.path.join(args.out, spec["name"] + ".safetensors")
            save_file(tensors, path, metadata=metadata)
            back = load_file(path)
            assert set(back) == set(tensors), spec["name"]
            for name, t in tensors.items():
                assert same_bytes(back[name], t), f"{spec['name']}: {name} did not read back"
            size = os.path.getsize(path)
            total += size
            print(f"{spec['name']}: {size} bytes, tensors "
                  + ", ".join(f"{k}{list(v.shape)}:{str(v.dtype).replace('torch.', '')}" for k, v in tensors.items()))
        except Exception as error:  # keep going: one run should give every case that works
            failures += 1
            print(f"FAILED {spec['name']}: {type(error).__name__}: {error}", file=sys.stderr)
    print(f"{len(CASES) - failures} cases, {total} bytes; torch {torch.__version__}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
