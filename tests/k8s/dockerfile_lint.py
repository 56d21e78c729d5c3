#!/usr/bin/env python3
"""Checks deploy/Dockerfile for the pitfalls that fail an image build or a cluster's first run
(no Docker engine or hadolint here; Debian does not package hadolint):

  - an `apt-get install` that pins NCCL (nvidia/cuda images ship it held) without
    --allow-change-held-packages; without -y or --no-install-recommends; without
    `apt-get update` before it in the same RUN; or leaving /var/lib/apt/lists behind;
  - a ${VAR} that names an ARG declared elsewhere but not in the stage using it (global ARGs
    are not visible inside a stage: it expands to "");
  - FROM without a tag or with :latest; COPY --from a stage not defined above;
  - pip install without --no-cache-dir; curl without -f (an HTTP error page would be saved);
  - a build stage that lacks a package scripts/setup.sh lists for building (CMake would fail);
  - a `ray` stage without wget (KubeRay >= 1.1's exec probes run it).

    dockerfile_lint.py DOCKERFILE SETUP_SH          prints each problem, exits 1 if any
    dockerfile_lint.py --apt-steps DOCKERFILE       prints {stage: [[packages of one RUN]...]}
"""

import json
import re
import sys


def instructions(text):
    """(line number, INSTRUCTION, argument text) with continuations joined."""
    out, pending, start = [], "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        pending += stripped
        word, _, rest = pending.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        pending = ""
    return out


def stages(text):
    """[(name, base, [(line, INSTRUCTION, args)])]; instructions before the first FROM as ''."""
    result = [("", "", [])]
    for number, word, rest in instructions(text):
        if word == "FROM":
            match = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            result.append((match.group(2) or "", match.group(1), []))
        result[-1][2].append((number, word, rest))
    return result


def apt_packages(command):
    """Package words of each `apt-get install` in a RUN command (flags and paths left out)."""
    lists = []
    for part in re.split(r"&&|;", command):
        words = part.split()
        if "apt-get" in words and "install" in words:
            after = words[words.index("install") + 1:]
            lists.append([w for w in after if not w.startswith("-") and "/" not in w])
    return lists


def setup_build_packages(setup_text):
    match = re.search(r"^packages=\((.*?)^\)", setup_text, re.MULTILINE | re.DOTALL)
    words = []
    for line in match.group(1).splitlines():
        words += line.split("#")[0].split()
    return words


def lint(text, setup_text):
    problems = []
    all_stages = stages(text)
    global_args = {re.split(r"[=\s]", rest)[0] for _, word, rest in all_stages[0][2] if word == "ARG"}
    declared_anywhere = set(global_args)
    for _, _, body in all_stages:
        declared_anywhere |= {re.split(r"[=\s]", rest)[0] for _, w, rest in body if w == "ARG"}
    names = [""]
    stage_args = {"": set()}
    for name, base, body in all_stages[1:]:
        line = body[0][0]
        for var in re.findall(r"\$\{?(\w+)", base):
            if var not in global_args:
                problems.append(f"line {line}: FROM uses ${var}, which no ARG before the first "
                                "FROM declares")
        image = re.sub(r"\$\{?\w+\}?", "X", base)
        if base not in names and (":" not in image.split("/")[-1] or image.endswith(":latest")):
            problems.append(f"line {line}: FROM {base}: pin a tag (not :latest)")
        visible = set(stage_args.get(base, set()))
        for number, word, rest in body[1:]:
            if word == "ARG":
                visible.add(re.split(r"[=\s]", rest)[0])
                continue
            if word == "ENV":
                visible |= set(re.findall(r"(\w+)=", rest))
            for var in re.findall(r"\$\{(\w+)", rest):
                if var in declared_anywhere and var not in visible:
                    problems.append(f"line {number}: ${{{var}}} is an ARG of another scope, empty "
                                    f"here: declare ARG {var} in stage '{name}'")
            if word == "COPY":
                source = re.search(r"--from=(\S+)", rest)
                if source and source.group(1) not in names:
                    problems.append(f"line {number}: COPY --from={source.group(1)}: no such stage "
                                    "above")
            if word != "RUN":
                continue
            if "pip install" in rest or "pip3 install" in rest:
                if "--no-cache-dir" not in rest:
                    problems.append(f"line {number}: pip install without --no-cache-dir")
            for part in re.split(r"&&|;|\|\|", rest):
                words = part.split()
                if words[:1] == ["curl"] and not any(
                        w.startswith("-") and not w.startswith("--") and "f" in w
                        or w == "--fail" for w in words):
                    problems.append(f"line {number}: curl without -f saves an HTTP error page")
            if "apt-get install" in rest:
                if not re.search(r"apt-get update.*apt-get install", rest):
                    problems.append(f"line {number}: apt-get install without apt-get update "
                                    "before it in the same RUN (a cached layer's lists are stale)")
                for flag in ("-y", "--no-install-recommends"):
                    if flag not in rest.split():
                        problems.append(f"line {number}: apt-get install without {flag}")
                if not re.search(r"rm -rf[^&;]*/var/lib/apt/lists", rest):
                    problems.append(f"line {number}: apt lists left in the layer: end with "
                                    "rm -rf /var/lib/apt/lists/*")
                if re.search(r"\blibnccl[\w-]*=", rest) and \
                        "--allow-change-held-packages" not in rest:
                    problems.append(f"line {number}: NCCL pinned without "
                                    "--allow-change-held-packages: nvidia/cuda images hold "
                                    "libnccl2, so apt refuses the change")
        names.append(name)
        stage_args[name] = visible
    build = next((body for name, _, body in all_stages if name == "build"), None)
    if build is None:
        problems.append("no stage named build")
    else:
        installed = {p.split("=")[0] for _, w, rest in build if w == "RUN"
                     for lst in apt_packages(rest) for p in lst}
        for package in setup_build_packages(setup_text):
            if package not in installed:
                problems.append(f"build stage: {package} is missing (scripts/setup.sh build "
                                "lists it; CMake needs it)")
    ray = next((body for name, _, body in all_stages if name == "ray"), None)
    if ray is not None:
        ray_packages = {p for _, w, rest in ray if w == "RUN" for lst in apt_packages(rest)
                        for p in lst}
        if "wget" not in ray_packages:
            problems.append("ray stage: wget is missing (KubeRay >= 1.1's exec probes run it)")
    return problems


def apt_steps(text):
    return {name: [lst for _, w, rest in body if w == "RUN" for lst in apt_packages(rest)]
            for name, _, body in stages(text)[1:]}


def main(argv):
    if argv[1] == "--apt-steps":
        with open(argv[2]) as file:
            print(json.dumps(apt_steps(file.read())))
        return 0
    with open(argv[1]) as file, open(argv[2]) as setup:
        problems = lint(file.read(), setup.read())
    for problem in problems:
        print(f"{argv[1]}: {problem}")
    if not problems:
        print(f"{argv[1]}: no known pitfall")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
