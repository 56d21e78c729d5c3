# Sourced by bench/run_bench.sh.
# sample_peak_mib LOG COMMAND...: runs COMMAND (stdout and stderr to LOG) while nvidia-smi samples
# memory.used every 250 ms into LOG.mem; prints the largest sample (MiB; empty when none came)
# and returns COMMAND's exit status (after printing the end of LOG to stderr when it failed).
# With SAMPLE_PEAK_DRY set: writes the command line to LOG, prints 0, runs nothing.
sample_peak_mib() {
  local log=$1
  shift
  if [[ -n ${SAMPLE_PEAK_DRY:-} ]]; then
    echo "$*" >"$log"
    echo 0
    return 0
  fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 >"$log.mem" &
  local sampler=$! rc=0
  "$@" >"$log" 2>&1 || rc=$?
  kill $sampler
  wait $sampler 2>/dev/null
  if ((rc != 0)); then
    echo "$(basename "$log"): exit status $rc; its end:" >&2
    tail -5 "$log" >&2
  fi
  sort -n "$log.mem" | tail -1
  return $rc
}
