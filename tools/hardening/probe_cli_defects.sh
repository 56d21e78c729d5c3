#!/usr/bin/env bash
# The CLI-reachable bad inputs of the hardening issue (15), run against one shardtrain binary:
# per input one row, its exit code and the last non-log line it printed, then whether a user's
# file in train.output_dir survived. A fixed binary answers each with exit 2 and a one-line error
# naming the file and key (the output-dir row trains, rc 0, and keeps NOTES.txt); run it on an
# old build to see the defects (session 8: ef36d63 crashed with rc 134 on 7 of them, accepted
# bos_token_id beyond the vocabulary, printed raw nlohmann text, and deleted NOTES.txt).
# WORK_DIR must not exist, or be one this script made before (it is then made anew).
# Usage: tools/hardening/probe_cli_defects.sh BINARY SOURCE_DIR WORK_DIR
bin=$1 src=$2 work=$3
if [[ -e $work && ! -f $work/.probe_cli_defects ]]; then
  echo "probe_cli_defects: $work exists and is not a probe dir; name a new one" >&2
  exit 2
fi
rm -rf "$work"; mkdir -p "$work"; touch "$work/.probe_cli_defects"; cd "$work"
cp -r "$src/examples" ex
base=(train --config ex/demo.toml --model.path=MODEL --steps 2 --train.device=cpu --data.cache_dir=cache --train.output_dir=out --optim.warmup_steps=0 --data.path=ex/demo-data.jsonl)
mkmodel() {  # name, python expression editing cfg (config.json) and tok (tokenizer.json) dicts
  rm -rf "$1"; cp -r ex/demo-model "$1"
  python3 - "$1" "$2" <<'PY'
import json,sys
d=sys.argv[1]; cfg=json.load(open(d+'/config.json')); tok=json.load(open(d+'/tokenizer.json'))
exec(sys.argv[2])
json.dump(cfg,open(d+'/config.json','w')); json.dump(tok,open(d+'/tokenizer.json','w'))
PY
}
run() {  # label, model dir, extra args...
  local label=$1 model=$2; shift 2
  local args=("${base[@]/MODEL/$model}")
  out=$(timeout 60 "$bin" "${args[@]}" "$@" 2>&1); rc=$?
  printf '%-28s rc=%-3s %s\n' "$label" "$rc" "$(echo "$out" | grep -v '^I ' | tail -1 | cut -c1-150)"
}
run "seq_len 1e12" ex/demo-model --data.seq_len=1000000000000
mkmodel m_h40 "cfg['hidden_size']=2**40"; run "hidden_size 2^40" m_h40
mkmodel m_h62 "cfg['hidden_size']=2**62"; run "hidden_size 2^62" m_h62
# The 8 GB address-space cap only for this probe (a subshell: `ulimit -v` cannot be raised again).
mkmodel m_layers "cfg['num_hidden_layers']=10**9"; (ulimit -v 8000000; run "num_hidden_layers 1e9" m_layers)
mkmodel m_drop "tok['model']['dropout']='high'"; run "tokenizer dropout type" m_drop
mkmodel m_vocab "tok['model']['vocab']['zz_big']=2**31-1"; run "vocab id 2^31-1" m_vocab
mkmodel m_vocab9 "tok['model']['vocab']['zz_big']=10**9"; run "vocab id 1e9" m_vocab9
mkmodel m_bos "cfg['bos_token_id']=10**6"; run "bos_token_id > vocab" m_bos
rm -rf m_trunc; cp -r ex/demo-model m_trunc; head -c 300 ex/demo-model/tokenizer.json > m_trunc/tokenizer.json; run "truncated tokenizer.json" m_trunc
mkdir -p out && echo "my notes" > out/NOTES.txt
run "output_dir with user file" ex/demo-model
[[ -f out/NOTES.txt ]] && echo "output_dir: NOTES.txt kept" || echo "output_dir: NOTES.txt DELETED"
