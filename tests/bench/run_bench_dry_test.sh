#!/usr/bin/env bash
# bench/run_bench.sh without a GPU (BENCH_DRY=1: every command written to its log, nothing run):
# run specs parse into the right flags for both engines, +wgmma (+wgmmafwd) runs ours as the test worker with
# the cp.async-wgmma attention hook (its forward-only form; the shipped binary reads no test variable), +splitk and +gemmwide run
# the shipped binary with SHARDTRAIN_GEMM_SEARCH, +aside with SHARDTRAIN_OPS_ASIDE=1 (+asidesmsN also with SHARDTRAIN_ASIDE_GEMM_SMS=N), +inorder with SHARDTRAIN_OPS_ASIDE=0, runs that differ only in ours' settings share one PyTorch measurement of
# the call, +docs gives both engines one token file of documents (ours masked apart, PyTorch with
# FlexAttention, no eager row), +accumN accumulates on both, +lean turns clipping off on both, a bad spec exits 2 naming it; and benchlib.py loss-diff compares
# two metrics files.
# Usage: run_bench_dry_test.sh SHARDTRAIN_BIN SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

BENCH_DRY=1 bash "$src/bench/run_bench.sh" "$bin" "$work/out" qwen2.5-1.5b qwen2.5-1.5b+wgmma \
  qwen2.5-1.5b+wgmmafwd qwen2.5-1.5b+ckpt qwen2.5-1.5b+splitk qwen2.5-1.5b+gemmwide qwen2.5-1.5b+aside \
  qwen2.5-1.5b+asidesms16 qwen2.5-1.5b+inorder >"$work/stdout" 2>&1 ||
  { cat "$work/stdout"; fail "dry run exited $?"; }
out=$work/out
grep -q -- "SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma .*/shardtrain_test_worker train" \
  "$out/qwen2.5-1.5b+wgmma-shardtrain.log" ||
  fail "+wgmma: ours' command does not run the test worker with the hook"
grep -q -- "SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma-forward .*/shardtrain_test_worker train" \
  "$out/qwen2.5-1.5b+wgmmafwd-shardtrain.log" ||
  fail "+wgmmafwd: ours' command does not run the test worker with the forward-only hook"
grep -q "reused" "$out/qwen2.5-1.5b+wgmmafwd-pytorch.log" || fail "+wgmmafwd measured PyTorch again"
grep -qE -- "SHARDTRAIN_GEMM_SEARCH=split-k [^ ]*/shardtrain train" \
  "$out/qwen2.5-1.5b+splitk-shardtrain.log" || fail "+splitk: ours without SHARDTRAIN_GEMM_SEARCH=split-k"
grep -qE -- "SHARDTRAIN_GEMM_SEARCH=wide [^ ]*/shardtrain train" \
  "$out/qwen2.5-1.5b+gemmwide-shardtrain.log" || fail "+gemmwide: ours without SHARDTRAIN_GEMM_SEARCH=wide"
grep -q "reused" "$out/qwen2.5-1.5b+splitk-pytorch.log" || fail "+splitk measured PyTorch again"
grep -qE -- "SHARDTRAIN_OPS_ASIDE=1 [^ ]*/shardtrain train" "$out/qwen2.5-1.5b+aside-shardtrain.log" ||
  fail "+aside: ours without SHARDTRAIN_OPS_ASIDE=1"
grep -qE -- "SHARDTRAIN_OPS_ASIDE=0 [^ ]*/shardtrain train" "$out/qwen2.5-1.5b+inorder-shardtrain.log" ||
  fail "+inorder: ours without SHARDTRAIN_OPS_ASIDE=0"
grep -qE -- "SHARDTRAIN_OPS_ASIDE=1 SHARDTRAIN_ASIDE_GEMM_SMS=16 [^ ]*/shardtrain train" \
  "$out/qwen2.5-1.5b+asidesms16-shardtrain.log" ||
  fail "+asidesms16: ours without SHARDTRAIN_OPS_ASIDE=1 SHARDTRAIN_ASIDE_GEMM_SMS=16"
if grep -q "shardtrain_test_worker" "$out/qwen2.5-1.5b-shardtrain.log"; then
  fail "the plain run uses the test worker"
fi
if grep -q "SHARDTRAIN_TEST_ATTENTION_KERNEL" "$out/qwen2.5-1.5b-shardtrain.log"; then
  fail "the plain run sets the hook"
fi
grep -q -- "pytorch_fsdp2.py .* --compile" "$out/qwen2.5-1.5b-pytorch.log" ||
  fail "the first run does not measure compiled PyTorch"
grep -q "reused" "$out/qwen2.5-1.5b+wgmma-pytorch.log" || fail "+wgmma measured PyTorch again"
grep -q -- "--checkpointing" "$out/qwen2.5-1.5b+ckpt-pytorch.log" ||
  fail "+ckpt: PyTorch runs without checkpointing (or its measurement was wrongly reused)"
grep -q -- "--train.activation_checkpointing=full" "$out/qwen2.5-1.5b+ckpt-shardtrain.log" ||
  fail "+ckpt: ours runs without checkpointing"
[[ $(grep -cE ' ratio +[0-9-]' "$out/table.txt") == 9 ]] || { cat "$out/table.txt"; fail "not 9 ratio rows"; }
# Eager PyTorch by default (measured once per shape and flags too); BENCH_EAGER=0 leaves it out.
[[ $(grep -c " ratio eager " "$out/table.txt") == 9 ]] || fail "not 9 eager ratio rows"
grep -q -- "pytorch_fsdp2.py" "$out/qwen2.5-1.5b-pytorch-eager.log" && ! grep -q -- "--compile" \
  "$out/qwen2.5-1.5b-pytorch-eager.log" || fail "the eager run is not eager PyTorch"
grep -q "reused" "$out/qwen2.5-1.5b+wgmma-pytorch-eager.log" || fail "+wgmma measured eager PyTorch again"
BENCH_EAGER=0 BENCH_DRY=1 bash "$src/bench/run_bench.sh" "$bin" "$work/noeager" qwen2.5-1.5b \
  >/dev/null 2>&1 || fail "BENCH_EAGER=0 dry run"
if grep -q "eager" "$work/noeager/table.txt"; then fail "BENCH_EAGER=0 still ran eager"; fi

# +docs: both engines read one version 3 token file of documents; ours masks them apart
# (data.packing = documents), PyTorch with FlexAttention (compiled only: no eager row).
BENCH_DRY=1 bash "$src/bench/run_bench.sh" "$bin" "$work/docs" qwen2.5-1.5b@4096+docs \
  llama3.2-1b@16384x1+docs >"$work/docs.txt" 2>&1 ||
  { cat "$work/docs.txt"; fail "+docs dry run"; }
docs=$work/docs/doc-tokens-qwen2.5-1.5b-4096.bin
python3 -c "import sys; sys.path.insert(0, '$src/bench'); import benchlib; \
benchlib.read_document_tokens('$docs')" || fail "+docs: $docs is not a version 3 token file"
grep -q -- "--data.path=$docs .*--data.packing=documents" \
  "$work/docs/qwen2.5-1.5b@4096+docs-shardtrain.log" || fail "+docs: ours' data or packing"
grep -q -- "pytorch_fsdp2.py .* --documents $docs --compile" \
  "$work/docs/qwen2.5-1.5b@4096+docs-pytorch.log" || fail "+docs: PyTorch's command"
grep -q -- "--documents .*doc-tokens-llama3.2-1b-16384.bin" \
  "$work/docs/llama3.2-1b@16384x1+docs-pytorch.log" || fail "+docs: llama's token file"
if grep -q -- "--documents" "$out/qwen2.5-1.5b-pytorch.log"; then
  fail "the plain run reads documents"
fi
if grep -q "eager" "$work/docs/table.txt"; then fail "+docs ran eager PyTorch"; fi

# The plain shape and qwen2.5-1.5b+MOD, dry, into $work/MOD (no eager rows): ours' command for
# +MOD carries OURS; PyTorch's carries TORCH and is measured apart, or (TORCH empty) the plain
# shape's measurement is reused.
dry_modifier() {
  local mod=$1 ours=$2 torch=$3 dir=$work/$1
  BENCH_EAGER=0 BENCH_DRY=1 bash "$src/bench/run_bench.sh" "$bin" "$dir" qwen2.5-1.5b \
    "qwen2.5-1.5b+$mod" >"$dir.txt" 2>&1 || { cat "$dir.txt"; fail "+$mod dry run"; }
  grep -q -- "$ours" "$dir/qwen2.5-1.5b+$mod-shardtrain.log" || fail "+$mod: ours lacks $ours"
  if [[ -z $torch ]]; then
    grep -q "reused" "$dir/qwen2.5-1.5b+$mod-pytorch.log" || fail "+$mod: PyTorch ran twice"
  else
    # A command in the log: PyTorch measured apart, not the plain run's figures reused.
    grep -q -- "pytorch_fsdp2.py .* $torch --compile" "$dir/qwen2.5-1.5b+$mod-pytorch.log" ||
      fail "+$mod: PyTorch's command lacks $torch (or the plain measurement was reused)"
  fi
}

# +fp8: ours in FP8, PyTorch's bf16 run of the plain shape reused (the same PyTorch settings).
dry_modifier fp8 --train.precision=fp8 ""
if grep -q -- "--train.precision" "$work/fp8/qwen2.5-1.5b-shardtrain.log"; then
  fail "the plain run is fp8"
fi

# Clipping: by default both clip (ours' train.max_grad_norm default, PyTorch's default
# --max-grad-norm 1.0); +lean turns it off on both (the step in backward needs it off), so
# PyTorch is measured apart.
dry_modifier lean --train.max_grad_norm=0 "--max-grad-norm 0"
if grep -q -- "max.grad.norm" "$work/lean/qwen2.5-1.5b-shardtrain.log" \
  "$work/lean/qwen2.5-1.5b-pytorch.log"; then
  fail "the plain run changes a clipping default"
fi

# +accumN: both engines accumulate N micro-batches per optimizer step; PyTorch measured apart.
dry_modifier accum8 --train.grad_accum=8 "--grad-accum 8"
for bad in accum accumx accum0; do
  rc=0
  BENCH_DRY=1 bash "$src/bench/run_bench.sh" "$bin" "$work/bad" "qwen2.5-1.5b+$bad" \
    >"$work/bad.txt" 2>&1 || rc=$?
  [[ $rc == 2 ]] || fail "+$bad exited $rc, not 2"
done

for bad in asidesms asidesms12 asidesms8x; do
  rc=0
  BENCH_DRY=1 bash "$src/bench/run_bench.sh" "$bin" "$work/bad" "qwen2.5-1.5b+$bad" \
    >"$work/bad.txt" 2>&1 || rc=$?
  [[ $rc == 2 ]] || fail "+$bad exited $rc, not 2"
done

rc=0
BENCH_DRY=1 bash "$src/bench/run_bench.sh" "$bin" "$work/bad" qwen2.5-1.5b+bogus \
  >"$work/bad.txt" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a bad modifier exited $rc, not 2"
grep -q "run 'qwen2.5-1.5b+bogus': unknown +bogus" "$work/bad.txt" || fail "the message: $(cat "$work/bad.txt")"

# BENCH_DEADLINE: the first run always starts; a later one that the longest run so far would
# carry past the deadline is skipped and says so in the table (nothing half-measured).
BENCH_EAGER=0 BENCH_DRY=1 BENCH_DEADLINE=$(($(date +%s) - 1)) bash "$src/bench/run_bench.sh" \
  "$bin" "$work/deadline" qwen2.5-1.5b llama3.2-1b >"$work/deadline.txt" 2>&1 ||
  { cat "$work/deadline.txt"; fail "BENCH_DEADLINE dry run"; }
[[ $(grep -cE ' ratio +[0-9-]' "$work/deadline/table.txt") == 1 ]] ||
  { cat "$work/deadline/table.txt"; fail "BENCH_DEADLINE: not one ratio row"; }
grep -qE "^llama3.2-1b .*skipped: the longest run so far took [0-9]+ s" "$work/deadline/table.txt" ||
  fail "BENCH_DEADLINE: the second run is not reported skipped"
[[ ! -e $work/deadline/llama3.2-1b-shardtrain.log ]] || fail "BENCH_DEADLINE: the skipped run ran"
BENCH_EAGER=0 BENCH_DRY=1 BENCH_DEADLINE=$(($(date +%s) + 600)) bash "$src/bench/run_bench.sh" \
  "$bin" "$work/in-time" qwen2.5-1.5b llama3.2-1b >/dev/null 2>&1 || fail "a far deadline"
[[ $(grep -cE ' ratio +[0-9-]' "$work/in-time/table.txt") == 2 ]] || fail "a far deadline skipped a run"

printf '{"loss":2.0}\n{"loss":1.5}\n' >"$work/a.jsonl"
printf '{"loss":2.002}\n{"loss":1.5}\n' >"$work/b.jsonl"
[[ $(python3 "$src/bench/benchlib.py" loss-diff "$work/a.jsonl" "$work/b.jsonl") == 0.001 ]] ||
  fail "loss-diff"
printf '{"loss":2.0}\n' >"$work/c.jsonl"
if python3 "$src/bench/benchlib.py" loss-diff "$work/a.jsonl" "$work/c.jsonl" 2>/dev/null; then
  fail "loss-diff accepted runs of different lengths"
fi
echo "run_bench dry run: specs, +wgmma and +wgmmafwd hooks, shared PyTorch measurements, eager by default, +docs, +fp8, +accumN, bad specs, BENCH_DEADLINE, loss-diff: ok"
