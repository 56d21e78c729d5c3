#!/usr/bin/env python3
"""FlexAttention reference files for our masked attention kernels
(src/ops/cuda/cuda_attention_flex_gpu_test.cpp and src/ops/cpu/cpu_attention_flex_test.cpp read
them from $SHARDTRAIN_TEST_FLEX_DIR).

For each case below (GQA; head dims 64, 128, 256; T up to 4096; packed documents of varied
lengths with one-token documents; a sliding window; both) it draws deterministic bf16 q, k, v
and dout, runs torch.compile'd flex_attention (enable_gqa, return of the log-sum-exp) forward
and backward under the block mask of our AttentionMask (ops/attention_mask.h):
    causal AND same document AND (where the case has one) key > query - window,
and writes OUT_DIR/<case>.safetensors, every tensor in OUR layout (flex_attention's is BHTD):
    q (B,T,H,D), k, v (B,T,K,D), dout (B,T,H,D)            BF16, the inputs
    document_start (B,T)                                    I32, the position where each
                                                            token's document begins (our mask)
    flex_out, flex_dq (B,T,H,D), flex_dk, flex_dv (B,T,K,D) BF16, FlexAttention's results
    flex_lse (B,H,T)                                        F32, natural log (ours: ln, as
                                                            the CPU reference's std::log)
    exact_out, exact_lse, exact_dq, exact_dk, exact_dv      F32, dense float64 attention of the
                                                            same bf16 inputs, the common truth
and in __metadata__: B, T, H, K, D, window, scale, documents (JSON lists of lengths),
reference (what produced flex_*), torch, flex_forward_ms and flex_forward_backward_ms (CUDA
events, mean of 10 runs after 3 warm-ups, the forward with grad enabled, the lse returned;
the GPU test prints ours beside them).
The script checks FlexAttention against the dense result before writing (so a wrong mask or
lse unit fails here, not as a kernel bug) and prints one line per case.

--stand-in (no flex_attention, e.g. an old CPU-only torch): flex_* are the dense result rounded
to bf16 and `reference` says so. Only for checking the files and the C++ readers; never a
comparison with FlexAttention.

Usage: python3 tools/device/flex_attention_reference.py OUT_DIR [--cases a,b] [--stand-in]
       [--device cuda|cpu] [--jobs N]   (N processes share the cases; default 3)
Exit status 2 with one line for a bad argument.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch

# name, B, T, H (query heads), K (kv heads), D, window (0: none), documents per sequence
# (lengths summing to T; [] = one document).


def lcg_lengths(seq, ones=0):
    """`ones` one-token documents, then lengths 200 + x % 2801 of the LCG
    x <- (1103515245 x + 12345) mod 2^31 from x = 1 (bench/flex_attention_documents.py's), the
    last one cut to fill the sequence."""
    lengths, x, total = [1] * ones, 1, ones
    while total < seq:
        x = (1103515245 * x + 12345) % (1 << 31)
        length = min(200 + x % 2801, seq - total)
        lengths.append(length)
        total += length
    return lengths


CASES = [
    # Llama-3.2-1B's 32 / 8 heads at D = 64: one-token documents mid-sequence beside a sequence
    # of one document.
    ("documents_gqa4_d64", 2, 2048, 32, 8, 64, 0,
     [[1, 17, 200, 1, 1, 1, 300, 1527], []]),
    # Qwen2.5-1.5B's 12 / 2 heads at D = 128, seq 4096: the benchmark's documents, and documents
    # crossing 64- and 128-row tiles at odd places.
    ("documents_gqa6_d128_t4096", 2, 4096, 12, 2, 128, 0,
     [lcg_lengths(4096), [64, 63, 1, 130, 2960, 878]]),
    # Mistral's 32 / 8 heads at D = 128: a sliding window shorter than the sequence.
    ("window1024_gqa4_d128_t4096", 1, 4096, 32, 8, 128, 1024, [[]]),
    # Gemma 3 1B's 4 / 1 heads at D = 256 (its 512-token local window) inside documents longer
    # and shorter than the window.
    ("window512_documents_gqa4_d256", 2, 2048, 4, 1, 256, 512, [[1, 700, 17, 1330], []]),
    # A window that is no tile multiple, documents shorter and longer than it, GQA 2.
    ("window100_documents_gqa2_d64", 2, 1024, 8, 4, 64, 100, [[300, 1, 77, 646], [17, 1007]]),
    # D = 256, seq 4096, a run of 64 one-token documents, then the benchmark's lengths.
    ("documents_gqa8_d256_t4096", 1, 4096, 8, 1, 256, 0, [lcg_lengths(4096, ones=64)]),
]

LN2 = math.log(2)


def fail(message):
    print(f"flex_attention_reference: {message}", file=sys.stderr)
    sys.exit(2)


def document_starts(lengths_per_sequence, batch, seq):
    """(B, T) int32: where each token's document begins; also the document index (B, T)."""
    starts = torch.zeros(batch, seq, dtype=torch.int32)
    index = torch.zeros(batch, seq, dtype=torch.int32)
    for b in range(batch):
        lengths = lengths_per_sequence[b] if b < len(lengths_per_sequence) else []
        lengths = lengths or [seq]
        if sum(lengths) != seq or min(lengths) < 1:
            raise ValueError(f"documents {lengths} do not fill a sequence of {seq}")
        position = 0
        for d, length in enumerate(lengths):
            starts[b, position:position + length] = position
            index[b, position:position + length] = d
            position += length
    return starts, index


def allowed(starts_T, window, seq, device):
    """(T, T) bool: key j visible from query i under our mask."""
    i = torch.arange(seq, device=device)[:, None]
    j = torch.arange(seq, device=device)[None, :]
    keep = (j <= i) & (j >= starts_T.to(device).long()[:, None])
    if window > 0:
        keep &= j > i - window
    return keep


def dense(q, k, v, dout, starts, window, scale):
    """Exact attention in float64 from the bf16 inputs (B,H,T,D / B,K,T,D): out, lse (natural
    log), dq, dk, dv. One batch element and at most 8 query heads at a time (the T x T scores)."""
    B, H, T, D = q.shape
    K = k.shape[1]
    group = H // K
    q64 = q.double().detach().requires_grad_(True)
    k64 = k.double().detach().requires_grad_(True)
    v64 = v.double().detach().requires_grad_(True)
    out = torch.empty(B, H, T, D, dtype=torch.float64, device=q.device)
    lse = torch.empty(B, H, T, dtype=torch.float64, device=q.device)
    for b in range(B):
        keep = allowed(starts[b], window, T, q.device)
        for h0 in range(0, H, 8):
            heads = torch.arange(h0, min(H, h0 + 8), device=q.device)
            qh = q64[b, heads]
            kh = k64[b, heads // group]
            vh = v64[b, heads // group]
            scores = (qh @ kh.transpose(-1, -2)) * scale
            scores = scores.masked_fill(~keep, float("-inf"))
            row_lse = torch.logsumexp(scores, dim=-1)
            probs = torch.exp(scores - row_lse[..., None])
            o = probs @ vh
            (o * dout[b, heads].double()).sum().backward()
            out[b, heads] = o.detach()
            lse[b, heads] = row_lse.detach()
    return out, lse, q64.grad, k64.grad, v64.grad


def flex_runner(batch, seq, index, window, device):
    """The block mask (causal & same document & window) and the ways to call flex_attention
    under it, in order of preference: (description, attend(q, k, v, scale) -> (out, lse in
    natural log)). Newer PyTorch returns the lse through return_aux=AuxRequest(lse=True)
    (return_lse deprecated), older through return_lse; run_case keeps the first that works."""
    import inspect
    from torch.nn.attention import flex_attention as fa
    document = index.to(device)

    def mask_mod(b, h, q_idx, kv_idx):
        keep = (q_idx >= kv_idx) & (document[b, q_idx] == document[b, kv_idx])
        if window > 0:
            keep = keep & (q_idx - kv_idx < window)
        return keep

    block_mask = fa.create_block_mask(mask_mod, B=batch, H=None, Q_LEN=seq, KV_LEN=seq,
                                      device=device)
    compiled = torch.compile(fa.flex_attention, dynamic=False)
    parameters = inspect.signature(fa.flex_attention).parameters
    calls = []
    # Compiled first (the fused kernels, what users run); the eager, unfused implementation only
    # when compiling fails, and `reference` then says so.
    for mode, flex in (("torch.compile", compiled), ("eager", fa.flex_attention)):
        if "return_aux" in parameters:
            request = fa.AuxRequest(lse=True)

            def with_aux(q, k, v, scale, flex=flex, request=request):
                out, aux = flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True,
                                return_aux=request)
                return out, aux.lse
            calls.append((f"{mode}, return_aux=AuxRequest(lse=True)", with_aux))
        if "return_lse" in parameters:
            def with_lse(q, k, v, scale, flex=flex):
                return flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True,
                            return_lse=True)
            calls.append((f"{mode}, return_lse=True", with_lse))
    return block_mask, calls


def cuda_ms(fn, warmup=3, runs=10):
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


def rel_l2(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return "BF16", t.view(torch.int16).numpy().tobytes()
    if t.dtype == torch.float32:
        return "F32", t.numpy().tobytes()
    if t.dtype == torch.int32:
        return "I32", t.numpy().tobytes()
    raise ValueError(f"no safetensors dtype for {t.dtype}")


def write_safetensors(path, tensors, metadata):
    """The safetensors format (what io/safetensors.h reads), written here so that no package
    beyond torch is needed."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        dtype, blob = tensor_bytes(t)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {key: str(value) for key, value in metadata.items()}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    partial = path + ".partial"
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for blob in blobs:
            f.write(blob)
    os.replace(partial, path)


def run_case(case, out_dir, device, stand_in):
    name, B, T, H, K, D, window, documents = case
    scale = 1.0 / math.sqrt(D)
    starts, index = document_starts(documents, B, T)
    generator = torch.Generator().manual_seed(sum(map(ord, name)))
    draw = lambda heads: torch.randn(B, heads, T, D, generator=generator).to(torch.bfloat16)
    q, k, v, dout = draw(H), draw(K), draw(K), draw(H)
    q, k, v, dout = (t.to(device) for t in (q, k, v, dout))

    started = time.time()
    exact = dense(q, k, v, dout, starts, window, scale)
    timings = {}
    if stand_in:
        reference = "dense float64 rounded to bf16 (--stand-in: NOT FlexAttention)"
        flex = [exact[0].to(torch.bfloat16), exact[1].float()] + \
               [g.to(torch.bfloat16) for g in exact[2:]]
    else:
        block_mask, calls = flex_runner(B, T, index, window, device)
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        problems = []
        for how, attend in calls:
            try:
                out, lse = attend(qg, kg, vg, scale)
                out.backward(dout)
                break
            except Exception as e:  # the next way of asking for the lse, else give up
                problems.append(f"{how}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                qg.grad = kg.grad = vg.grad = None
        else:
            raise RuntimeError(f"{name}: flex_attention failed: {problems}")
        # Copies: the timed runs below accumulate into the .grad tensors.
        flex = [t.detach().clone() for t in (out, lse.float(), qg.grad, kg.grad, vg.grad)]
        # Units: ours are natural logs. A log2 lse (flex_attention's kernels work in base 2)
        # would be off by the factor ln 2 everywhere: refuse it rather than guess.
        if rel_l2(flex[1], exact[1]) > 1e-2:
            raise RuntimeError(f"{name}: flex_attention's lse is {rel_l2(flex[1], exact[1]):.3g} "
                               f"from the dense natural-log lse (x ln2: "
                               f"{rel_l2(flex[1] * LN2, exact[1]):.3g})")
        reference = (f"flex_attention ({how}, enable_gqa, block mask "
                     f"{tuple(block_mask.BLOCK_SIZE)}), torch {torch.__version__}")
        if problems:
            print(f"{name}: {'; '.join(problems)}", flush=True)
        if device == "cuda":
            # The forward timed with the same (grad-enabled) compiled graph: no second compile.
            def forward():
                attend(qg, kg, vg, scale)

            def forward_backward():
                o, _ = attend(qg, kg, vg, scale)
                o.backward(dout)

            timings = {"flex_forward_ms": round(cuda_ms(forward), 4),
                       "flex_forward_backward_ms": round(cuda_ms(forward_backward), 4)}
    errors = {n: rel_l2(f, e) for n, f, e in zip(("out", "lse", "dq", "dk", "dv"), flex, exact)}
    if max(errors.values()) > 0.1:  # a mask that differs from ours, not rounding
        raise RuntimeError(f"{name}: {reference} is far from dense attention: {errors}")

    bthd = lambda t: t.transpose(1, 2).contiguous()  # (B, heads, T, D) -> (B, T, heads, D)
    tensors = {"q": bthd(q), "k": bthd(k), "v": bthd(v), "dout": bthd(dout),
               "document_start": starts}
    for prefix, values, dtype in (("flex", flex, torch.bfloat16), ("exact", exact, torch.float32)):
        out_, lse_, dq_, dk_, dv_ = values
        tensors[f"{prefix}_out"] = bthd(out_).to(dtype)
        tensors[f"{prefix}_lse"] = lse_.float().contiguous()
        for grad_name, grad in (("dq", dq_), ("dk", dk_), ("dv", dv_)):
            tensors[f"{prefix}_{grad_name}"] = bthd(grad).to(dtype)
    metadata = {"B": B, "T": T, "H": H, "K": K, "D": D, "window": window, "scale": repr(scale),
                "documents": json.dumps([d or [T] for d in documents[:B]] +
                                        [[T]] * (B - len(documents))),
                "reference": reference, "torch": torch.__version__, **timings}
    path = os.path.join(out_dir, f"{name}.safetensors")
    write_safetensors(path, tensors, metadata)
    print(json.dumps({"case": name, "B": B, "T": T, "H": H, "K": K, "D": D, "window": window,
                      "documents": [len(d) if d else 1 for d in documents[:B]],
                      "flex_vs_exact_rel_l2": {n: float(f"{e:.3g}") for n, e in errors.items()},
                      **timings, "seconds": round(time.time() - started, 1)}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--stand-in", action="store_true",
                        help="no flex_attention: dense results stand in (file checks only)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--jobs", type=int, default=3,
                        help="cases run by this many processes at once (compiling is the slow "
                             "part, and CPU-bound)")
    args = parser.parse_args()
    names = [c[0] for c in CASES]
    chosen = [n for n in args.cases.split(",") if n] or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        fail(f"--cases: no case {unknown[0]!r}; the cases are {', '.join(names)}")
    if args.device not in ("cuda", "cpu"):
        fail(f"--device {args.device!r}: use cuda or cpu")
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: this PyTorch sees no GPU; run on the GPU machine or pass --device cpu")
    if not args.stand_in:
        try:
            from torch.nn.attention import flex_attention  # noqa: F401
        except ImportError:
            fail(f"torch {torch.__version__} has no torch.nn.attention.flex_attention; run on the "
                 "GPU machine's PyTorch (or --stand-in to check only the files)")
    if args.jobs < 1:
        fail(f"--jobs {args.jobs}: use 1 or more")
    os.makedirs(args.out_dir, exist_ok=True)
    if args.jobs > 1 and len(chosen) > 1:
        # Each process compiles its own cases; every case's line is printed by its process.
        import subprocess
        groups = [chosen[i::args.jobs] for i in range(min(args.jobs, len(chosen)))]
        processes = [subprocess.Popen([sys.executable, os.path.abspath(__file__), args.out_dir,
                                       "--cases", ",".join(g), "--device", args.device,
                                       "--jobs", "1"] + (["--stand-in"] if args.stand_in else []))
                     for g in groups]
        failed = [g for g, p in zip(groups, processes) if p.wait() != 0]
        if failed:
            fail(f"the cases {failed} failed (their process said why above)")
        return
    # Every case compiles flex_attention anew (its shape and mask): no recompile limit.
    if not args.stand_in:
        import importlib
        dynamo_config = importlib.import_module("torch._dynamo.config")
        for limit in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo_config, limit):
                setattr(dynamo_config, limit, 1024)
    torch.backends.cuda.matmul.allow_tf32 = False  # the dense reference stays exact
    for case in CASES:
        if case[0] in chosen:
            run_case(case, args.out_dir, args.device, args.stand_in)

if __name__ == "__main__":
    main()
