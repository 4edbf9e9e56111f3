"""Record one paged-attention call of a PyTorch runtime as a pagecheck case file.

One file, no dependency beyond torch and safetensors. Call it where the
runtime calls its attention kernel, with the runtime's own tensors and names:

    from pagecheck_record import record, Recorder

    record("step.safetensors", query=query, kv_cache=kv_cache,          # vLLM [2, blocks, bs, kv_heads, d]
           block_table=attn_metadata.block_table, seq_lens=attn_metadata.seq_lens,
           query_start_loc=attn_metadata.query_start_loc, output=output,
           k_scale=layer._k_scale, v_scale=layer._v_scale, kv_cache_dtype="fp8_e4m3")

    record("step.safetensors", query=q, paged_kv_cache=paged_kv_cache,  # FlashInfer [pages, 2, ps, h, d]
           kv_layout="NHD", kv_indptr=kv_indptr, kv_indices=kv_indices,
           kv_last_page_len=kv_last_page_len, qo_indptr=qo_indptr, output=o, lse=lse, lse_base=2)

    record("step.safetensors", query=query, kv_cache=kv_cache, ...,      # gpt-oss: the layer's sinks
           sinks=self.sinks)

    rec = Recorder("cases/", every=100, only_nonfinite=False)           # every 100th call
    rec(query=..., key_cache=..., value_cache=..., ...)                 # returns the path written, or None

Accepted cache forms (docs/case-format.md has the contract):
  kv_c_and_k_pe_cache      vLLM's latent (MLA) cache [blocks, bs, kv_lora_rank + rope] (with kv_lora_rank=);
                           FlashInfer's ckv_cache + kpe_cache (query as q_nope + q_pe or one query)
  key_cache / value_cache  NHD [blocks, bs, kv_heads, d] or HND [blocks, kv_heads, bs, d] (kv_layout)
  kv_cache                 vLLM [2, blocks, bs, kv_heads, d] (NHD)
  paged_kv_cache           FlashInfer [pages, 2, ps, kv_heads, d] (NHD) or [pages, 2, kv_heads, ps, d] (HND)
  key_cache 5-D            vLLM's classic paged-attention layout: key [blocks, kv_heads, d/x, bs, x] with
                           value [blocks, kv_heads, d, bs]
Tables: vLLM's block_table + seq_lens, or FlashInfer's kv_indptr + kv_indices + kv_last_page_len.
Query lengths: query_start_loc (vLLM) or qo_indptr (FlashInfer); neither means decode.

Only the pages the table references are written (a 40 GB pool does not become
a 40 GB file): they are renumbered in the order first used and the table is
rewritten to match, plus one unreferenced page (NaN) that pagecheck's graph
check uses as a free page. compact=False writes the whole pool as it is.
"""

import math
import os

import torch
from safetensors.torch import save_file

__all__ = ["record", "Recorder"]

_FP8 = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _host(t, dtype=None):
    t = t.detach()
    if dtype is not None:
        t = t.to(dtype)
    return t.cpu().contiguous().clone()


def _scalar(x, name):
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise ValueError(f"{name} must be a single number (a per-tensor scale), got shape {tuple(x.shape)}")
        x = x.item()
    return float(x)


def _caches(key_cache, value_cache, kv_cache, paged_kv_cache, kv_layout, kv_cache_dtype):
    """The caches as (key, value, layout) in pagecheck's 4-D forms."""
    given = [n for n, t in (("key_cache", key_cache), ("kv_cache", kv_cache), ("paged_kv_cache", paged_kv_cache))
             if t is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of key_cache/value_cache, kv_cache, paged_kv_cache; got {given or 'none'}")
    layout = kv_layout.upper()
    if layout not in ("NHD", "HND"):
        raise ValueError(f"kv_layout must be NHD or HND, got {kv_layout!r}")
    if kv_cache is not None:
        if kv_cache.dim() != 5 or kv_cache.shape[0] != 2:
            raise ValueError(f"kv_cache must be vLLM's [2, num_blocks, block_size, kv_heads, head_dim], "
                             f"got {tuple(kv_cache.shape)}")
        key, value, layout = kv_cache[0], kv_cache[1], "NHD"
    elif paged_kv_cache is not None:
        if paged_kv_cache.dim() != 5 or paged_kv_cache.shape[1] != 2:
            raise ValueError(f"paged_kv_cache must be FlashInfer's [num_pages, 2, page_size, kv_heads, head_dim] "
                             f"(NHD) or [num_pages, 2, kv_heads, page_size, head_dim] (HND), "
                             f"got {tuple(paged_kv_cache.shape)}")
        key, value = paged_kv_cache[:, 0], paged_kv_cache[:, 1]
    else:
        if value_cache is None:
            raise ValueError("key_cache needs value_cache")
        key, value = key_cache, value_cache
        if key.dim() == 5:  # vLLM classic: key [blocks, h, d/x, bs, x], value [blocks, h, d, bs]
            if value.dim() != 4:
                raise ValueError(f"a 5-D key_cache (vLLM's [blocks, kv_heads, head_dim/x, block_size, x]) needs "
                                 f"value_cache [blocks, kv_heads, head_dim, block_size], got {tuple(value.shape)}")
            blocks, heads, dx, bs, x = key.shape
            key = key.permute(0, 3, 1, 2, 4).reshape(blocks, bs, heads, dx * x)
            value = value.permute(0, 3, 1, 2)
            layout = "NHD"
        elif key.dim() != 4 or value.dim() != 4:
            raise ValueError(f"key_cache and value_cache must be 4-D, got {tuple(key.shape)} and {tuple(value.shape)}")
    if kv_cache_dtype is not None:
        if kv_cache_dtype not in _FP8:
            raise ValueError(f"kv_cache_dtype must be one of {sorted(_FP8)}, got {kv_cache_dtype!r}")
        if key.dtype == torch.uint8:  # vLLM keeps fp8 caches as uint8
            key, value = key.view(_FP8[kv_cache_dtype]), value.view(_FP8[kv_cache_dtype])
    return key, value, layout


def _latent(kv_c_and_k_pe_cache, kv_lora_rank, ckv_cache, kpe_cache, kv_cache_dtype):
    """A latent (MLA) cache as (cache [blocks, bs, 1, D], kv_lora_rank), or None when none is given."""
    if kv_c_and_k_pe_cache is None and ckv_cache is None and kpe_cache is None:
        return None
    if kv_c_and_k_pe_cache is not None:
        if ckv_cache is not None or kpe_cache is not None:
            raise ValueError("give kv_c_and_k_pe_cache (vLLM) or ckv_cache + kpe_cache (FlashInfer), not both")
        cache = kv_c_and_k_pe_cache
        if cache.dim() == 3:
            cache = cache.unsqueeze(2)
        if cache.dim() != 4 or cache.shape[2] != 1:
            raise ValueError(f"kv_c_and_k_pe_cache must be vLLM's [num_blocks, block_size, head_dim] or FlashMLA's "
                             f"[num_blocks, block_size, 1, head_dim], got {tuple(kv_c_and_k_pe_cache.shape)}")
        if kv_lora_rank is None:
            raise ValueError("kv_c_and_k_pe_cache needs kv_lora_rank (the latent's width, V's head dim: 512 for "
                             "DeepSeek-V3)")
        rank = int(kv_lora_rank)
    else:
        if ckv_cache is None or kpe_cache is None:
            raise ValueError("FlashInfer's MLA cache is ckv_cache [pages, page_size, kv_lora_rank] + kpe_cache "
                             "[pages, page_size, rope_dim]: give both")
        if ckv_cache.dim() != 3 or kpe_cache.dim() != 3 or ckv_cache.shape[:2] != kpe_cache.shape[:2]:
            raise ValueError(f"ckv_cache {tuple(ckv_cache.shape)} and kpe_cache {tuple(kpe_cache.shape)} must be "
                             f"[pages, page_size, *] with the same pages and page_size")
        cache = torch.cat([ckv_cache, kpe_cache], dim=-1).unsqueeze(2)
        rank = ckv_cache.shape[2]
        if kv_lora_rank is not None and int(kv_lora_rank) != rank:
            raise ValueError(f"kv_lora_rank {kv_lora_rank} but ckv_cache holds {rank} latent columns")
    if kv_cache_dtype is not None and cache.dtype == torch.uint8:
        cache = cache.view(_FP8[kv_cache_dtype])
    return cache, rank


def _pages_per_seq(block_size, block_table, seq_lens, kv_indptr, kv_indices, kv_last_page_len):
    """Each sequence's pages (python ints) and lengths."""
    if block_table is not None:
        if kv_indptr is not None or kv_indices is not None:
            raise ValueError("give block_table + seq_lens (vLLM) or kv_indptr + kv_indices + kv_last_page_len "
                             "(FlashInfer), not both")
        if seq_lens is None:
            raise ValueError("block_table needs seq_lens")
        table = _host(block_table, torch.int64).tolist()
        lens = _host(seq_lens, torch.int64).tolist()
        if len(table) != len(lens):
            raise ValueError(f"block_table has {len(table)} rows but seq_lens {len(lens)} entries")
        pages = [row[: (n + block_size - 1) // block_size] for row, n in zip(table, lens)]
        return pages, lens, "dense"
    if kv_indptr is None or kv_indices is None or kv_last_page_len is None:
        raise ValueError("give block_table + seq_lens, or kv_indptr + kv_indices + kv_last_page_len")
    indptr = _host(kv_indptr, torch.int64).tolist()
    indices = _host(kv_indices, torch.int64).tolist()
    last = _host(kv_last_page_len, torch.int64).tolist()
    pages = [indices[indptr[s]: indptr[s + 1]] for s in range(len(indptr) - 1)]
    lens = [(len(p) - 1) * block_size + last[s] for s, p in enumerate(pages)]
    return pages, lens, "csr"


def _nan_fill(t):
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t.view(torch.uint8).fill_(0x7F)  # NaN in both fp8 formats
    else:
        t.fill_(float("nan"))


def record(path, *, query=None, key_cache=None, value_cache=None, kv_cache=None, paged_kv_cache=None,
           kv_layout="NHD", block_table=None, seq_lens=None, kv_indptr=None, kv_indices=None,
           kv_last_page_len=None, query_start_loc=None, qo_indptr=None, output=None, lse=None, lse_base=math.e,
           causal=True, scale=None, sliding_window=0, softcap=0.0, k_scale=1.0, v_scale=1.0,
           kv_cache_dtype=None, description="", compact=True, sinks=None, alibi_slopes=None,
           kv_c_and_k_pe_cache=None, kv_lora_rank=None, ckv_cache=None, kpe_cache=None, q_nope=None, q_pe=None):
    """Writes one case file; returns its path. Tensors may live on any device.

    sinks: vLLM's and FlashInfer's attention-sink tensor (gpt-oss), one logit
    per query head [q_heads], any float dtype (written as float32).
    alibi_slopes: vLLM's and FlashInfer's ALiBi slopes [q_heads] (float32).

    Latent (MLA) caches: vLLM's kv_c_and_k_pe_cache [blocks, block_size,
    kv_lora_rank + rope_dim] (or FlashMLA's [.., 1, ..]) with kv_lora_rank, or
    FlashInfer's ckv_cache + kpe_cache; the query as query [tokens, heads,
    kv_lora_rank + rope_dim] or FlashInfer's q_nope + q_pe. scale is required
    (MLA's is never 1/sqrt of the row width). Written as kv_c_and_k_pe_cache."""
    if q_nope is not None or q_pe is not None:
        if query is not None or q_nope is None or q_pe is None:
            raise ValueError("give query, or FlashInfer's MLA q_nope + q_pe (both)")
        query = torch.cat([q_nope, q_pe], dim=-1)
    latent = _latent(kv_c_and_k_pe_cache, kv_lora_rank, ckv_cache, kpe_cache, kv_cache_dtype)
    if latent is not None:
        if key_cache is not None or kv_cache is not None or paged_kv_cache is not None:
            raise ValueError("give one cache: a latent (MLA) cache or key/value caches, not both")
        if scale is None:
            raise ValueError("a latent (MLA) case needs scale= (DeepSeek-V3: 1/sqrt(192) times YaRN's mscale^2)")
        key, latent_rank = latent
        value, layout = None, "NHD"
    else:
        latent_rank = None
        key, value, layout = _caches(key_cache, value_cache, kv_cache, paged_kv_cache, kv_layout, kv_cache_dtype)
    block_axis = 1 if layout == "NHD" else 2
    block_size = key.shape[block_axis]
    if query is None:
        raise ValueError("query is required (or FlashInfer's MLA q_nope + q_pe)")
    if query.dim() != 3:
        raise ValueError(f"query must be [num_tokens, q_heads, head_dim], got {tuple(query.shape)}")
    pages, lens, form = _pages_per_seq(block_size, block_table, seq_lens, kv_indptr, kv_indices, kv_last_page_len)
    starts = query_start_loc if query_start_loc is not None else qo_indptr
    if query_start_loc is not None and qo_indptr is not None:
        raise ValueError("give query_start_loc or qo_indptr, not both")

    if compact:
        order = {}
        for row in pages:
            for p in row:
                if p < 0 or p >= key.shape[0]:
                    raise ValueError(f"the table references page {p} but the cache has {key.shape[0]} pages")
                order.setdefault(p, len(order))
        used = torch.tensor(list(order), dtype=torch.int64, device=key.device)
        spare = 1  # an unreferenced page for the graph check's page move
        key_out = torch.empty((len(order) + spare,) + tuple(key.shape[1:]), dtype=key.dtype)
        key_out[: len(order)] = _host(key.index_select(0, used))
        _nan_fill(key_out[len(order):])
        if value is not None:
            value_out = torch.empty((len(order) + spare,) + tuple(value.shape[1:]), dtype=value.dtype)
            value_out[: len(order)] = _host(value.index_select(0, used))
            _nan_fill(value_out[len(order):])
        pages = [[order[p] for p in row] for row in pages]
    else:
        key_out = _host(key)
        value_out = _host(value) if value is not None else None

    if latent_rank is not None:  # vLLM's form: [blocks, block_size, head_dim]
        tensors = {"query": _host(query), "kv_c_and_k_pe_cache": key_out[:, :, 0, :].contiguous()}
    else:
        tensors = {"query": _host(query), "key_cache": key_out.contiguous(), "value_cache": value_out.contiguous()}
    if form == "dense":
        width = max(1, max(len(row) for row in pages))
        tensors["block_table"] = torch.tensor([row + [0] * (width - len(row)) for row in pages], dtype=torch.int32)
        tensors["seq_lens"] = torch.tensor(lens, dtype=torch.int32)
    else:
        indptr = [0]
        for row in pages:
            indptr.append(indptr[-1] + len(row))
        tensors["kv_indptr"] = torch.tensor(indptr, dtype=torch.int32)
        tensors["kv_indices"] = torch.tensor([p for row in pages for p in row], dtype=torch.int32)
        tensors["kv_last_page_len"] = torch.tensor([n - (len(row) - 1) * block_size for row, n in zip(pages, lens)],
                                                   dtype=torch.int32)
    if starts is not None:
        tensors["query_start_loc"] = _host(starts, torch.int32)
    if sinks is not None:
        if sinks.dim() != 1 or sinks.shape[0] != query.shape[1]:
            raise ValueError(f"sinks must be [q_heads] = [{query.shape[1]}] (one logit per query head), "
                             f"got {tuple(sinks.shape)}")
        tensors["sinks"] = _host(sinks, torch.float32)
    if alibi_slopes is not None:
        if alibi_slopes.dim() != 1 or alibi_slopes.shape[0] != query.shape[1]:
            raise ValueError(f"alibi_slopes must be [q_heads] = [{query.shape[1]}] (one slope per query head), "
                             f"got {tuple(alibi_slopes.shape)}")
        tensors["alibi_slopes"] = _host(alibi_slopes, torch.float32)
    if output is not None:
        tensors["output"] = _host(output)
    if lse is not None:
        natural = _host(lse, torch.float32)
        if lse_base == 2:
            natural = natural * math.log(2.0)
        elif lse_base != math.e:
            raise ValueError(f"lse_base must be math.e or 2, got {lse_base!r}")
        tensors["lse"] = natural.contiguous()

    metadata = {"kv_layout": layout, "causal": "true" if causal else "false", "block_size": str(block_size),
                "sliding_window": str(int(sliding_window or 0)), "softcap": repr(float(softcap or 0.0)),
                "k_scale": repr(_scalar(k_scale, "k_scale")), "v_scale": repr(_scalar(v_scale, "v_scale")),
                "description": description, "recorder": "pagecheck_record.py"}
    if scale is not None:
        metadata["scale"] = repr(_scalar(scale, "scale"))
    if latent_rank is not None:
        metadata["kv_lora_rank"] = str(latent_rank)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    save_file(tensors, path, metadata=metadata)
    return path


class Recorder:
    """Records every `every`-th call (the first included), or only calls whose
    output holds NaN or Inf, into `directory`/`prefix`-NNNNNN.safetensors.
    `max_files` caps how many files it writes."""

    def __init__(self, directory, every=1, only_nonfinite=False, prefix="step", max_files=None):
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        self.directory, self.every, self.only_nonfinite = directory, every, only_nonfinite
        self.prefix, self.max_files = prefix, max_files
        self.calls = 0
        self.written = []

    def __call__(self, **kwargs):
        index = self.calls
        self.calls += 1
        if self.max_files is not None and len(self.written) >= self.max_files:
            return None
        if self.only_nonfinite:
            out = kwargs.get("output")
            if out is None:
                raise ValueError("only_nonfinite needs output=")
            if bool(torch.isfinite(out).all()):
                return None
        elif index % self.every != 0:
            return None
        path = os.path.join(self.directory, f"{self.prefix}-{index:06d}.safetensors")
        kwargs.setdefault("description", f"call {index}")
        self.written.append(record(path, **kwargs))
        return path
