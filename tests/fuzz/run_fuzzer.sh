#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time (ctest: one entry per fuzzer, label fuzz).
#   run_fuzzer.sh FUZZER_BINARY SEED_CORPUS_DIR SECONDS WORK_DIR
# New inputs go to WORK_DIR/corpus (the committed seeds are read, never written); a crash,
# leak, timeout or sanitizer report fails the test and leaves the input in WORK_DIR
# (crash-*, leak-*, timeout-*): add it to the seeds and a regression test for the fix.
# Exits 77 (ctest: skipped) when the fuzzer was not built.
set -uo pipefail
fuzzer=$1 seeds=$2 seconds=$3 work=$4
if [[ ! -x $fuzzer ]]; then
  echo "run_fuzzer: SKIPPED: $fuzzer is not built (configure with clang present, or" \
    "-DSHARDTRAIN_FUZZ=ON, and build all targets)"
  exit 77
fi
mkdir -p "$work/corpus"
# Absolute paths: the fuzzer runs in $work (where it leaves crash-* files).
fuzzer=$(realpath "$fuzzer") seeds=$(realpath "$seeds") work=$(realpath "$work")
cd "$work" || exit 1
# -rss_limit_mb bounds memory per input (an unbounded allocation is a finding);
# -timeout flags any input that takes more than 10 s. Every finding exits 1: libFuzzer's own
# default for a crash is 77, which ctest would report as this test's skip code.
exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  -error_exitcode=1 -timeout_exitcode=1 "$work/corpus" "$seeds"
