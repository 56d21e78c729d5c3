#!/usr/bin/env python3
"""Chat-template parity goldens: renders tests/chat_template/conversations.jsonl with every
template under tests/chat_template/templates/NAME/tokenizer_config.json, the way transformers'
tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=G,
**chat_template_kwargs) does, for G in (False, True).

Renderer: transformers itself when it is importable (a PreTrainedTokenizerFast carrying the
template and the special tokens of the config; the rendered text does not depend on the vocab),
else Debian's python3-jinja2 configured as transformers configures it (jinja_env.py).

  make_template_goldens.py                 write tests/chat_template/goldens/NAME.jsonl
  make_template_goldens.py --check         compare against the committed goldens instead
  make_template_goldens.py --templates DIR --conversations FILE --goldens DIR

Golden lines: {"conversation": I, "add_generation_prompt": G, "text": "..."} or
{"conversation": I, "add_generation_prompt": G, "error": "message"} when the template refuses
the conversation (raise_exception). Prints one line: "N conversations x M templates (x2
generation-prompt settings), K differ, renderer R".
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SPECIAL_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token"]


def token_string(value):
    if isinstance(value, dict):
        return value.get("content")
    return value


def load_config(path):
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    specials = {}
    for key in SPECIAL_KEYS:
        token = token_string(config.get(key))
        if isinstance(token, str):
            specials[key] = token
    return config["chat_template"], specials


class TransformersRenderer:
    name = "transformers"

    def __init__(self, template, specials):
        import tokenizers
        from transformers import PreTrainedTokenizerFast
        vocab = {"<unk>": 0}
        for token in specials.values():
            vocab.setdefault(token, len(vocab))
        backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=template,
                                                 **specials)

    def render(self, record, generation_prompt):
        return self.tokenizer.apply_chat_template(
            record["messages"], tools=record.get("tools"), tokenize=False,
            add_generation_prompt=generation_prompt, **record.get("chat_template_kwargs", {}))


class Jinja2Renderer:
    name = "jinja2"

    def __init__(self, template, specials):
        sys.path.insert(0, HERE)
        from jinja_env import make_environment
        env = make_environment()
        if isinstance(template, list):
            self.templates = {t["name"]: env.from_string(t["template"]) for t in template}
        else:
            self.templates = {"default": env.from_string(template)}
        self.specials = specials

    def render(self, record, generation_prompt):
        tools = record.get("tools")
        name = "tool_use" if tools is not None and "tool_use" in self.templates else "default"
        variables = dict(self.specials)
        variables.update(record.get("chat_template_kwargs", {}))
        return self.templates[name].render(messages=record["messages"], tools=tools,
                                           documents=None,
                                           add_generation_prompt=generation_prompt, **variables)


def pick_renderer():
    try:
        import transformers  # noqa: F401
        return TransformersRenderer
    except ImportError:
        return Jinja2Renderer


def render_all(renderer_class, config_path, conversations):
    template, specials = load_config(config_path)
    renderer = renderer_class(template, specials)
    lines = []
    for index, record in enumerate(conversations):
        for generation_prompt in (False, True):
            entry = {"conversation": index, "add_generation_prompt": generation_prompt}
            try:
                entry["text"] = renderer.render(record, generation_prompt)
            except Exception as error:  # noqa: BLE001 - a template refusing is a golden too
                entry["error"] = str(error)
            lines.append(entry)
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--templates", default=os.path.join(ROOT, "tests/chat_template/templates"))
    parser.add_argument("--conversations",
                        default=os.path.join(ROOT, "tests/chat_template/conversations.jsonl"))
    parser.add_argument("--goldens", default=os.path.join(ROOT, "tests/chat_template/goldens"))
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed goldens; exit 1 when any differ")
    args = parser.parse_args()
    with open(args.conversations, encoding="utf-8") as f:
        conversations = [json.loads(line) for line in f if line.strip()]
    renderer_class = pick_renderer()
    names = sorted(os.listdir(args.templates))
    differ = 0
    os.makedirs(args.goldens, exist_ok=True)
    for name in names:
        lines = render_all(renderer_class,
                           os.path.join(args.templates, name, "tokenizer_config.json"),
                           conversations)
        golden_path = os.path.join(args.goldens, name + ".jsonl")
        if args.check:
            with open(golden_path, encoding="utf-8") as f:
                committed = [json.loads(line) for line in f if line.strip()]
            for mine, theirs in zip(lines, committed):
                same = mine.get("text") == theirs.get("text") and ("error" in mine) == (
                    "error" in theirs)
                if not same:
                    differ += 1
                    print(f"DIFF {name} conversation {mine['conversation']} "
                          f"add_generation_prompt={mine['add_generation_prompt']}: "
                          f"{renderer_class.name}={json.dumps(mine.get('text', mine.get('error')))[:300]} "
                          f"golden={json.dumps(theirs.get('text', theirs.get('error')))[:300]}")
            differ += abs(len(lines) - len(committed))
            continue
        with open(golden_path + ".partial", "w", encoding="utf-8") as f:
            for entry in lines:
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        os.replace(golden_path + ".partial", golden_path)
    print(f"{len(conversations)} conversations x {len(names)} templates (x2 generation-prompt "
          f"settings), {differ} differ, renderer {renderer_class.name}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
