#!/usr/bin/env bash
# Issue 18 on the GPU machine: tests/pytorch/ddp_job.py with NCCL (PyTorch 2.x there) under
# `shardtrain launch --standalone`, one worker per GPU (1 GPU: nproc 1; 2 if there are more),
# then the same under torchrun for comparison. Prints each run's result lines; logs under $OUT.
# Run through the device tool, carrying .devkit : bash tools/device/torchrun_nccl.sh
source "$(dirname "$0")/common.sh"  # .devkit libraries, NCCL_NVLS_ENABLE=0, $OUT
OUT=$out
s=$(date +%s)
SHARDTRAIN_CUDA=OFF tools/device/build_on_device.sh build-cpu shardtrain > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build (CPU-only: the launcher needs no CUDA; the workers are PyTorch) $(( $(date +%s) - s )) s"
gpus=$(nvidia-smi -L | grep -c '^GPU ')
nproc=1
(( gpus >= 2 )) && nproc=2
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
cmd=(build-cpu/shardtrain launch --standalone --nproc-per-node "$nproc" --python "$(command -v python3)"
     tests/pytorch/ddp_job.py --backend nccl --steps 5)
echo "+ ${cmd[*]}"
"${cmd[@]}" > "$OUT/shardtrain_launch.log" 2>&1
echo "shardtrain launch rc=$?"; grep -E "ddp ok|error|failed" "$OUT/shardtrain_launch.log"
if command -v torchrun > /dev/null; then
  torchrun --standalone --nproc-per-node "$nproc" tests/pytorch/ddp_job.py --backend nccl --steps 5 \
    > "$OUT/torchrun.log" 2>&1
  echo "torchrun rc=$?"; grep -E "ddp ok|Error" "$OUT/torchrun.log" | head -5
fi
