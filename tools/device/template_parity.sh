#!/usr/bin/env bash
# Chat-template parity against real transformers (the GPU machine has it): renders
# tests/chat_template/conversations.jsonl with every template in tests/chat_template/templates
# through transformers' apply_chat_template(tokenize=False) and compares with the committed
# goldens (written on a machine without transformers by python3-jinja2 configured as
# transformers configures it). Needs python3 with transformers + tokenizers; no GPU, no build.
#
# Usage: tools/device/template_parity.sh
# Prints one line "N conversations x M templates (x2 generation-prompt settings), K differ,
# renderer transformers" (plus one DIFF line per difference) and the transformers version;
# writes the full report and regenerated goldens under $OUT/template_parity/ (when $OUT is set),
# so differing goldens can be inspected and, if transformers is right, committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp}/template_parity
mkdir -p "$out"
python3 -c 'import transformers; print("transformers", transformers.__version__)' | tee "$out/version.txt"
status=0
python3 "$root/tools/tokenizer/make_template_goldens.py" --check | tee "$out/report.txt" || status=$?
python3 "$root/tools/tokenizer/make_template_goldens.py" --goldens "$out/goldens" >/dev/null
exit "$status"
