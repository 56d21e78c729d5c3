#!/usr/bin/env python3
"""Generates the demo training data: English-like text from a small probabilistic grammar.

The text has structure a tiny model can learn within minutes: subject-verb-object sentences with
agreement, correct arithmetic facts ("seven plus two is nine."), weekday and month sequences,
counting, fixed facts about things, and question/answer pairs. Output is deterministic for a
given seed.

Tokens are the UTF-8 bytes of the text (ids 0..255; the demo model's vocab_size is 260, with
256 = bos and 257 = eos unused here). They are written in shardtrain's token file format
(docs/token-format.md, src/data/token_file.h), without a loss mask:

    32-byte header: magic b"SHTOKENS", uint32 version = 1, uint32 flags = 0 (bit 0 = has mask),
                    uint64 n_tokens, uint64 reserved = 0           (all little-endian)
    n_tokens little-endian uint32 token ids

The same text is also written as JSONL, one paragraph a line ({"text": ...}), with a byte-level
tokenizer.json (no merges: each UTF-8 byte is one token, ids = byte values, plus the special
tokens <|begin_of_text|> = 256 and <|endoftext|> = 257) into the demo model's directory, so the
demo trains on raw text through the full data pipeline (tokenizer, packing, cache).

Usage: tools/make_demo_data.py [--out examples/demo-data.bin] [--jsonl examples/demo-data.jsonl]
                               [--tokenizer-dir examples/demo-model] [--bytes 600000] [--seed 1]
Python 3 standard library only.
"""

import argparse
import json
import os
import random
import struct
import sys

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
           "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
           "eighteen", "nineteen", "twenty"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december"]
ADJECTIVES = ["small", "big", "old", "young", "happy", "quiet", "red", "green", "clever", "tired"]
# noun: (plural, sound the animal or thing makes or None)
NOUNS = {"cat": "cats", "dog": "dogs", "bird": "birds", "child": "children", "farmer": "farmers",
         "teacher": "teachers", "fox": "foxes", "horse": "horses", "baker": "bakers",
         "sailor": "sailors"}
OBJECTS = ["ball", "apple", "book", "box", "letter", "cake", "map", "stone", "hat", "song"]
# verb: (third person singular present, past)
VERBS = {"see": ("sees", "saw"), "find": ("finds", "found"), "like": ("likes", "liked"),
         "carry": ("carries", "carried"), "want": ("wants", "wanted"), "hold": ("holds", "held"),
         "make": ("makes", "made"), "give away": ("gives away", "gave away")}
PLACES = ["in the garden", "near the river", "at the market", "on the hill", "by the door",
          "under the tree", "in the kitchen", "at school"]
FACTS = ["the sky is blue", "grass is green", "snow is white", "the sun is hot", "ice is cold",
         "fire is hot", "the sea is deep", "a mouse is small", "an elephant is big",
         "lemons are sour", "honey is sweet", "night is dark"]
SOUNDS = {"cat": "meows", "dog": "barks", "bird": "sings", "horse": "neighs", "fox": "yips",
          "cow": "moos", "sheep": "bleats", "duck": "quacks"}


def article(word):
    return "an" if word[0] in "aeiou" else "a"


def noun_phrase(rng):
    noun = rng.choice(sorted(NOUNS))
    if rng.random() < 0.5:
        return "the " + rng.choice(ADJECTIVES) + " " + noun, False
    if rng.random() < 0.5:
        count = rng.randint(2, 9)
        return NUMBERS[count] + " " + NOUNS[noun], True
    return "the " + noun, False


def svo_sentence(rng):
    subject, plural = noun_phrase(rng)
    verb = rng.choice(sorted(VERBS))
    third, past = VERBS[verb]
    tense = rng.random()
    if tense < 0.5:
        verb_form = verb if plural else third
    else:
        verb_form = past
    obj = rng.choice(OBJECTS)
    obj_phrase = "the " + obj if rng.random() < 0.6 else article(obj) + " " + obj
    sentence = f"{subject} {verb_form} {obj_phrase}"
    if rng.random() < 0.4:
        sentence += " " + rng.choice(PLACES)
    return sentence + "."


def arithmetic_sentence(rng):
    op = rng.choice(["plus", "minus", "times"])
    if op == "plus":
        a = rng.randint(0, 10)
        b = rng.randint(0, 10)
        result = a + b
    elif op == "minus":
        a = rng.randint(0, 20)
        b = rng.randint(0, a)
        result = a - b
    else:
        a = rng.randint(0, 5)
        b = rng.randint(0, 4)
        result = a * b
    if rng.random() < 0.3:
        return f"what is {NUMBERS[a]} {op} {NUMBERS[b]}? It is {NUMBERS[result]}."
    return f"{NUMBERS[a]} {op} {NUMBERS[b]} is {NUMBERS[result]}."


def sequence_sentence(rng, items, name):
    kind = rng.random()
    start = rng.randrange(len(items))
    if kind < 0.4:
        return f"after {items[start]} comes {items[(start + 1) % len(items)]}."
    if kind < 0.6:
        return f"before {items[start]} comes {items[start - 1]}."
    length = rng.randint(3, 5)
    run = [items[(start + i) % len(items)] for i in range(length)]
    return f"the {name} go {', '.join(run[:-1])} and {run[-1]}."


def counting_sentence(rng):
    start = rng.randint(0, 14)
    length = rng.randint(3, 6)
    return "we count " + ", ".join(NUMBERS[start:start + length]) + "."


def fact_sentence(rng):
    if rng.random() < 0.5:
        return rng.choice(FACTS) + "."
    animal = rng.choice(sorted(SOUNDS))
    return f"{article(animal)} {animal} {SOUNDS[animal]}."


def sentence(rng):
    roll = rng.random()
    if roll < 0.35:
        return svo_sentence(rng)
    if roll < 0.55:
        return arithmetic_sentence(rng)
    if roll < 0.65:
        return sequence_sentence(rng, WEEKDAYS, "days")
    if roll < 0.72:
        return sequence_sentence(rng, MONTHS, "months")
    if roll < 0.82:
        return counting_sentence(rng)
    return fact_sentence(rng)


def generate_text(n_bytes, seed):
    rng = random.Random(seed)
    paragraphs = []
    total = 0
    while total < n_bytes:
        sentences = [sentence(rng) for _ in range(rng.randint(3, 6))]
        paragraph = " ".join(s[0].upper() + s[1:] for s in sentences) + "\n"
        paragraphs.append(paragraph)
        total += len(paragraph)
    return "".join(paragraphs).encode("utf-8")[:n_bytes]


def byte_to_unicode():
    """GPT-2's byte-level map: printable bytes map to themselves, the rest to U+0100 onwards."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(
        range(0xAE, 0xFF + 1))
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def write_atomically(path, text):
    temp_path = f"{path}.tmp.{os.getpid()}"
    with open(temp_path, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temp_path, path)


def write_tokenizer(directory):
    """A byte-level BPE tokenizer.json without merges (ids = byte values) and its config."""
    specials = [(256, "<|begin_of_text|>"), (257, "<|endoftext|>")]
    vocab = {char: byte for byte, char in byte_to_unicode().items()}
    tokenizer = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, c in specials],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    write_atomically(os.path.join(directory, "tokenizer.json"),
                     json.dumps(tokenizer, ensure_ascii=False, indent=1) + "\n")
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|endoftext|>", "pad_token": None,
              "model_max_length": 512}
    write_atomically(os.path.join(directory, "tokenizer_config.json"),
                     json.dumps(config, indent=1) + "\n")


def write_token_file(path, token_ids):
    """Writes token_ids (ints < 2**32) without a loss mask, atomically (temp file + rename)."""
    header = struct.pack("<8sIIQQ", b"SHTOKENS", 1, 0, len(token_ids), 0)
    temp_path = f"{path}.tmp.{os.getpid()}"
    with open(temp_path, "wb") as out:
        out.write(header)
        out.write(struct.pack(f"<{len(token_ids)}I", *token_ids))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp_path, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                      "examples", "demo-data.bin"))
    parser.add_argument("--jsonl", default=os.path.join(os.path.dirname(__file__), "..",
                                                        "examples", "demo-data.jsonl"))
    parser.add_argument("--tokenizer-dir", default=os.path.join(os.path.dirname(__file__), "..",
                                                                "examples", "demo-model"))
    parser.add_argument("--bytes", type=int, default=600_000, help="bytes (= tokens) of text")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--print", action="store_true", help="print the text instead of writing")
    args = parser.parse_args()
    if args.bytes <= 0:
        sys.exit("make_demo_data.py: --bytes must be > 0")
    text = generate_text(args.bytes, args.seed)
    if args.print:
        sys.stdout.write(text.decode("utf-8"))
        return
    write_token_file(args.out, list(text))
    print(f"wrote {len(text)} tokens to {os.path.normpath(args.out)}")
    lines = [json.dumps({"text": p}) for p in text.decode("utf-8", "ignore").split("\n") if p]
    write_atomically(args.jsonl, "\n".join(lines) + "\n")
    print(f"wrote {len(lines)} paragraphs to {os.path.normpath(args.jsonl)}")
    write_tokenizer(args.tokenizer_dir)
    print(f"wrote tokenizer.json and tokenizer_config.json to {os.path.normpath(args.tokenizer_dir)}")


if __name__ == "__main__":
    main()
