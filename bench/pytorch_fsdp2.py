#!/usr/bin/env python3
"""PyTorch FSDP2 baseline for bench/run_bench.sh and bench/run_scaling.sh (one process per GPU;
world size from torchrun, or 1). transformers model from a config, fully_shard per decoder layer,
MixedPrecisionPolicy (bf16 params, fp32 reduce), fused AdamW, SDPA attention, random tokens.
--strategy shard_grad_op keeps the gathered parameters from forward to backward
(fully_shard(..., reshard_after_forward=False): FSDP2's SHARD_GRAD_OP / ZeRO-2); full_shard
(default) frees them after forward and gathers again in backward. --compile: each decoder layer
torch.compile'd after fully_shard (per-layer compilation, as torchtitan does), use_cache=False,
SDPA restricted to the flash and cuDNN kernels, fused AdamW (always); compilation happens in the
untimed warm-up steps. --lora R: PEFT LoRA (get_peft_model, rank R, alpha 2R, dropout 0, all
seven projections) on a bf16 model, the base frozen; fused AdamW over the adapters only; on one
GPU the model is not wrapped (PEFT as users run it), on several each layer is fully_shard'ed.
--grad-accum N: N micro-batches per optimizer step (the loss
of each divided by N, gradient sync on the last). --max-grad-norm X (default 1.0, as shardtrain's
train.max_grad_norm, HF Trainer's and torchtitan's defaults): the global gradient norm clipped to
X before each optimizer step (torch.nn.utils.clip_grad_norm_, foreach; FSDP2's DTensor gradients
are clipped by the global norm), 0: no clipping, as shardtrain with train.max_grad_norm = 0. --documents TOKEN_FILE (requires --compile): packed documents as torchtitan trains them, instead
of random tokens: the windows of a version 3 token file (the one shardtrain reads with
data.packing = documents), per-document position ids, each document's first token no target,
attn_implementation = flex_attention with a compiled block-causal document mask per step
(bench/flex_documents.py). torch is imported inside main, so --help needs no torch.

Usage: [torchrun --standalone --nproc-per-node N] python3 bench/pytorch_fsdp2.py CONFIG_JSON
       SEQ_LEN MICRO_BATCH STEPS [--checkpointing] [--strategy full_shard|shard_grad_op]
       [--compile] [--lora R] [--grad-accum N] [--documents TOKEN_FILE] [--max-grad-norm X]
Rank 0 prints one JSON line: tokens_per_s (per GPU, timed steps only), peak_gib (allocated),
peak_reserved_gib, step_ms, graphs_compiled_while_timed (torch.compile graphs built after the
warm-up: 0 unless something recompiled inside the timed steps).
"""
import argparse
import contextlib
import json
import os
import time


def run_steps(model, optimizer, next_batch, warmup, steps, grad_accum, max_grad_norm):
    """warmup + steps training steps of grad_accum micro-batches each on next_batch()'s model
    arguments (FSDP2's gradient sync only on the last one, as users accumulate), the gradients
    clipped to max_grad_norm (0: not clipped) before each optimizer step; the timer starts
    (run_steps.start) after the warm-up."""
    import torch
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for step in range(warmup + steps):
        if step == warmup:
            torch.cuda.synchronize()
            run_steps.start = time.perf_counter()
            run_steps.graphs_at_start = compiled_graphs()
        for micro in range(grad_accum):
            if hasattr(model, "set_requires_gradient_sync"):
                model.set_requires_gradient_sync(micro == grad_accum - 1)
            loss = model(**next_batch()).loss / grad_accum
            loss.backward()
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    run_steps.loss = loss.item() * grad_accum


def main():
    parser = argparse.ArgumentParser(description="PyTorch FSDP2 training throughput")
    parser.add_argument("config_path")
    parser.add_argument("seq_len", type=int)
    parser.add_argument("micro_batch", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--strategy", choices=["full_shard", "shard_grad_op"], default="full_shard")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile each decoder layer; flash/cuDNN SDPA only")
    parser.add_argument("--lora", type=int, default=0, metavar="R",
                        help="PEFT LoRA of rank R on a bf16 model (all seven projections)")
    parser.add_argument("--grad-accum", type=int, default=1, metavar="N",
                        help="micro-batches per optimizer step")
    parser.add_argument("--documents", metavar="TOKEN_FILE",
                        help="packed documents of this version 3 token file, FlexAttention "
                             "block-causal document masks (requires --compile)")
    parser.add_argument("--max-grad-norm", type=float, default=1.0, metavar="X",
                        help="clip the global gradient norm to X before each step; 0: no "
                             "clipping (default 1.0, as shardtrain's train.max_grad_norm)")
    args = parser.parse_args()
    if args.max_grad_norm < 0:
        parser.error("--max-grad-norm must be >= 0 (0 disables clipping)")
    if args.documents and not args.compile:
        parser.error("--documents needs --compile (uncompiled FlexAttention materialises the "
                     "scores)")
    import torch
    import torch.distributed as dist
    import transformers
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    config_path, seq_len = args.config_path, args.seq_len
    micro_batch, steps = args.micro_batch, args.steps
    checkpointing = args.checkpointing
    reshard = args.strategy == "full_shard"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    config = transformers.AutoConfig.from_pretrained(os.path.dirname(config_path))
    config.use_cache = False
    torch.manual_seed(0)
    # Mixture of experts: transformers' grouped-GEMM experts (torch grouped_mm over tokens sorted
    # by expert), not its default loop over experts.
    moe = getattr(config, "num_experts", 0) or getattr(config, "num_local_experts", 0)
    experts = {"experts_implementation": "grouped_mm"} if moe else {}
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="flex_attention" if args.documents else "sdpa",
            dtype=torch.bfloat16 if args.lora else torch.float32, **experts)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = model.model.layers
    if args.lora:
        import peft
        if checkpointing:
            model.enable_input_require_grads()
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=args.lora, lora_alpha=2 * args.lora, lora_dropout=0.0, task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj"]))
        layers = model.base_model.model.model.layers
    if not args.lora or dist.get_world_size() > 1:
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in layers:
            fully_shard(layer, mp_policy=policy, reshard_after_forward=reshard)
        fully_shard(model, mp_policy=policy, reshard_after_forward=reshard)
    if args.compile:
        for layer in layers:
            layer.compile()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.0, fused=True)
    generator = torch.Generator(device="cuda").manual_seed(1)
    documents = None
    if args.documents:
        import flex_documents
        documents = flex_documents.DocumentBatches(args.documents, seq_len, micro_batch,
                                                   config.vocab_size)

        def next_batch():
            ids, labels, positions, block_mask = next(documents)
            return {"input_ids": ids, "labels": labels, "position_ids": positions,
                    "attention_mask": block_mask}
    else:
        def next_batch():
            ids = torch.randint(0, config.vocab_size, (micro_batch, seq_len), device="cuda",
                                generator=generator)
            return {"input_ids": ids, "labels": ids}
    warmup = 3
    sdpa = contextlib.nullcontext()
    if args.compile and not args.documents:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sdpa = sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION])
    with sdpa:
        run_steps(model, optimizer, next_batch, warmup, steps, args.grad_accum,
                  args.max_grad_norm)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - run_steps.start

    tokens = micro_batch * seq_len * steps * args.grad_accum
    result = {"framework": "pytorch-fsdp2", "torch": torch.__version__, "compiled": args.compile,
              "world_size": dist.get_world_size(), "strategy": args.strategy,
              "tokens_per_s": tokens / elapsed, "step_ms": 1000 * elapsed / steps,
              "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
              "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30, "lora": args.lora,
              "grad_accum": args.grad_accum, "max_grad_norm": args.max_grad_norm,
              "checkpointing": checkpointing, "loss": run_steps.loss,
              "documents_per_sequence": documents and documents.mean_documents(),
              "graphs_compiled_while_timed": graphs_since(run_steps.graphs_at_start)}
    if dist.get_rank() == 0:
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()


def graphs_since(before):
    """Graphs torch.compile built since `before` (compiled_graphs()): not 0 after the warm-up
    means recompilation inside the timed steps; None when unknown."""
    now = compiled_graphs()
    return None if now is None or before is None else now - before


def compiled_graphs():
    """Graphs torch.compile built in this process so far (None when torch does not say)."""
    try:
        from torch._dynamo.utils import counters
        return counters["stats"]["unique_graphs"]
    except (ImportError, KeyError):
        return None


if __name__ == "__main__":
    main()
