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
import re
import sys
import tempfile
import traceback

import torch
import transformers
from safetensors import safe_open
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
    yield from moe_models(common)


# The mixture-of-experts fixtures, written with the Hub's per-expert tensor names (hub_tensors).
MOE_MODELS = ("qwen3_moe", "qwen3_moe_sparse_step", "mixtral")


def moe_models(common):
    """Qwen3-MoE: 8 experts, top 2 renormalised, a dense layer (mlp_only_layers) between two
    sparse ones; a second with decoder_sparse_step 2 (layer 0 dense), top 3 of 4 unnormalised,
    tied. Mixtral: top-2 of 4, softmax over the top-k logits. The aux coefficient is large so the
    load-balancing gradient is visible in the with-aux gradients."""
    moe = dict(common, num_attention_heads=4, num_key_value_heads=2, rope_theta=1000000.0,
               router_aux_loss_coef=0.1)
    yield "qwen3_moe", transformers.Qwen3MoeConfig(
        **dict(moe, num_hidden_layers=3), head_dim=32, tie_word_embeddings=False,
        attention_bias=False, use_sliding_window=False, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1])
    yield "qwen3_moe_sparse_step", transformers.Qwen3MoeConfig(
        **moe, head_dim=16, tie_word_embeddings=True, attention_bias=False,
        use_sliding_window=False, num_experts=4, num_experts_per_tok=3, moe_intermediate_size=48,
        norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[])
    yield "mixtral", transformers.MixtralConfig(
        **dict(moe, intermediate_size=32), tie_word_embeddings=False, sliding_window=None,
        num_local_experts=4, num_experts_per_tok=2)


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


def hub_tensors(config, name, t):
    """(Hub name, tensor) pairs of one parameter (or its gradient): transformers 5 may hold the
    experts stacked (experts.gate_up_proj [E, 2F, C], experts.down_proj [E, C, F]) and call
    Mixtral's block `mlp`; checkpoints on the Hub have one tensor per expert and projection
    (Qwen3-MoE mlp.experts.N.{gate,up,down}_proj.weight, Mixtral
    block_sparse_moe.experts.N.{w1,w3,w2}.weight)."""
    mixtral = config.model_type == "mixtral"
    block = "block_sparse_moe." if mixtral else "mlp."
    proj = {"gate": "w1", "up": "w3", "down": "w2"} if mixtral else \
        {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    m = re.match(r"(model\.layers\.\d+\.)(mlp|block_sparse_moe)\.(.*)$", name)
    if not m:
        return [(name, t)]
    layer, rest = m.group(1), m.group(3)
    F = config.moe_intermediate_size if hasattr(config, "moe_intermediate_size") else \
        config.intermediate_size
    C = config.hidden_size
    expert = lambda e, which: f"{layer}{block}experts.{e}.{proj[which]}.weight"
    if rest in ("gate.weight", "router.weight"):
        return [(layer + block + "gate.weight", t)]
    if rest == "experts.gate_up_proj":
        if tuple(t.shape[1:]) != (2 * F, C):  # a transposed stack; square ones are (2F, C)
            t = t.transpose(1, 2)
        assert tuple(t.shape[1:]) == (2 * F, C), (name, t.shape)
        out = []
        for e in range(t.shape[0]):
            out += [(expert(e, "gate"), t[e, :F]), (expert(e, "up"), t[e, F:])]
        return out
    if rest == "experts.down_proj":
        if tuple(t.shape[1:]) != (C, F):
            t = t.transpose(1, 2)
        assert tuple(t.shape[1:]) == (C, F), (name, t.shape)
        return [(expert(e, "down"), t[e]) for e in range(t.shape[0])]
    e = re.match(r"experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$", rest)
    if e:
        which = {"gate_proj": "gate", "w1": "gate", "up_proj": "up", "w3": "up",
                 "down_proj": "down", "w2": "down"}[e.group(2)]
        return [(expert(int(e.group(1)), which), t)]
    assert not mixtral and rest in ("gate_proj.weight", "up_proj.weight", "down_proj.weight"), name
    return [(name, t)]


def make_moe(name, config, out_dir):
    """As make(), plus: the checkpoint written with the Hub's per-expert names (and checked by
    reloading it through from_pretrained), and a second pass with output_router_logits: aux_loss,
    loss_with_aux (= loss + router_aux_loss_coef * aux_loss) and grad_aux.<param name>."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1234)
    config.torch_dtype = torch.float32
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager", torch_dtype=torch.float32)
    randomize(model, generator)
    model.train()
    print(name, "parameters:", [(n, tuple(p.shape)) for n, p in model.named_parameters()])
    input_ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), generator=generator)
    labels = input_ids.clone()
    labels[0, :3] = -100
    labels[1, 10] = -100
    out = model(input_ids=input_ids, labels=labels, output_router_logits=False)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad()
    aux = model(input_ids=input_ids, labels=labels, output_router_logits=True)
    aux.loss.backward()
    print(f"{name}: loss {out.loss.item():.6f}, with aux {aux.loss.item():.6f}, "
          f"aux {aux.aux_loss.item():.6f}")

    target = os.path.join(out_dir, name)
    os.makedirs(target, exist_ok=True)
    with tempfile.TemporaryDirectory() as native:  # what transformers itself writes, for the log
        model.save_pretrained(native, safe_serialization=True)
        with safe_open(os.path.join(native, "model.safetensors"), "pt") as f:
            print(name, "save_pretrained writes:", sorted(f.keys())[:40])
    config.save_pretrained(target)
    weights = {}
    for pname, param in model.named_parameters():
        for hub, t in hub_tensors(config, pname, param.detach()):
            weights[hub] = t.float().contiguous()
    save_file(weights, os.path.join(target, "model.safetensors"), metadata={"format": "pt"})
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        target, attn_implementation="eager", torch_dtype=torch.float32)
    with torch.no_grad():
        again = reloaded(input_ids=input_ids).logits
    print(f"{name}: reloaded from per-expert names, max |logits diff| "
          f"{(again - out.logits.detach()).abs().max().item():.3g}")

    expected = {
        "input_ids": input_ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "logits": out.logits.detach().float().contiguous(),
        "loss": out.loss.detach().float().reshape(1).contiguous(),
        "aux_loss": aux.aux_loss.detach().float().reshape(1).contiguous(),
        "loss_with_aux": aux.loss.detach().float().reshape(1).contiguous(),
    }
    for i, r in enumerate(aux.router_logits or ()):
        expected[f"router_logits.{i}"] = r.detach().float().contiguous()
        print(f"{name}: router_logits[{i}] {tuple(r.shape)}, row sums "
              f"{r.detach().float().sum(-1)[:3].tolist()}")
    for pname, param in model.named_parameters():
        for hub, t in hub_tensors(config, pname, grads[pname]):
            expected["grad." + hub] = t.float().contiguous()
        for hub, t in hub_tensors(config, pname, param.grad.detach()):
            expected["grad_aux." + hub] = t.float().contiguous()
    save_file(expected, os.path.join(target, "expected.safetensors"))


def make(name, config, out_dir):
    if name in MOE_MODELS:
        return make_moe(name, config, out_dir)
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
    failed = False
    for name, config in tiny_models():
        if not wanted or name in wanted:
            try:
                make(name, config, out_dir)
            except Exception:  # one model's failure leaves the others' fixtures
                traceback.print_exc()
                failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
