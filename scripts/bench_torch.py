#!/usr/bin/env python3
"""PyTorch SDPA on the benchmark shapes of issues 3 and 4, for a side-by-side
comparison with `pagecheck bench` in the same run (docs/performance.md).

Backends: FlashAttention-2 (SDPBackend.FLASH_ATTENTION) and cuDNN
(SDPBackend.CUDNN_ATTENTION) over contiguous (unpaged) K/V, and "gather":
PyTorch indexing a paged cache (block 16, shuffled pages) into contiguous K/V,
then SDPA (FlashAttention-2), timed together.

All shapes: 32 query heads, 8 KV heads, head dim 128, BF16. Timing: CUDA
events, 3 warm-ups, 20 repeats, median, L2 flushed (a 2x-L2 buffer written)
before each repeat. Model: bytes = K/V over the real lengths + Q + O;
FLOPs = 2 * visible (query, key) pairs * (128 + 128) per query head.

Usage: python3 scripts/bench_torch.py [--shapes decode|prefill|all] [--repeats N]
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16
DTYPE = torch.bfloat16

# (name, batch, new query tokens, context) -- decode has 1 query token.
DECODE = [("64x4096", 64, 1, 4096), ("256x1024", 256, 1, 1024), ("8x8192", 8, 1, 8192), ("1x32768", 1, 1, 32768)]
PREFILL = [("8x2048", 8, 2048, 2048), ("1x8192", 1, 8192, 8192), ("16x512", 16, 512, 512),
           ("chunk4x512/4096", 4, 512, 4608)]


def flush_buffer():
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(2 * l2, dtype=torch.uint8, device="cuda")


def time_ms(fn, flush, warmup, repeats):
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(repeats):
        flush.fill_(i & 0xFF)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def model(batch, q_len, context):
    kv_bytes = batch * context * KV_HEADS * 2 * HEAD_DIM * 2
    qo_bytes = 2 * batch * q_len * Q_HEADS * HEAD_DIM * 2
    # Causal, bottom-right aligned: query i of q_len sees context - q_len + i + 1 keys.
    pairs = batch * sum(context - q_len + i + 1 for i in range(q_len))
    flops = 2.0 * pairs * (HEAD_DIM + HEAD_DIM) * Q_HEADS
    return kv_bytes + qo_bytes, flops


def sdpa_call(q, k, v, q_len, context):
    # q [B, 32, q_len, 128], k/v [B, 8, context, 128]
    if q_len == 1:
        return lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    if q_len == context:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    from torch.nn.attention.bias import causal_lower_right
    mask = causal_lower_right(q_len, context)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def run_shape(name, batch, q_len, context, flush, args):
    torch.manual_seed(0)
    q = torch.randn(batch, Q_HEADS, q_len, HEAD_DIM, device="cuda", dtype=DTYPE)
    k = torch.randn(batch, KV_HEADS, context, HEAD_DIM, device="cuda", dtype=DTYPE)
    v = torch.randn(batch, KV_HEADS, context, HEAD_DIM, device="cuda", dtype=DTYPE)
    nbytes, flops = model(batch, q_len, context)
    rows = []
    for label, backend in (("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            fn = sdpa_call(q, k, v, q_len, context)

            def call(fn=fn, backend=backend):
                with sdpa_kernel([backend]):
                    return fn()

            ms = time_ms(call, flush, args.warmup, args.repeats)
            rows.append((label, ms))
        except Exception as e:  # a backend that does not take the shape
            rows.append((label, f"n/a ({type(e).__name__}: {str(e).splitlines()[0][:80]})"))

    # Paged: a pool of shuffled pages, the table, gather then SDPA (flash).
    pages_per_seq = (context + BLOCK - 1) // BLOCK
    num_blocks = batch * pages_per_seq
    kc = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=DTYPE)
    vc = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=DTYPE)
    table = torch.randperm(num_blocks, device="cuda").view(batch, pages_per_seq)

    def gather_sdpa():
        kg = kc[table].view(batch, pages_per_seq * BLOCK, KV_HEADS, HEAD_DIM)[:, :context].transpose(1, 2)
        vg = vc[table].view(batch, pages_per_seq * BLOCK, KV_HEADS, HEAD_DIM)[:, :context].transpose(1, 2)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return sdpa_call(q, kg, vg, q_len, context)()

    try:
        rows.append(("gather+flash2", time_ms(gather_sdpa, flush, args.warmup, args.repeats)))
    except Exception as e:
        rows.append(("gather+flash2", f"n/a ({type(e).__name__}: {str(e).splitlines()[0][:80]})"))
    del kc, vc, q, k, v
    torch.cuda.empty_cache()
    for label, ms in rows:
        if isinstance(ms, str):
            print(f"{name:>16} {label:>14} {ms}")
        else:
            print(f"{name:>16} {label:>14} {ms:9.4f} ms {nbytes / ms / 1e9:7.3f} TB/s {flops / ms / 1e9:8.1f} TFLOP/s")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", choices=["decode", "prefill", "all"], default="all")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    print("command:", " ".join(["python3"] + sys.argv))
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}")
    print(f"{'shape':>16} {'backend':>14} {'median':>12} {'K/V+Q+O bandwidth':>12} {'rate':>16}")
    flush = flush_buffer()
    shapes = (DECODE if args.shapes in ("decode", "all") else []) + (PREFILL if args.shapes in ("prefill", "all") else [])
    for name, batch, q_len, context in shapes:
        run_shape(name, batch, q_len, context, flush, args)


if __name__ == "__main__":
    main()
