#!/usr/bin/env python3
"""PyTorch FSDP2 baseline for bench/run_bench.sh (one process per GPU; world size from torchrun
or 1). transformers model from a config, fully_shard per decoder layer, MixedPrecisionPolicy
(bf16 params, fp32 reduce), fused AdamW, SDPA attention, random tokens.

Usage: python3 bench/pytorch_fsdp2.py CONFIG_JSON SEQ_LEN MICRO_BATCH STEPS [--checkpointing]
Prints one JSON line: tokens_per_s (per GPU, timed steps only), peak_gib, step_ms.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import transformers
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def main():
    config_path, seq_len, micro_batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    checkpointing = "--checkpointing" in sys.argv
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    config = transformers.AutoConfig.from_pretrained(os.path.dirname(config_path))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="sdpa", dtype=torch.float32)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=True)
    generator = torch.Generator(device="cuda").manual_seed(1)
    warmup = 3
    for step in range(warmup + steps):
        if step == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        ids = torch.randint(0, config.vocab_size, (micro_batch, seq_len), device="cuda",
                            generator=generator)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    tokens = micro_batch * seq_len * steps
    print(json.dumps({"framework": "pytorch-fsdp2", "torch": torch.__version__,
                      "tokens_per_s": tokens / elapsed, "step_ms": 1000 * elapsed / steps,
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "checkpointing": checkpointing, "loss": loss.item()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
