#!/usr/bin/env bash
# On the GPU machine (which has transformers): trains the demo model and Qwen2-style (tied
# embeddings, q/k/v biases), Qwen3-style (q/k norms, head_dim 64) and Gemma-3-style (1 + weight
# and sandwich norms, GeGLU, scaled embeddings, local layers with a 32-token window and their own
# rope, a global layer, final logit soft cap) variants for a few steps with shardtrain, saves
# each as a Hugging Face checkpoint, and checks that transformers loads it and computes the same
# loss as `shardtrain eval` on the same sequences (tools/check_hf_compat.py, 1e-5 relative).
# REQUIRES: shardtrain built (tools/device/build_on_device.sh) at $1.
# Usage: tools/device/hf_compat_run.sh BIN [VARIANT...]   (demo-model qwen2 qwen3 gemma3; default
# all: each trains on the CPU, ~30-60 s a variant)
set -euo pipefail
bin=$1
shift
wanted=("$@")
((${#wanted[@]})) || wanted=(demo-model qwen2 qwen3 gemma3)
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/device/common.sh"  # .devkit libraries, NCCL_NVLS_ENABLE=0
work=$(mktemp -d)
mkdir -p "$work/qwen2" "$work/qwen3" "$work/gemma3"
python3 - "$root/examples/demo-model/config.json" "$work" <<'PY'
import json, os, sys
base = json.load(open(sys.argv[1]))
def write(name, **keys):
    c = dict(base, **keys)
    json.dump(c, open(os.path.join(sys.argv[2], name, "config.json"), "w"))
write("qwen2", model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True,
      use_sliding_window=False)
write("qwen3", model_type="qwen3", architectures=["Qwen3ForCausalLM"], tie_word_embeddings=True,
      use_sliding_window=False, head_dim=64)
gemma = dict(base, model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], head_dim=64,
             tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
             query_pre_attn_scalar=48, sliding_window=32, final_logit_softcapping=30.0,
             attn_logit_softcapping=None,
             layer_types=["sliding_attention"] * 3 + ["full_attention"],
             rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
for key in ("hidden_act", "mlp_bias", "rope_theta"):
    gemma.pop(key)
json.dump(gemma, open(os.path.join(sys.argv[2], "gemma3", "config.json"), "w"))
PY
for variant in qwen2 qwen3 gemma3; do  # the demo's tokenizer (the data is raw text)
  cp "$root/examples/demo-model/tokenizer.json" "$root/examples/demo-model/tokenizer_config.json" \
    "$work/$variant/"
done
status=0
for variant in "$root/examples/demo-model" "$work/qwen2" "$work/qwen3" "$work/gemma3"; do
  [[ " ${wanted[*]} " == *" $(basename "$variant") "* ]] || continue
  for dtype in fp32 bf16; do
    out=$work/out-$(basename "$variant")-$dtype
    "$bin" train --config "$root/examples/demo.toml" --steps 5 --optim.warmup_steps=1 --model.path="$variant" \
      --model.dtype=$dtype --train.output_dir="$out" --train.log_every=5 --train.device=cpu >/dev/null
    loss=$("$bin" eval --model "$out" --data "$root/examples/demo-data.bin" --seq-len 128 \
      --batch 8 --max-sequences 16 --device cpu | tail -1 |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
    echo "== $(basename "$variant") $dtype: shardtrain eval loss $loss"
    python3 "$root/tools/check_hf_compat.py" "$out" "$root/examples/demo-data.bin" 128 16 "$loss" ||
      status=1
  done
done
exit $status
