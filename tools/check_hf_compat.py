#!/usr/bin/env python3
"""Checks that transformers loads a checkpoint shardtrain saved and computes the same loss.

Usage: python3 tools/check_hf_compat.py MODEL_DIR TOKEN_FILE SEQ_LEN N_SEQUENCES [EXPECTED_LOSS]
Reads the first N_SEQUENCES windows of SEQ_LEN tokens from a shardtrain token file (format in
docs/token-format.md), computes transformers' mean causal-LM loss in fp32 (labels = input ids)
and prints {"loss": L, "tokens": T}. With EXPECTED_LOSS (from `shardtrain eval` on the same
windows) it exits 1 unless the two agree within 1e-5 relative.
"""
import json
import struct
import sys

import numpy as np
import torch
import transformers


def read_windows(path, seq_len, count):
    with open(path, "rb") as f:
        header = f.read(32)
        magic, version, flags, n_tokens, _ = struct.unpack("<8sIIQQ", header)
        assert magic == b"SHTOKENS" and version == 1, "not a shardtrain token file"
        ids = np.frombuffer(f.read(4 * n_tokens), dtype="<u4")
    windows = ids[: seq_len * count].reshape(count, seq_len).astype(np.int64)
    return torch.from_numpy(windows)


def main():
    model_dir, token_file, seq_len, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    input_ids = read_windows(token_file, seq_len, count)
    with torch.no_grad():
        loss = model(input_ids=input_ids, labels=input_ids).loss.item()
    tokens = count * (seq_len - 1)
    print(json.dumps({"loss": loss, "tokens": tokens, "transformers": transformers.__version__}))
    if len(sys.argv) > 5:
        expected = float(sys.argv[5])
        rel = abs(loss - expected) / abs(expected)
        print(f"shardtrain {expected:.7f} vs transformers {loss:.7f}: relative difference {rel:.2e}")
        sys.exit(0 if rel <= 1e-5 else 1)


if __name__ == "__main__":
    main()
