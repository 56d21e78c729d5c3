#!/usr/bin/env bash
# Training throughput on the GPU machine: shardtrain and compiled PyTorch FSDP2 (per-layer
# torch.compile, use_cache=False, flash/cuDNN SDPA, fused AdamW: bench/pytorch_fsdp2.py
# --compile) in the same call, same shapes (bench/shapes/*), random init, random tokens, bf16,
# AdamW, one GPU; eager PyTorch FSDP2 too (its own rows and ratio) unless BENCH_EAGER=0.
# Usage: bench/run_bench.sh SHARDTRAIN_BIN OUT_DIR [RUN ...]   (default: qwen2.5-1.5b llama3.2-1b)
# RUN = SHAPE[@SEQ[xMB]][+ckpt|+sel][+lean][+wgmma|+wgmmafwd][+gemmwide|+splitk]
#       [+aside|+inorder|+asidesmsN][+lora]
#       [+docs][+fp8][+accumN]:
#   @SEQ[xMB]  sequence length and micro-batch of this run (default BENCH_SEQ or 4096 and
#              BENCH_MICRO_BATCH or 2), e.g. llama3.2-1b@16384x1, llama2-7b@4096x1+ckpt
#   +ckpt      both engines with full activation checkpointing; +sel: ours selective
#              (attention outputs kept) against PyTorch's full (transformers has no selective)
#   +lean      ours with the one-GPU memory levers: the bf16 copy built on demand and the AdamW
#              step per unit in backward (--fsdp.compute_copy=on_demand
#              --optim.update_in_backward=true --train.max_grad_norm=0, which the step in
#              backward needs; PyTorch with --max-grad-norm 0, so neither clips). Without +lean,
#              fsdp.compute_copy = auto, and both clip the gradient norm at 1.0 (ours'
#              train.max_grad_norm default, PyTorch's clip_grad_norm_), as users fine-tune.
#   +wgmma     ours with the cp.async wgmma attention kernels instead of the warp-specialised ones
#              (the Hopper default they replaced): the test worker beside SHARDTRAIN_BIN
#              (shardtrain_test_worker, the same program plus its test hooks) with
#              SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma; the shipped binary reads no such variable
#   +wgmmafwd  the same for the forward only (SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma-forward):
#              the cp.async wgmma forward beside the warp-specialised backward
#   +gemmwide  ours with SHARDTRAIN_GEMM_SEARCH=wide (the bf16 GEMMs tuned over cuBLASLt's top 32
#              candidates instead of 8); +splitk: =split-k (the top 8 and split-K variants of
#              every deep key): ops/ops_switches.h, cuda_gemm_gpu_test's timing per GEMM
#   +aside     ours with SHARDTRAIN_OPS_ASIDE=1 (a second stream: the gradient norm's terms
#              beside backward instead of in order after it, the update beside the next forward;
#              the one-rank default, so on one GPU the same as without); +inorder: ours with
#              SHARDTRAIN_OPS_ASIDE=0 (the before of that default);
#              +asidesmsN: the same with SHARDTRAIN_ASIDE_GEMM_SMS=N (N of 8, 16, 24, 32: the
#              bf16 GEMMs leave N SMs to the update while it runs)
#   +lora      LoRA rank 16, alpha 32, all seven projections, on both: ours --lora.* against
#              PEFT's get_peft_model on a bf16 model (pytorch_fsdp2.py --lora 16); MFU counts
#              the work done: no weight-gradient GEMM on the frozen base (benchlib.py flops)
#   +docs      packed documents instead of one random stream: both engines read one token file
#              (OUT_DIR/doc-tokens-SHAPE-SEQ.bin, benchlib.py doc-tokens: random ids, documents
#              of 200-3000 tokens drawn uniformly, seeded, in a version 3 document table), cut
#              into the same windows; ours with --data.packing=documents, PyTorch with
#              FlexAttention and a compiled block-causal document mask, per-document position
#              ids and each document's first token no target (pytorch_fsdp2.py --documents,
#              bench/flex_documents.py: torchtitan's way). Compiled PyTorch only: eager
#              FlexAttention materialises the scores, so no eager row. MFU counts full causal
#              attention FLOPs, as every other row
#   +fp8       ours with train.precision = fp8 (FP8 projections, H100/H200/L4) against PyTorch in
#              bf16 (no torchao on the GPU machine): qwen2.5-1.5b and qwen2.5-1.5b+fp8 in one
#              call give our FP8 / bf16 ratio beside compiled PyTorch's one bf16 measurement
#   +accumN    N micro-batches per optimizer step on both (--train.grad_accum=N; PyTorch
#              --grad-accum N, gradient sync on the last): the optimizer's cost spread over N
#              micro-batches, e.g. a mixture of experts, whose AdamW over every expert's
#              parameters dominates a one-micro-batch step
# Runs that differ only in ours' settings (e.g. qwen2.5-1.5b and qwen2.5-1.5b+wgmma) share one
# PyTorch measurement of this call.
# Prints a table: tokens/s, MFU (790 TFLOP/s ceiling), peak GPU memory (nvidia-smi), the plan's
# prediction for ours (`shardtrain plan`, same flags) and measured / plan, and the ratios.
# BENCH_PROFILE=1 (unset or 0: off) adds, per run, a separate 3-step run of ours with SHARDTRAIN_PROFILE_OPS=1
# (device time per op class, synchronised per op; OUT_DIR/RUN-profile.txt), never timed.
# BENCH_DRY=1: no GPU; prints each command instead of running it (checks the parsing).
# BENCH_DEADLINE=EPOCH_SECONDS (a machine lent for a fixed time): a run is skipped, with a
# "skipped" line in the table, when the longest run so far would end past it, so that no run is
# cut between ours and its PyTorch baseline. The first run always starts.
set -euo pipefail
bin=$1 out=$2
shift 2
runs=("$@")
((${#runs[@]})) || runs=(qwen2.5-1.5b llama3.2-1b)
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${BENCH_STEPS:-8}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$out"
lib=$root/bench/benchlib.py  # FLOPs, MFU, token files, metrics parsing (shared with run_scaling.sh)
dry=${BENCH_DRY:-}
export SAMPLE_PEAK_DRY=$dry
source "$root/bench/sample_peak.sh"  # sample_peak_mib LOG COMMAND...: the peak MiB while it runs
gpu_memory=h200  # what `plan` resolves fsdp.compute_copy = auto against: this GPU's total
[[ -z $dry ]] && gpu_memory="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)MiB"
printf '%-28s %-14s %12s %7s %9s\n' run engine tokens/s MFU peakGiB >"$out/table.txt"
declare -A torch_tps torch_peak eager_tps_of eager_peak_of  # PyTorch's figures of this call by
# shape, seq, micro-batch and flags (compiled; eager)
deadline=${BENCH_DEADLINE:-} longest_run_s=
for run in "${runs[@]}"; do
  if [[ -n $deadline && -n $longest_run_s ]] && (($(date +%s) + longest_run_s > deadline)); then
    printf '%-28s skipped: the longest run so far took %s s, BENCH_DEADLINE is %s s away\n' \
      "$run" "$longest_run_s" "$((deadline - $(date +%s)))" | tee -a "$out/table.txt" >&2
    continue
  fi
  run_start=$(date +%s)
  spec=${run%%+*} mods=${run#"$spec"}
  shape=${spec%%@*} seq=${BENCH_SEQ:-4096} mb=${BENCH_MICRO_BATCH:-2}
  if [[ $spec == *@* ]]; then
    size=${spec#*@}
    seq=${size%%x*}
    [[ $size == *x* ]] && mb=${size#*x}
  fi
  [[ $seq =~ ^[0-9]+$ && $mb =~ ^[0-9]+$ ]] || { echo "run '$run': bad @SEQxMB" >&2; exit 2; }
  [[ -d $root/bench/shapes/$shape ]] || { echo "run '$run': no bench/shapes/$shape" >&2; exit 2; }
  ours_args=() torch_args=() ours_env=() ours_bin=$bin docs= lora_rank=0
  for mod in ${mods//+/ }; do
    case $mod in
      ckpt) ours_args+=(--train.activation_checkpointing=full) torch_args+=(--checkpointing) ;;
      sel) ours_args+=(--train.activation_checkpointing=selective) torch_args+=(--checkpointing) ;;
      lean) ours_args+=(--fsdp.compute_copy=on_demand --optim.update_in_backward=true
        --train.max_grad_norm=0) torch_args+=(--max-grad-norm 0) ;;
      wgmma) ours_env+=(SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma)
        ours_bin=$(dirname "$bin")/shardtrain_test_worker ;;
      wgmmafwd) ours_env+=(SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma-forward)
        ours_bin=$(dirname "$bin")/shardtrain_test_worker ;;
      gemmwide) ours_env+=(SHARDTRAIN_GEMM_SEARCH=wide) ;;
      splitk) ours_env+=(SHARDTRAIN_GEMM_SEARCH=split-k) ;;
      aside) ours_env+=(SHARDTRAIN_OPS_ASIDE=1) ;;
      inorder) ours_env+=(SHARDTRAIN_OPS_ASIDE=0) ;;
      asidesms[0-9]*) [[ ${mod#asidesms} =~ ^(8|16|24|32)$ ]] ||
        { echo "run '$run': bad +$mod (asidesms8, 16, 24 or 32)" >&2; exit 2; }
        ours_env+=(SHARDTRAIN_OPS_ASIDE=1 "SHARDTRAIN_ASIDE_GEMM_SMS=${mod#asidesms}") ;;
      lora) ours_args+=(--lora.enabled=true --lora.rank=16 --lora.alpha=32
        --lora.target_modules=all-linear) torch_args+=(--lora 16) lora_rank=16 ;;
      docs) docs=1 ;;
      fp8) ours_args+=(--train.precision=fp8) ;;
      accum[1-9]*) [[ ${mod#accum} =~ ^[0-9]+$ ]] || { echo "run '$run': bad +$mod" >&2; exit 2; }
        ours_args+=(--train.grad_accum="${mod#accum}") torch_args+=(--grad-accum "${mod#accum}") ;;
      *) echo "run '$run': unknown +$mod (ckpt, sel, lean, wgmma, wgmmafwd, gemmwide, splitk," \
        "aside, inorder, asidesmsN, lora, docs, fp8, accumN)" >&2
        exit 2 ;;
    esac
  done
  config=$root/bench/shapes/$shape/config.json
  flops=$(python3 "$lib" flops "$config" "$seq" "$lora_rank")
  if [[ -n $docs ]]; then  # random ids cut into documents, for both engines
    tokens=$out/doc-tokens-$shape-$seq.bin
    [[ -f $tokens ]] || python3 "$lib" doc-tokens "$config" "$tokens" "$seq" 64
    ours_args+=(--data.packing=documents) torch_args+=(--documents "$tokens")
  else
    tokens=$out/tokens-$shape-$seq.bin  # random ids below the shape's vocab_size
    [[ -f $tokens ]] || python3 "$lib" tokens "$config" "$tokens" "$seq" 64
  fi
  job=(--config "$root/bench/bench.toml" --model.path="$root/bench/shapes/$shape"
    --data.path="$tokens" --data.seq_len="$seq" --train.micro_batch="$mb" "${ours_args[@]}")
  "$bin" plan "${job[@]}" --world-size 1 --gpu-memory "$gpu_memory" >"$out/$run-plan.txt"
  plan=$(python3 "$lib" plan-total "$out/$run-plan.txt" full_shard)
  rm -f "$out/$run-metrics.jsonl"  # --metrics appends
  ours_mib=$(sample_peak_mib "$out/$run-shardtrain.log" env "${ours_env[@]}" "$ours_bin" train \
    "${job[@]}" --train.steps="$steps" --metrics "$out/$run-metrics.jsonl")
  ours=1
  [[ -z $dry ]] && ours=$(python3 "$lib" ours-tps "$out/$run-metrics.jsonl" 1) &&
    echo "$run: $(python3 "$lib" host-wait "$out/$run-metrics.jsonl")"
  if [[ ${BENCH_PROFILE:-0} != 0 && -z $dry ]]; then
    env "${ours_env[@]}" SHARDTRAIN_PROFILE_OPS=1 "$ours_bin" train "${job[@]}" --train.steps=3 \
      >"$out/$run-profile.log" 2>&1 || true
    sed -n '/op profile/,$p' "$out/$run-profile.log" >"$out/$run-profile.txt"
  fi
  torch=(python3 "$root/bench/pytorch_fsdp2.py" "$config" "$seq" "$mb" "$steps" "${torch_args[@]}")
  torch_key="$shape $seq $mb ${torch_args[*]}"
  if [[ -n ${torch_tps[$torch_key]:-} ]]; then
    theirs=${torch_tps[$torch_key]} torch_mib=${torch_peak[$torch_key]}
    echo "$run: PyTorch's figures of this call reused ($torch_key)" >"$out/$run-pytorch.log"
  else
    torch_mib=$(PYTHONUNBUFFERED=1 sample_peak_mib "$out/$run-pytorch.log" "${torch[@]}" --compile)
    theirs=1
    [[ -z $dry ]] && theirs=$(python3 "$lib" torch-tps "$out/$run-pytorch.log")
    torch_tps[$torch_key]=$theirs torch_peak[$torch_key]=$torch_mib
  fi
  eager=()
  if [[ ${BENCH_EAGER:-1} != 0 && -z $docs ]]; then
    if [[ -n ${eager_tps_of[$torch_key]:-} ]]; then
      eager_tps=${eager_tps_of[$torch_key]} eager_mib=${eager_peak_of[$torch_key]}
      echo "$run: eager PyTorch's figures of this call reused ($torch_key)" \
        >"$out/$run-pytorch-eager.log"
    else
      eager_mib=$(sample_peak_mib "$out/$run-pytorch-eager.log" "${torch[@]}")
      eager_tps=1
      [[ -z $dry ]] && eager_tps=$(python3 "$lib" torch-tps "$out/$run-pytorch-eager.log")
      eager_tps_of[$torch_key]=$eager_tps eager_peak_of[$torch_key]=$eager_mib
    fi
    eager=("$eager_tps" "$eager_mib")
  fi
  python3 "$lib" bench-rows "$run" "$ours" "$theirs" "$flops" "$ours_mib" "$torch_mib" "$plan" \
    "${eager[@]}" >>"$out/table.txt"
  run_s=$(($(date +%s) - run_start))
  if [[ -z $longest_run_s ]] || ((run_s > longest_run_s)); then longest_run_s=$run_s; fi
done
cat "$out/table.txt"
