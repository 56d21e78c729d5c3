#!/usr/bin/env python3
"""Writes the golden token ids the C++ tokenizer tests compare against.

Run on a machine with the Python `tokenizers` package (pip install tokenizers):

    tools/tokenizer/fetch_tokenizers.sh tests/tokenizer/files
    python3 tools/tokenizer/make_golden.py tests/tokenizer/files

For each NAME in {qwen3, llama3, llama2} whose DIR/NAME/tokenizer.json exists, it encodes every
line of tests/tokenizer/texts.jsonl ({"text": ...}) with Tokenizer.from_file and writes
tests/tokenizer/golden_NAME.jsonl, one line per text:
    {"text_index": i, "ids": [...], "ids_special": [...]}
"ids" is encode(text, add_special_tokens=False), "ids_special" add_special_tokens=True. A header
line {"tokenizers_version": ..., "tokenizer_json_sha256": ...} records what produced the file.
"""
import argparse
import hashlib
import json
import pathlib
import sys

NAMES = ("qwen3", "llama3", "llama2")


def main() -> int:
    repo = pathlib.Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokenizer_dir", type=pathlib.Path,
                        help="directory holding NAME/tokenizer.json (fetch_tokenizers.sh output)")
    parser.add_argument("--texts", type=pathlib.Path,
                        default=repo / "tests" / "tokenizer" / "texts.jsonl")
    parser.add_argument("--out-dir", type=pathlib.Path, default=repo / "tests" / "tokenizer")
    args = parser.parse_args()

    try:
        import tokenizers
    except ImportError:
        print("make_golden.py: the Python `tokenizers` package is required "
              "(pip install tokenizers)", file=sys.stderr)
        return 2

    with args.texts.open(encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]

    written = 0
    for name in NAMES:
        path = args.tokenizer_dir / name / "tokenizer.json"
        if not path.is_file():
            print(f"make_golden.py: skipping {name}: {path} not found "
                  "(run tools/tokenizer/fetch_tokenizers.sh)", file=sys.stderr)
            continue
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
        out_path = args.out_dir / f"golden_{name}.jsonl"
        with out_path.open("w", encoding="utf-8") as out:
            header = {
                "tokenizers_version": tokenizers.__version__,
                "tokenizer_json_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "texts": len(texts),
            }
            out.write(json.dumps(header) + "\n")
            for index, text in enumerate(texts):
                ids = tokenizer.encode(text, add_special_tokens=False).ids
                ids_special = tokenizer.encode(text, add_special_tokens=True).ids
                out.write(json.dumps({"text_index": index, "ids": ids,
                                      "ids_special": ids_special}) + "\n")
        print(f"make_golden.py: wrote {out_path} ({len(texts)} texts, tokenizers "
              f"{tokenizers.__version__})")
        written += 1
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
