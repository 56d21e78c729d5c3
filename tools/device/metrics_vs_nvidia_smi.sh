#!/usr/bin/env bash
# GPU machine: do the DCGM-named values of shardtrain's /metrics agree with nvidia-smi?
# Builds the shardtrain target with CUDA (carried .devkit; incremental when build-gpu exists),
# starts a GPU training (bench shape, default qwen2.5-1.5b, one process serving its own
# /metrics on a free port), and, once the steps run, 6 times 1.5 s apart scrapes /metrics and
# runs, at the same moment,
#   nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw,temperature.gpu,clocks.sm
# and prints both side by side (GPU 0), the largest relative differences and the families
# seen; stops the training (SIGTERM); then checks that --metrics.gpu=false leaves the DCGM
# families out although NVML is there. At most 12 lines of output (a session shows the
# last 14); every training it started is stopped on exit, a timeout's SIGTERM included.
# Usage: here, once: tools/device/make_devkit.sh (packs cpp-httplib and its headers too); then
# through the device tool, carrying .devkit: tools/device/metrics_vs_nvidia_smi.sh [shape]
# Logs (build, the trainings, the scrapes) under $OUT.
set -uo pipefail
source "$(dirname "$0")/common.sh"  # .devkit libraries, NCCL_NVLS_ENABLE=0, $out, cd root
shape=${1:-qwen2.5-1.5b}
export SHARDTRAIN_MEASURE_COMM_WAIT=1
pids=()
stop_trainings() { for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done; }
trap stop_trainings EXIT
trap 'exit 143' TERM INT

# Prints the /metrics URL that training `pid` logged in `log` ("" if it ended or 120 s passed
# first); with `need_step` 1 only once it has also logged a step.
metrics_url() {  # log pid need_step
  local url=
  for _ in $(seq 1 240); do
    url=$(grep -o 'metrics: http://[^ ]*/metrics' "$1" | head -1 | cut -d' ' -f2)
    [[ -n $url ]] && { [[ $3 == 0 ]] || grep -q '^step ' "$1"; } && break
    kill -0 "$2" 2>/dev/null || break
    sleep 0.5
  done
  echo "$url"
}

# A training on GPU 0 with metrics on a free port; extra config overrides in "$@".
start_training() {  # log override...
  local log=$1
  shift
  build-gpu/shardtrain train --config bench/bench.toml --model.path="bench/shapes/$shape" \
    --data.path="$tokens" --data.seq_len=4096 --train.micro_batch=2 --train.steps=100000 \
    --train.log_every=10 --metrics-port 0 --metrics.address=127.0.0.1 "$@" >"$log" 2>&1 &
  pids+=($!)
}

# Always (incremental): a build-gpu left by another script may predate the metrics endpoint.
tools/device/build_on_device.sh build-gpu shardtrain >"$out/build.log" 2>&1 ||
  { tail -8 "$out/build.log"; exit 1; }
config=bench/shapes/$shape/config.json tokens=$out/tokens-$shape.bin
python3 bench/benchlib.py tokens "$config" "$tokens" 4096 64 >"$out/tokens.log" 2>&1

start_training "$out/train.log" --metrics.gpu_interval=0.5
train_pid=${pids[-1]}
url=$(metrics_url "$out/train.log" "$train_pid" 1)
[[ -z $url ]] && { echo "no metrics URL or no step in the log"; tail -5 "$out/train.log"; exit 1; }
python3 - "$url" "$out" <<'PY'
import re, subprocess, sys, time, urllib.request
url, out = sys.argv[1], sys.argv[2]
fields = ["utilization.gpu", "memory.used", "power.draw", "temperature.gpu", "clocks.sm"]
ours = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"]
print("sample | " + " | ".join(f"{f} smi/ours" for f in fields))
worst = {f: 0.0 for f in fields}
for i in range(6):
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    smi = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=" + ",".join(fields),
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    open(f"{out}/scrape-{i}.txt", "w").write(text)
    smi_values = [float(v) for v in smi.strip().split(",")]
    row = []
    for f, name, s in zip(fields, ours, smi_values):
        m = re.search(r'^' + name + r'\{gpu="0"[^}]*\} (\S+)$', text, re.M)
        v = float(m.group(1)) if m else float("nan")
        row.append(f"{s:g}/{v:g}")
        if f != "utilization.gpu" and s:
            # A family missing from the scrape (NaN) is the worst disagreement there is.
            diff = abs(v - s) / abs(s) if v == v else float("inf")
            worst[f] = max(worst[f], diff)
    print(f"{i} | " + " | ".join(row), flush=True)
    time.sleep(1.5)
print("largest relative difference (utilization excluded: both are 1 s windows at different "
      "moments): " + ", ".join(f"{f} {worst[f]:.3f}" for f in worst))
fams = set(re.findall(r'^# TYPE (\S+)', text, re.M))
dcgm = sorted(f for f in fams if f.startswith("DCGM_"))
def value(name):
    m = re.search(r'^' + name + r'\{[^}]*\} (\S+)$', text, re.M)
    return m.group(1) if m else "absent"
print(f"families: {len(fams) - len(dcgm)} shardtrain_ (20 expected with one rank: no exposed communication), {len(dcgm)} DCGM (11 "
      f"expected); rank 0: MFU {value('shardtrain_mfu_ratio')}, tokens/s "
      f"{value('shardtrain_tokens_per_second')}, XID {value('DCGM_FI_DEV_XID_ERRORS')}, energy mJ "
      f"{value('DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION')}")
PY
kill -TERM "$train_pid" 2>/dev/null
wait "$train_pid"
echo "training stopped (exit $?; 143 = the SIGTERM sent); last: $(grep '^step ' "$out/train.log" | tail -1 | cut -c1-90)"

# metrics.gpu = false (a node where dcgm-exporter runs): NVML present, yet no DCGM families
# (the GPU sampler would have added them before the first step).
start_training "$out/train-gpu-off.log" --metrics.gpu=false
off_pid=${pids[-1]}
url=$(metrics_url "$out/train-gpu-off.log" "$off_pid" 0)
if [[ -n $url ]]; then
  python3 -c "import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())" \
    "$url" >"$out/scrape-gpu-off.txt" 2>&1
  echo "metrics.gpu=false: $(grep -c '^# TYPE DCGM_' "$out/scrape-gpu-off.txt") DCGM families" \
    "(0 expected); log: $(grep -o 'GPU metrics off[^;]*' "$out/train-gpu-off.log" | head -1)"
else
  echo "metrics.gpu=false: no metrics URL"; tail -3 "$out/train-gpu-off.log"
fi
kill -TERM "$off_pid" 2>/dev/null
wait "$off_pid" 2>/dev/null
exit 0
