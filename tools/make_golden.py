#!/usr/bin/env python3
"""Makes the Hugging Face parity fixtures in tests/golden/ (run where transformers is installed).

For each tiny random model it writes tests/golden/<name>/:
  config.json, model.safetensors   the checkpoint, exactly as transformers saves it
  expected.safetensors             input_ids (I32 [B,T]), labels (I32 [B,T], -100 = ignored),
                                   logits (F32 [B,T,V]), loss (F32 [1]) and grad.<param name>
                                   (F32) for every trainable parameter, all computed in fp32
                                   with eager attention.
Usage: python3 tools/make_golden.py [OUT_DIR [NAME ...]]   (default tests/golden, every model;
names pick some of them, so committed fixtures of the others stay byte for byte as they are)
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

BATCH, SEQ = 2, 16


def tiny_models():
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  max_position_embeddings=128, rms_norm_eps=1e-6)
    yield "llama_gqa", transformers.LlamaConfig(
        **common, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        rope_theta=10000.0)
    yield "qwen2_tied_bias", transformers.Qwen2Config(
        **common, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        rope_theta=1000000.0, use_sliding_window=False)
    # llama3 rope scaling, explicit head_dim different from hidden/heads, MHA (no GQA).
    yield "llama3_rope", transformers.LlamaConfig(
        **common, num_attention_heads=2, num_key_value_heads=2, head_dim=48,
        tie_word_embeddings=False, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8})
    yield "mistral", transformers.MistralConfig(
        **common, num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False,
        rope_theta=10000.0, sliding_window=None)
    # A window shorter than the sequence: query i sees keys i-5..i (the windowed mask spec).
    yield "mistral_window", transformers.MistralConfig(
        **common, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        rope_theta=10000.0, sliding_window=6)
    # Per-head q/k RMSNorm before rope, head_dim (32) unlike hidden/heads (16), tied, no biases.
    yield "qwen3", transformers.Qwen3Config(
        **common, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        tie_word_embeddings=True, rope_theta=1000000.0, attention_bias=False,
        use_sliding_window=False)
    yield "gemma3_text", gemma3_text_config(common)


def gemma3_text_config(common):
    """1 + weight norms, pre/post norms, GeGLU, embedding scale, q/k norms, query_pre_attn_scalar
    unlike head_dim, a sliding layer (window 6 < SEQ) then a global one with their own rope bases,
    final logit softcapping."""
    kwargs = dict(common, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  query_pre_attn_scalar=24, sliding_window=6,
                  layer_types=["sliding_attention", "full_attention"],
                  final_logit_softcapping=30.0, attn_logit_softcapping=None,
                  tie_word_embeddings=True)
    try:
        return transformers.Gemma3TextConfig(**kwargs, rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    except (TypeError, ValueError, KeyError):
        return transformers.Gemma3TextConfig(**kwargs, rope_theta=1000000.0,
                                             rope_local_base_freq=10000.0)


def randomize(model, generator):
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight") and "gemma" in model.config.model_type:
                # Gemma scales by 1 + weight: weights near 0 give norms near 1.
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))
            elif name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
            elif name.endswith(".bias"):
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(0.08 * torch.randn(param.shape, generator=generator))


def make(name, config, out_dir):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1234)
    config.torch_dtype = torch.float32
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager", torch_dtype=torch.float32)
    randomize(model, generator)
    model.train()  # dropout is 0 in these configs

    input_ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), generator=generator)
    labels = input_ids.clone()
    labels[0, :3] = -100
    labels[1, 10] = -100
    out = model(input_ids=input_ids, labels=labels)
    out.loss.backward()

    target = os.path.join(out_dir, name)
    os.makedirs(target, exist_ok=True)
    model.save_pretrained(target, safe_serialization=True)
    expected = {
        "input_ids": input_ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "logits": out.logits.detach().float().contiguous(),
        "loss": out.loss.detach().float().reshape(1).contiguous(),
    }
    for pname, param in model.named_parameters():
        expected["grad." + pname] = param.grad.detach().float().contiguous()
    save_file(expected, os.path.join(target, "expected.safetensors"))
    print(f"{name}: loss {out.loss.item():.6f}, params {sum(p.numel() for p in model.parameters())}")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    wanted = set(sys.argv[2:])
    for name, config in tiny_models():
        if not wanted or name in wanted:
            make(name, config, out_dir)


if __name__ == "__main__":
    main()
