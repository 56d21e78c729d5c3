#!/usr/bin/env python3
"""FlexAttention with a document (block-causal) mask, the baseline of our document-masked
attention kernels (src/ops/cuda/cuda_attention_mask_gpu_test.cpp,
DISABLED_DocumentMaskedAttentionAgainstFlexShapes, times the same shapes and documents).

Documents: lengths 200 + x % 2801 of the LCG x <- (1103515245 x + 12345) mod 2^31 from x = 1,
appended until the sequence is full (the last one cut): the same lengths in both programs.
Per shape: torch.compile'd flex_attention (enable_gqa), bf16, forward alone and forward +
backward, mean of 20 timed runs after 3 warm-ups (compilation happens there).

Usage: python3 bench/flex_attention_documents.py
Prints one JSON line per shape: name, B, T, H, K, D, documents, forward_ms, forward_backward_ms.
"""
import json

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

SHAPES = [  # name, batch, seq, heads, kv heads, head dim
    ("Qwen2.5-1.5B", 2, 4096, 12, 2, 128),
    ("Llama-3.2-1B", 1, 16384, 32, 8, 64),
    ("Gemma-3-1B", 2, 4096, 4, 1, 256),
]


def document_lengths(seq):
    lengths, x, total = [], 1, 0
    while total < seq:
        x = (1103515245 * x + 12345) % (1 << 31)
        length = min(200 + x % 2801, seq - total)
        lengths.append(length)
        total += length
    return lengths


def timed(fn, warmup=3, runs=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(runs):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / runs


def main():
    flex = torch.compile(flex_attention)
    for name, batch, seq, heads, kv_heads, head_dim in SHAPES:
        lengths = document_lengths(seq)
        document = torch.repeat_interleave(
            torch.arange(len(lengths), device="cuda"), torch.tensor(lengths, device="cuda"))

        def document_causal(b, h, q, kv):
            return (document[q] == document[kv]) & (q >= kv)

        mask = create_block_mask(document_causal, B=None, H=None, Q_LEN=seq, KV_LEN=seq)
        make = lambda h: torch.randn(batch, h, seq, head_dim, device="cuda", dtype=torch.bfloat16,
                                     requires_grad=True)
        q, k, v = make(heads), make(kv_heads), make(kv_heads)
        dout = torch.randn_like(q)

        def forward():
            with torch.no_grad():
                return flex(q, k, v, block_mask=mask, enable_gqa=True)

        def forward_backward():
            out = flex(q, k, v, block_mask=mask, enable_gqa=True)
            out.backward(dout)

        print(json.dumps({
            "name": name, "B": batch, "T": seq, "H": heads, "K": kv_heads, "D": head_dim,
            "documents": len(lengths), "forward_ms": round(timed(forward), 4),
            "forward_backward_ms": round(timed(forward_backward), 4)}), flush=True)


if __name__ == "__main__":
    main()
