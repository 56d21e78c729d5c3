#!/usr/bin/env bash
# `shardtrain doctor` for real on the GPU machine (after build_on_device.sh):
#   tools/device/doctor_gpu.sh [BUILD_DIR]
# Runs, with logs under $OUT (or a temp dir):
#   1. doctor                          - node checks (expect: gpus/cuda_driver/nccl PASS)
#   2. doctor --json                   - the same as JSON (checked to parse)
#   3. doctor --nccl-test              - all-reduce / all-gather over every local GPU (one worker
#                                        per GPU through the built-in launcher), NCCL's transport
#   4. launch --standalone --nproc-per-node <GPUs> -- doctor --nccl-test   (the launcher path)
#   5. doctor --nccl-test --expect-transport efa  - must FAIL (no EFA here): the fall-back caught
# Prints each run's exit code and its check lines; exits 1 if 1-4 crash (exit code > 1) or 5
# does not fail. NCCL_NVLS_ENABLE=0 is exported (keep it on shared machines).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
binary=$build/shardtrain
[[ -x $binary ]] || { echo "no $binary; HINT: run tools/device/build_on_device.sh first" >&2; exit 2; }
source "$root/tools/device/common.sh"  # .devkit libraries, NCCL_NVLS_ENABLE=0
logs=${OUT:-$(mktemp -d /tmp/shardtrain_doctor_XXXXXX)}
mkdir -p "$logs"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
status=0

step() {  # name, expected ("ok" = exit 0 or 1, "fail" = exit 1), args...
  local name=$1 expected=$2
  shift 2
  "$binary" "$@" >"$logs/$name.log" 2>&1
  local code=$?
  echo "== $name (exit $code): shardtrain $*"
  grep -E '^(PASS|WARN|FAIL)|HINT|nccl test|^ *[0-9]+ |all ranks|slowest' "$logs/$name.log" | head -60
  if [[ $expected == ok && $code -gt 1 ]] || [[ $expected == fail && $code -ne 1 ]]; then
    echo "!! $name: unexpected exit $code (log: $logs/$name.log)"
    tail -20 "$logs/$name.log"
    status=1
  fi
}

echo "doctor on $(hostname): $gpus GPU(s), logs in $logs"
step node ok doctor --checkpoint-dir /tmp
step json ok doctor --json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("json: ok =", j["ok"], "checks =", len(j["checks"]))' \
  "$logs/json.log" || { echo "!! json did not parse"; status=1; }
step nccl ok doctor --nccl-test
step launched ok launch --standalone --nproc-per-node "$gpus" -- doctor --nccl-test
step expect_efa fail doctor --nccl-test --expect-transport efa
exit $status
