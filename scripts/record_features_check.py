#!/usr/bin/env python3
"""GPU-machine check of issue 23's case kinds, end to end from PyTorch:
attention sinks, ALiBi, a head size the built-in paths do not build (96),
and latent (MLA) caches in vLLM's and FlashInfer's forms.

usage: record_features_check.py OUTDIR [PAGECHECK]

For each kind it lays the tensors out as vLLM (or FlashInfer) holds them on
the GPU (vLLM's FlashAttention kv_cache [2, num_blocks, block_size,
kv_heads, head_dim] with a shuffled block table and a mixed decode/chunked
batch; gpt-oss's float32 `sinks` [num_heads]; ALiBi `alibi_slopes`
[num_heads]; MLA's kv_c_and_k_pe_cache [num_blocks, 64, 576]; FlashInfer's
ckv_cache + kpe_cache with q_nope + q_pe and a CSR table), computes the
attention in float64 with its own loops over the table (written from the
formulas of docs/case-format.md, nothing shared with pagecheck), records
inputs, output and LSE with scripts/pagecheck_record.py, and runs
`pagecheck replay` on each file: exit 0 (the reference agrees with the
recorded float64 result, and so does every built-in GPU path that takes
the kind: sinks, ALiBi, head size 96 and latent decode run on them since
sessions 5-14; the others report it n/a). Then
each file again with a wrong recorded output made the way a buggy kernel
would (the sink added twice, the sink left out of the LSE, ALiBi's sign
flipped, MLA's V read from the rope columns, a head-96 kernel reading 128
columns' worth of the wrong rows): exit 1. Prints one PASS/FAIL line per
check; exit 0 when all pass.

Needs torch and safetensors (any device; CUDA when present), and a pagecheck
binary. Writes everything under OUTDIR.
"""
import math
import os
import random
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pagecheck_record import record  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def paged_batch(seq_lens, q_lens, block_size, num_blocks, gen):
    """A shuffled dense block table for the lengths (vLLM's block_table), and query_start_loc."""
    pages = [(n + block_size - 1) // block_size for n in seq_lens]
    ids = list(range(num_blocks))
    random.Random(gen).shuffle(ids)
    width = max(pages)
    table, at = [], 0
    for p in pages:
        table.append(ids[at: at + p] + [0] * (width - p))
        at += p
    starts = [0]
    for q in q_lens:
        starts.append(starts[-1] + q)
    return (torch.tensor(table, dtype=torch.int32, device=DEV), torch.tensor(seq_lens, dtype=torch.int32, device=DEV),
            torch.tensor(starts, dtype=torch.int32, device=DEV))


def attention64(query, key_rows, value_rows, table, seq_lens, starts, block_size, scale, *, sinks=None, alibi=None,
                window=0, sink_twice=False, sink_not_in_lse=False, alibi_sign=1.0):
    """Float64 paged attention, one (token, head) at a time.

    key_rows(page, slot, kv_head) -> [dk] and value_rows(page, slot, kv_head) -> [dv] read the cache;
    the keyword faults make the wrong answers a buggy kernel would give."""
    tokens, heads, _ = query.shape
    q64 = query.double().cpu()
    table, seq_lens, starts = table.cpu().tolist(), seq_lens.cpu().tolist(), starts.cpu().tolist()
    outs, lses = [], []
    for s, n in enumerate(seq_lens):
        q_len = starts[s + 1] - starts[s]
        slots = [(table[s][j // block_size], j % block_size) for j in range(n)]
        K = [torch.stack([key_rows(p, k, g) for p, k in slots]).double() for g in range(key_rows.kv_heads)]
        V = [torch.stack([value_rows(p, k, g) for p, k in slots]).double() for g in range(key_rows.kv_heads)]
        for i in range(q_len):
            t = starts[s] + i
            pos = n - q_len + i
            for h in range(heads):
                g = h // (heads // len(K))
                logits = (K[g] @ q64[t, h]) * scale
                j = torch.arange(n, dtype=torch.float64)
                if alibi is not None:
                    logits = logits + alibi_sign * float(alibi[h]) * (j - pos)
                visible = j <= pos
                if window > 0:
                    visible &= j > pos - window
                logits = torch.where(visible, logits, torch.tensor(-math.inf, dtype=torch.float64))
                m = logits.max()
                sink = None if sinks is None else float(sinks[h])
                if sink is not None:
                    m = max(m, torch.tensor(sink, dtype=torch.float64))
                w = torch.exp(logits - m)
                denom = w.sum()
                if sink is not None:
                    denom = denom + (2 if sink_twice else 1) * math.exp(sink - float(m))
                o = (w[:, None] * V[g]).sum(0) / denom
                lse_denom = w.sum() if sink_not_in_lse else denom
                outs.append((t, h, o))
                lses.append((t, h, float(m) + math.log(float(lse_denom))))
    dv = outs[0][2].shape[0]
    out = torch.zeros(tokens, heads, dv, dtype=torch.float64)
    lse = torch.zeros(tokens, heads, dtype=torch.float64)
    for t, h, o in outs:
        out[t, h] = o
    for t, h, v in lses:
        lse[t, h] = v
    return out.float(), lse.float()


class Rows:
    """Reads [dim] rows of one cache tensor laid out [blocks, block_size, kv_heads, row] (a view: cols)."""

    def __init__(self, cache, cols=None):
        self.cache = cache.detach().cpu()
        self.kv_heads = self.cache.shape[2]
        self.cols = cols

    def __call__(self, page, slot, head):
        row = self.cache[page, slot, head]
        return row if self.cols is None else row[self.cols]


def replay(pagecheck, path, name, expect, out):
    r = subprocess.run([pagecheck, "replay", path, "--no-timing", "--json", f"{out}/{name}.json"], capture_output=True,
                       text=True)
    ok = r.returncode == expect
    print(f"{'PASS' if ok else 'FAIL'}: {name}: pagecheck replay exit {r.returncode}, expected {expect}")
    if not ok:
        print(r.stdout[-3000:], r.stderr[-1000:])
    return ok


def main(argv):
    out = argv[1] if len(argv) > 1 else "record-features"
    pagecheck = argv[2] if len(argv) > 2 else "pagecheck"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(23)
    results = []

    # --- gpt-oss-like: sinks (window 128 and full), and ALiBi, over vLLM's kv_cache.
    bs, heads, kv_heads, d = 16, 8, 2, 64
    seq_lens, q_lens = [300, 17, 150, 1], [1, 9, 33, 1]
    blocks = 64
    table, lens, starts = paged_batch(seq_lens, q_lens, bs, blocks, 1)
    kv_cache = torch.randn(2, blocks, bs, kv_heads, d, dtype=torch.bfloat16, device=DEV)
    query = torch.randn(sum(q_lens), heads, d, dtype=torch.bfloat16, device=DEV)
    sinks = (torch.rand(heads, device=DEV) * 8 - 2).float()  # gpt-oss keeps them float32 [num_heads]
    alibi = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)], dtype=torch.float32, device=DEV)
    scale = 1 / math.sqrt(d)
    keys, vals = Rows(kv_cache[0]), Rows(kv_cache[1])
    common = dict(query=query, kv_cache=kv_cache, block_table=table, seq_lens=lens, query_start_loc=starts)
    for name, kw, wrong in [
        ("sinks_full", dict(sinks=sinks), dict(sink_twice=True)),
        ("sinks_window", dict(sinks=sinks, window=128), dict(sink_not_in_lse=True)),
        ("alibi", dict(alibi=alibi), dict(alibi_sign=-1.0)),
    ]:
        o, lse = attention64(query, keys, vals, table, lens, starts, bs, scale, **kw)
        extra = {"sinks": kw.get("sinks"), "alibi_slopes": kw.get("alibi"), "sliding_window": kw.get("window", 0)}
        path = record(f"{out}/{name}.safetensors", output=o, lse=lse, description=f"issue 23: {name}", **common, **extra)
        results.append(replay(pagecheck, path, name, 0, out))
        o_bad, lse_bad = attention64(query, keys, vals, table, lens, starts, bs, scale, **kw, **wrong)
        bad = record(f"{out}/{name}_wrong.safetensors", output=o_bad, lse=lse_bad, **common, **extra)
        results.append(replay(pagecheck, bad, f"{name}_wrong", 1, out))

    # --- head size 96 (Phi-3-mini): vLLM's kv_cache (the CUDA-core kernels).
    d96 = 96
    kv96 = torch.randn(2, blocks, bs, kv_heads, d96, dtype=torch.bfloat16, device=DEV)
    q96 = torch.randn(sum(q_lens), heads, d96, dtype=torch.bfloat16, device=DEV)
    o, lse = attention64(q96, Rows(kv96[0]), Rows(kv96[1]), table, lens, starts, bs, 1 / math.sqrt(d96))
    path = record(f"{out}/head96.safetensors", query=q96, kv_cache=kv96, block_table=table, seq_lens=lens,
                  query_start_loc=starts, output=o, lse=lse, description="issue 23: head dim 96")
    results.append(replay(pagecheck, path, "head96", 0, out))
    # A kernel that took the wrong KV head's rows (head 96 read as 128-wide rows lands there).
    o_bad, lse_bad = attention64(q96, Rows(kv96[0].roll(1, dims=2)), Rows(kv96[1].roll(1, dims=2)), table, lens,
                                 starts, bs, 1 / math.sqrt(d96))
    bad = record(f"{out}/head96_wrong.safetensors", query=q96, kv_cache=kv96, block_table=table, seq_lens=lens,
                 query_start_loc=starts, output=o_bad, lse=lse_bad)
    results.append(replay(pagecheck, bad, "head96_wrong", 1, out))

    # --- MLA: vLLM's kv_c_and_k_pe_cache [num_blocks, 64, 576], 16 heads, decode + chunks.
    mla_bs, latent, rope, mla_heads = 64, 512, 64, 16
    mla_lens, mla_q = [700, 64, 1], [1, 8, 1]
    mla_blocks = 32
    mtable, mlens, mstarts = paged_batch(mla_lens, mla_q, mla_bs, mla_blocks, 2)
    ckv = (torch.randn(mla_blocks, mla_bs, latent + rope, device=DEV) * 0.5).to(torch.bfloat16)
    mq = torch.randn(sum(mla_q), mla_heads, latent + rope, dtype=torch.bfloat16, device=DEV)
    mscale = 0.1 * math.log(40.0) + 1.0
    mla_scale = mscale * mscale / math.sqrt(192.0)
    cache4 = ckv[:, :, None, :]
    o, lse = attention64(mq, Rows(cache4), Rows(cache4, slice(0, latent)), mtable, mlens, mstarts, mla_bs, mla_scale)
    path = record(f"{out}/mla_vllm.safetensors", query=mq, kv_c_and_k_pe_cache=ckv, kv_lora_rank=latent,
                  block_table=mtable, seq_lens=mlens, query_start_loc=mstarts, output=o, lse=lse, scale=mla_scale,
                  description="issue 23: MLA, vLLM's kv_c_and_k_pe_cache")
    results.append(replay(pagecheck, path, "mla_vllm", 0, out))
    # V read from the rope columns (and the latent's last 448), as a kernel with the wrong V offset would.
    o_bad, lse_bad = attention64(mq, Rows(cache4), Rows(cache4, slice(rope, rope + latent)), mtable, mlens, mstarts,
                                 mla_bs, mla_scale)
    bad = record(f"{out}/mla_vllm_wrong.safetensors", query=mq, kv_c_and_k_pe_cache=ckv, kv_lora_rank=latent,
                 block_table=mtable, seq_lens=mlens, query_start_loc=mstarts, output=o_bad, lse=lse_bad,
                 scale=mla_scale)
    results.append(replay(pagecheck, bad, "mla_vllm_wrong", 1, out))

    # --- MLA: FlashInfer's ckv_cache + kpe_cache, q_nope + q_pe, CSR table.
    pages = [(n + mla_bs - 1) // mla_bs for n in mla_lens]
    rows = mtable.cpu().tolist()
    indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0).tolist()), dtype=torch.int32, device=DEV)
    indices = torch.tensor([p for r, k in zip(rows, pages) for p in r[:k]], dtype=torch.int32, device=DEV)
    last = torch.tensor([n - (k - 1) * mla_bs for n, k in zip(mla_lens, pages)], dtype=torch.int32, device=DEV)
    path = record(f"{out}/mla_flashinfer.safetensors", q_nope=mq[..., :latent], q_pe=mq[..., latent:],
                  ckv_cache=ckv[..., :latent].contiguous(), kpe_cache=ckv[..., latent:].contiguous(), kv_indptr=indptr,
                  kv_indices=indices, kv_last_page_len=last, qo_indptr=mstarts, output=o, lse=lse, scale=mla_scale,
                  description="issue 23: MLA, FlashInfer's ckv_cache + kpe_cache")
    results.append(replay(pagecheck, path, "mla_flashinfer", 0, out))

    r = subprocess.run([pagecheck, "inspect", f"{out}/mla_flashinfer.safetensors"], capture_output=True, text=True)
    print(r.stdout[-2500:])
    failed = results.count(False)
    print(f"record_features_check: {len(results)} checks, {failed} failures (device {DEV})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
