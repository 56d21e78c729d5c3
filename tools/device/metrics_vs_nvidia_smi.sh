#!/usr/bin/env bash
# GPU machine: do the DCGM-named values of shardtrain's /metrics agree with nvidia-smi?
# Builds the shardtrain target with CUDA (carried .devkit; incremental when build-gpu exists),
# starts a GPU training (bench shape, default qwen2.5-1.5b, one process serving its own
# /metrics on a free port), and 8 times, 2 s apart, once the steps run, scrapes /metrics and runs
#   nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw,temperature.gpu,clocks.sm
# at the same moment; prints both side by side (GPU 0), the largest relative differences, the
# families seen, then stops the training (SIGTERM).
# Usage: here, once: tools/device/make_devkit.sh (packs cpp-httplib and its headers too); then
# through the device tool, carrying .devkit: tools/device/metrics_vs_nvidia_smi.sh [shape]
# Logs (build, training, the scrapes) under $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
shape=${1:-qwen2.5-1.5b}
export NCCL_NVLS_ENABLE=0 SHARDTRAIN_MEASURE_COMM_WAIT=1
export LD_LIBRARY_PATH=$root/.devkit/usr/lib/x86_64-linux-gnu:$root/.devkit/usr/lib:${LD_LIBRARY_PATH:-}
cd "$root"
# Always (incremental): a build-gpu left by another script may predate the metrics endpoint.
tools/device/build_on_device.sh build-gpu shardtrain >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
config=bench/shapes/$shape/config.json tokens=$out/tokens-$shape.bin
python3 bench/benchlib.py tokens "$config" "$tokens" 4096 64
build-gpu/shardtrain train --config bench/bench.toml --model.path="bench/shapes/$shape" \
  --data.path="$tokens" --data.seq_len=4096 --train.micro_batch=2 --train.steps=100000 --train.log_every=10 \
  --metrics-port 0 --metrics.address=127.0.0.1 --metrics.gpu_interval=0.5 >"$out/train.log" 2>&1 &
train_pid=$!
url=
for _ in $(seq 1 240); do
  url=$(grep -o 'metrics: http://[^ ]*/metrics' "$out/train.log" | head -1 | cut -d' ' -f2)
  [[ -n $url ]] && grep -q '^step ' "$out/train.log" && break
  kill -0 $train_pid 2>/dev/null || break
  sleep 0.5
done
[[ -z $url ]] && { echo "no metrics URL in the log"; tail -20 "$out/train.log"; kill $train_pid; exit 1; }
grep 'metrics:' "$out/train.log"
python3 - "$url" "$out" <<'PY'
import re, subprocess, sys, time, urllib.request
url, out = sys.argv[1], sys.argv[2]
fields = ["utilization.gpu", "memory.used", "power.draw", "temperature.gpu", "clocks.sm"]
ours = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"]
print("sample | " + " | ".join(f"{f} smi/ours" for f in fields))
worst = {f: 0.0 for f in fields}
for i in range(8):
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
    time.sleep(2)
print("largest relative difference (utilization excluded: both are 1 s windows at different "
      "moments): " + ", ".join(f"{f} {worst[f]:.3f}" for f in worst))
fams = sorted(set(re.findall(r'^# TYPE (\S+)', text, re.M)))
dcgm = [f for f in fams if f.startswith("DCGM_")]
print(f"{len(fams)} families ({len(dcgm)} DCGM, 11 expected): " + " ".join(fams))
for l in text.splitlines():
    if l.startswith(("shardtrain_mfu_ratio", "shardtrain_tokens_per_second", "shardtrain_device_memory_peak_bytes",
                     "shardtrain_exposed_communication_seconds", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_TOTAL_ENERGY")):
        print(l)
PY
kill -TERM $train_pid 2>/dev/null
wait $train_pid; echo "training stopped (exit $?; 143 = SIGTERM as sent)"
grep '^step ' "$out/train.log" | tail -1
