#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs the demo fine-tune
# (examples/demo.toml) on whatever device is present (CPU if no GPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$root"
./build/shardtrain train --config examples/demo.toml --metrics out/demo-metrics.jsonl "$@"
./build/shardtrain eval --model out/demo-model --data examples/demo-data.bin --seq-len 128 \
  --batch 8 --max-sequences 512 --device cpu
