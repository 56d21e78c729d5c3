#!/usr/bin/env python3
"""Makes the PEFT LoRA parity fixtures in tests/golden/lora/ (run where transformers and peft are).

For each case it loads a committed golden base (tests/golden/<base>/, tools/make_golden.py),
applies PEFT LoRA, sets every lora_B to small random values (PEFT starts B at zero, which would
hide A's gradient and the adapter's output), and writes tests/golden/lora/<case>/:
  adapter_config.json, adapter_model.safetensors   as PEFT's save_pretrained writes them
  expected.safetensors   input_ids, labels (the base fixture's batch), logits (F32 [B,T,V]),
                         loss (F32 [1]) and grad.<adapter tensor name> (F32) for every lora_A
                         and lora_B, all in fp32 with eager attention.
With --ours, it also checks the other direction: for every tests/golden/lora/ours_<case>/ (an
adapter written by shardtrain, and merged/, shardtrain's `export --merge` of it), it writes
peft_expected.safetensors there: PeftModel.from_pretrained's logits and loss on the batch, and
the loss transformers gets from merged/.
Usage: python3 tools/make_lora_fixture.py [--ours] [OUT_DIR]   (default tests/golden/lora)
"""
import json
import os
import sys

import peft
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "tests", "golden")

# (case, base fixture, LoraConfig keywords)
CASES = [
    ("llama_gqa_all_linear", "llama_gqa",
     dict(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)),
    # k_proj without an adapter between q's and v's (one packed q/k/v Linear in shardtrain),
    # q/k/v biases, a tied head, rank-stabilised scaling.
    ("qwen2_qv_down_rslora", "qwen2_tied_bias",
     dict(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"],
          lora_dropout=0.0, use_rslora=True)),
    # Gemma 3 text: 1 + weight and sandwich norms (frozen), GeGLU, a sliding and a global layer.
    ("gemma3_text_all_linear", "gemma3_text",
     dict(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)),
]


def base_model(base):
    return transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(GOLDEN, base), attn_implementation="eager", dtype=torch.float32)


def golden_batch(base):
    with safe_open(os.path.join(GOLDEN, base, "expected.safetensors"), "pt") as f:
        return f.get_tensor("input_ids").long(), f.get_tensor("labels").long()


def saved_name(name):
    """PEFT's parameter name as save_pretrained writes it (no adapter name)."""
    return name.replace(".default", "")


def make(case, base, lora_kwargs, out_dir):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(4321)
    model = peft.get_peft_model(base_model(base),
                                peft.LoraConfig(task_type="CAUSAL_LM", **lora_kwargs))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(0.05 * torch.randn(param.shape, generator=generator))
    model.train()  # lora_dropout is 0: train and eval compute the same
    input_ids, labels = golden_batch(base)
    out = model(input_ids=input_ids, labels=labels)
    out.loss.backward()

    target = os.path.join(out_dir, case)
    os.makedirs(target, exist_ok=True)
    # The base's directory name, as shardtrain compares it with model.path (no warning).
    model.peft_config["default"].base_model_name_or_path = base
    model.save_pretrained(target, safe_serialization=True)
    expected = {
        "input_ids": input_ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "logits": out.logits.detach().float().contiguous(),
        "loss": out.loss.detach().float().reshape(1).contiguous(),
    }
    for name, param in model.named_parameters():
        if param.requires_grad:
            expected["grad." + saved_name(name)] = param.grad.detach().float().contiguous()
    save_file(expected, os.path.join(target, "expected.safetensors"))
    print(f"{case}: loss {out.loss.item():.6f}, "
          f"{sum(p.numel() for p in model.parameters() if p.requires_grad)} adapter parameters")


def check_ours(case_dir):
    """PEFT and transformers on shardtrain's outputs: the adapter and the merged export."""
    with open(os.path.join(case_dir, "adapter_config.json")) as f:
        base = os.path.basename(json.load(f)["base_model_name_or_path"].rstrip("/"))
    input_ids, labels = golden_batch(base)
    model = peft.PeftModel.from_pretrained(base_model(base), case_dir)
    model.eval()
    with torch.no_grad():
        out = model(input_ids=input_ids, labels=labels)
        merged = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.join(case_dir, "merged"), attn_implementation="eager", dtype=torch.float32)
        merged_out = merged(input_ids=input_ids, labels=labels)
    save_file({"logits": out.logits.float().contiguous(),
               "loss": out.loss.float().reshape(1).contiguous(),
               "merged_loss": merged_out.loss.float().reshape(1).contiguous()},
              os.path.join(case_dir, "peft_expected.safetensors"))
    print(f"{os.path.basename(case_dir)}: PEFT loss {out.loss.item():.6f}, "
          f"merged {merged_out.loss.item():.6f}")


def main():
    args = [a for a in sys.argv[1:] if a != "--ours"]
    out_dir = args[0] if args else os.path.join(GOLDEN, "lora")
    print(f"transformers {transformers.__version__}, peft {peft.__version__}, "
          f"torch {torch.__version__}")
    for case, base, lora_kwargs in CASES:
        make(case, base, lora_kwargs, out_dir)
    if "--ours" in sys.argv:
        for name in sorted(os.listdir(out_dir)):
            if name.startswith("ours_"):
                check_ours(os.path.join(out_dir, name))


if __name__ == "__main__":
    main()
