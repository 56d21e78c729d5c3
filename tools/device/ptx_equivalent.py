#!/usr/bin/env python3
"""Do two PTX files hold the same instructions, up to register names and symbol names?

For refactoring CUDA kernels where no GPU is at hand (the check used for
src/ops/cuda/cuda_attention_wgmma_steps.cuh): compile the file before and after with
`nvcc -std=c++20 -arch=sm_90a -O3 --expt-relaxed-constexpr -I src -I <fmt include> -ptx FILE -o X.ptx`
and compare. Registers (%r12, %f7, ...), branch labels and mangled names are blanked, comments,
.loc/.file and .reg declarations dropped; what remains must match line for line. A match means the
same instruction sequence with possibly permuted registers: strong evidence, not a proof.
Usage: ptx_equivalent.py BEFORE.ptx AFTER.ptx   (exit 0 when equal, 1 with the first differences)
"""
import difflib
import re
import sys


def instructions(path):
    kept = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("//") or ".loc" in line or ".file" in line:
                continue
            if line.startswith(".reg"):
                continue
            line = re.sub(r"%(rd|r|f|p|fd|rs|h|hh|b)\d+", "R", line)
            line = re.sub(r"\$L__BB\d+_\d+", "LABEL", line)
            line = re.sub(r"_ZN[A-Za-z0-9_]+", "NAME", line)
            kept.append(line)
    return kept


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    before, after = instructions(argv[1]), instructions(argv[2])
    diff = [l for l in difflib.unified_diff(before, after, lineterm="", n=0)
            if not l.startswith(("@@", "---", "+++"))]
    print(f"{len(before)} and {len(after)} instructions; {len(diff)} lines differ")
    print("\n".join(diff[:40]))
    return 0 if not diff else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
