#!/usr/bin/env python3
"""GPU-machine test of scripts/pagecheck_record.py against a real peer:
PyTorch's flex_attention paged attention (torch.nn.attention.experimental).

usage: test_record_flex.py OUTDIR [PAGECHECK]

Builds a paged BF16 KV cache with PagedAttention (pages handed out in a
shuffled order), runs flex_attention decode over it (GQA 8/2, d128, page
128, ragged lengths), records its inputs and output with record() in every
cache form the recorder accepts (key/value NHD and HND, vLLM kv_cache,
FlashInfer paged_kv_cache with a CSR table, vLLM's classic 5-D layout),
then `pagecheck replay`s each file: the reference must agree with the
recorded flex output within the BF16 tolerance (exit 0). Also checks
Recorder's every-Nth and only-non-finite selection and that only referenced
pages are written. Exit 0 when all hold.
"""
import os
import random
import subprocess
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.nn.attention.experimental._paged_attention import PagedAttention

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pagecheck_record import Recorder, record  # noqa: E402


def main(argv):
    out = argv[1] if len(argv) > 1 else "record-flex"
    pagecheck = argv[2] if len(argv) > 2 else "pagecheck"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(7)
    random.seed(7)
    dev = "cuda"
    B, HQ, HKV, D, PAGE = 3, 8, 2, 128, 128
    lens = [300, 1000, 77]
    n_pages = 64  # a pool much larger than the 13 pages used
    pa = PagedAttention(n_pages, PAGE, B, device=dev)
    pa.empty_pages = random.sample(range(n_pages), n_pages)  # shuffled physical pages
    k_cache = torch.zeros(1, HKV, n_pages * PAGE, D, dtype=torch.bfloat16, device=dev)
    v_cache = torch.zeros_like(k_cache)
    for b, n in enumerate(lens):
        pa.reserve(torch.tensor(b, device=dev), torch.tensor(n, device=dev))
        k = torch.randn(1, HKV, n, D, dtype=torch.bfloat16, device=dev)
        v = torch.randn(1, HKV, n, D, dtype=torch.bfloat16, device=dev)
        pa.assign(torch.tensor([b], device=dev), torch.arange(n, device=dev)[None], k, v, k_cache, v_cache)

    seq_lens = torch.tensor(lens, device=dev)
    q = torch.randn(B, HQ, 1, D, dtype=torch.bfloat16, device=dev)
    max_len = max(lens)
    logical_pages = (max_len + PAGE - 1) // PAGE

    def valid(b, h, q_idx, kv_idx):
        return kv_idx < seq_lens[b]

    logical = create_block_mask(valid, B, None, 1, logical_pages * PAGE, device=dev, BLOCK_SIZE=(128, PAGE))
    physical = pa.convert_logical_block_mask(logical, kv_len=seq_lens)
    o, lse = flex_attention(q, k_cache, v_cache, block_mask=physical, enable_gqa=True, return_lse=True)
    torch.cuda.synchronize()

    query = q[:, :, 0, :]            # [tokens = B, HQ, D]
    output = o[:, :, 0, :]
    lse_tok = lse[:, :, 0]
    # Physical pool as pagecheck's NHD [pages, page, kv_heads, d] and HND.
    key_nhd = k_cache[0].reshape(HKV, n_pages, PAGE, D).permute(1, 2, 0, 3).contiguous()
    val_nhd = v_cache[0].reshape(HKV, n_pages, PAGE, D).permute(1, 2, 0, 3).contiguous()
    key_hnd, val_hnd = key_nhd.permute(0, 2, 1, 3).contiguous(), val_nhd.permute(0, 2, 1, 3).contiguous()
    table = pa.page_table[:B, :logical_pages].to(torch.int32)
    pages_used = [(n + PAGE - 1) // PAGE for n in lens]
    kv_indptr = torch.tensor([0] + list(torch.tensor(pages_used).cumsum(0).tolist()), dtype=torch.int32)
    kv_indices = torch.cat([table[b, :pages_used[b]].cpu() for b in range(B)])
    kv_last = torch.tensor([n - (p - 1) * PAGE for n, p in zip(lens, pages_used)], dtype=torch.int32)
    x = 8
    key_classic = key_nhd.reshape(n_pages, PAGE, HKV, D // x, x).permute(0, 2, 3, 1, 4).contiguous()
    val_classic = val_nhd.permute(0, 2, 3, 1).contiguous()

    common = dict(query=query, output=output, description="flex_attention paged decode")
    files = {
        "nhd": record(f"{out}/flex_nhd.safetensors", key_cache=key_nhd, value_cache=val_nhd, block_table=table,
                      seq_lens=seq_lens, **common),
        "nhd_lse": record(f"{out}/flex_nhd_lse.safetensors", key_cache=key_nhd, value_cache=val_nhd,
                          block_table=table, seq_lens=seq_lens, lse=lse_tok, **common),
        "hnd": record(f"{out}/flex_hnd.safetensors", key_cache=key_hnd, value_cache=val_hnd, kv_layout="HND",
                      block_table=table, seq_lens=seq_lens, **common),
        "vllm_kv_cache": record(f"{out}/flex_vllm.safetensors", kv_cache=torch.stack([key_nhd, val_nhd]),
                                block_table=table, seq_lens=seq_lens, **common),
        "flashinfer_csr": record(f"{out}/flex_flashinfer.safetensors",
                                 paged_kv_cache=torch.stack([key_nhd, val_nhd], dim=1), kv_indptr=kv_indptr,
                                 kv_indices=kv_indices, kv_last_page_len=kv_last, **common),
        "flashinfer_hnd": record(f"{out}/flex_flashinfer_hnd.safetensors",
                                 paged_kv_cache=torch.stack([key_hnd, val_hnd], dim=1), kv_layout="HND",
                                 kv_indptr=kv_indptr, kv_indices=kv_indices, kv_last_page_len=kv_last, **common),
        "vllm_classic": record(f"{out}/flex_classic.safetensors", key_cache=key_classic, value_cache=val_classic,
                               block_table=table, seq_lens=seq_lens, **common),
    }
    failures = []
    from safetensors.torch import load_file
    kept = load_file(files["nhd"])["key_cache"].shape[0]
    if kept != sum(pages_used) + 1:
        failures.append(f"compact file keeps {kept} pages, expected {sum(pages_used)} used + 1 spare")
    for name, path in files.items():
        paths = "reference,direct,split,auto,prefill" if name == "nhd" else "reference"
        r = subprocess.run([pagecheck, "replay", path, "--paths", paths, "--no-timing", "--json",
                            f"{out}/{name}.json"], capture_output=True, text=True)
        print(f"--- {name}: exit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-500:]}")
        if r.returncode != 0:
            failures.append(f"{name}: pagecheck replay exit {r.returncode}")

    rec = Recorder(f"{out}/every", every=3)
    for i in range(7):
        rec(key_cache=key_nhd, value_cache=val_nhd, block_table=table, seq_lens=seq_lens, **common)
    if [os.path.basename(p) for p in rec.written] != [f"step-{i:06d}.safetensors" for i in (0, 3, 6)]:
        failures.append(f"every=3 wrote {rec.written}")
    bad = output.clone()
    bad[1, 2, 5] = float("nan")
    rec = Recorder(f"{out}/nonfinite", only_nonfinite=True)
    for i in range(4):
        rec(query=query, output=bad if i == 2 else output, key_cache=key_nhd, value_cache=val_nhd,
            block_table=table, seq_lens=seq_lens)
    if len(rec.written) != 1 or not rec.written[0].endswith("step-000002.safetensors"):
        failures.append(f"only_nonfinite wrote {rec.written}")
    else:
        r = subprocess.run([pagecheck, "replay", rec.written[0], "--paths", "reference", "--no-timing"],
                           capture_output=True, text=True)
        print(f"--- nonfinite recording: exit {r.returncode} (must be 1: the recorded output disagrees)")
        if r.returncode != 1:
            failures.append(f"the non-finite recording replays with exit {r.returncode}, expected 1")

    for f in failures:
        print("FAIL:", f)
    print(f"test_record_flex: {len(files)} recordings, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
