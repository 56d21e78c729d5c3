#!/usr/bin/env bash
# Re-renders deploy/examples/*.yaml with the shardtrain binary given (default build/shardtrain).
# Each example's first line is the command that renders it ("# shardtrain k8s ..."); the rest
# is that command's output. src/cli/k8s_cli_test.cpp checks the files still match.
#   tools/render_k8s_examples.sh [path/to/shardtrain]
set -euo pipefail
binary=${1:-build/shardtrain}
cd "$(dirname "$0")/.."
for example in deploy/examples/*.yaml; do
  header=$(head -n 1 "$example")
  [[ $header == "# shardtrain k8s "* ]] || { echo "$example: first line is not '# shardtrain k8s ...'" >&2; exit 2; }
  read -r -a args <<< "${header#\# shardtrain }"
  { echo "$header"; "$binary" "${args[@]}"; } > "$example.tmp"
  mv "$example.tmp" "$example"
  echo "rendered $example"
done
