#!/usr/bin/env bash
# On the GPU machine (which has transformers): trains the demo model and a Qwen2-style variant
# (tied embeddings, q/k/v biases) for a few steps with shardtrain, saves each as a Hugging Face
# checkpoint, and checks that transformers loads it and computes the same loss as
# `shardtrain eval` on the same sequences (tools/check_hf_compat.py, 1e-5 relative).
# REQUIRES: shardtrain built (tools/device/build_on_device.sh) at $1.
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/device/common.sh"  # .devkit libraries, NCCL_NVLS_ENABLE=0
work=$(mktemp -d)
mkdir -p "$work/qwen2"
python3 - "$root/examples/demo-model/config.json" "$work/qwen2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True,
         use_sliding_window=False)
json.dump(c, open(sys.argv[2], "w"))
PY
status=0
for variant in "$root/examples/demo-model" "$work/qwen2"; do
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
