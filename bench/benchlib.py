#!/usr/bin/env python3
"""Arithmetic and parsing shared by bench/run_bench.sh and bench/run_scaling.sh (standard library
only, so every part can be tried on a machine without a GPU).

FLOPs per token (the one formula behind every MFU figure in bench/RESULTS.md):
  6 x matmul parameters (q, k, v, o, gate, up, down per layer, plus the lm head whether tied or
  not; the embedding lookup is excluded) + 6 x layers x seq_len x heads x head_dim (attention).
MFU = tokens/s per GPU x FLOPs per token / 790 TFLOP/s (the H200's measured bf16 matmul ceiling).

Subcommands:
  flops CONFIG_JSON SEQ_LEN [LORA_RANK] FLOPs per token (with LORA_RANK: LoRA on all seven
                                        projections over a frozen base, the work actually done)
  bench-rows SHAPE OURS_TPS TORCH_TPS FLOPS OURS_MIB TORCH_MIB [PLAN_MIB [EAGER_TPS EAGER_MIB]]
                                        run_bench.sh's table rows for one shape: ours (with the
                                        plan's prediction and measured / plan), compiled
                                        PyTorch, the ratios (tokens/s and peak memory), and
                                        eager PyTorch with its ratio when given
  tokens CONFIG_JSON OUT SEQ_LEN SEQS   random-token file (shardtrain's token format) with
                                        SEQS x SEQ_LEN + 1 ids below the config's vocab_size
  doc-tokens CONFIG_JSON OUT SEQ_LEN SEQS
                                        random-token file of SEQS x SEQ_LEN ids cut into
                                        documents of 200-3000 tokens (uniform, seeded), recorded
                                        in a version 3 document table (src/data/token_file.h);
                                        run_bench.sh's +docs runs, read back by
                                        pytorch_fsdp2.py --documents (document_windows)
  ours-tps METRICS_JSONL WORLD          per-GPU tokens/s of a shardtrain run from rank 0's
                                        --metrics file (its "tokens" are summed over ranks);
                                        steps 1 and 2 are warm-up, not timed
  host-wait METRICS_JSONL                the timed steps' mean host wait for the GPU ("host_wait_s")
                                        against their step time: a small share = host-bound
  torch-tps LOG                         tokens/s per GPU from bench/pytorch_fsdp2.py's JSON line
  loss-diff METRICS_A METRICS_B         the largest relative difference of the per-step losses of
                                        two shardtrain runs of the same job (e.g. two kernels);
                                        exits 1 when the step counts differ
  peak-mib MEM_CSV GPUS                 largest memory.used (MiB) of GPUs 0..GPUS-1 in an
                                        `nvidia-smi --query-gpu=index,memory.used` sample log
  plan-total PLAN_OUTPUT STRATEGY       the per-rank "total" (MiB) of STRATEGY in the output of
                                        `shardtrain plan`
  record RUNS_JSONL key=value...        append one scaling run (see run_scaling.sh) to RUNS_JSONL,
                                        reading its figures from the files named in the keys
  scaling-table RUNS_JSONL              the scaling table of those runs
"""
import array
import bisect
import json
import random
import re
import struct
import sys

PEAK_FLOPS = 790e12


def flops_per_token(config_path, seq_len, lora_rank=0):
    with open(config_path) as f:
        c = json.load(f)
    C, F, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    H, V = c["num_attention_heads"], c["vocab_size"]
    K = c.get("num_key_value_heads") or H
    D = c.get("head_dim") or C // H
    attention = C * H * D * 2 + C * K * D * 2
    # Mixture of experts (model/model_flops.cpp): the router and the k experts a token runs.
    E = c.get("num_experts") or c.get("num_local_experts") or 0
    sparse = 0
    if E:
        mixtral = c["model_type"] == "mixtral"
        step = 1 if mixtral else c.get("decoder_sparse_step", 1)
        dense_layers = [] if mixtral else c.get("mlp_only_layers", [])
        sparse = sum(1 for l in range(L) if l not in dense_layers and (l + 1) % step == 0)
        Fe = F if mixtral else c.get("moe_intermediate_size", 768)
        moe = C * E + 3 * C * Fe * c.get("num_experts_per_tok", 2 if mixtral else 8)
    matmul = L * attention + (L - sparse) * 3 * C * F + (sparse * moe if sparse else 0) + V * C
    attention_scores = 6 * L * int(seq_len) * H * D
    r = int(lora_rank)
    if r > 0:
        # A frozen base runs forward and the input-gradient GEMM only (4 x its matmuls); each
        # adapter (r x I down, O x r up on q, k, v, o, gate, up, down) all three GEMMs
        # (model/model_flops.cpp counts the same).
        adapters = L * r * ((C + H * D) * 2 + (C + K * D) * 2 + (C + F) * 2 + (F + C))
        return 4 * matmul + 6 * adapters + attention_scores
    return 6 * matmul + attention_scores


def mfu_percent(tokens_per_s, flops):
    return 100.0 * float(tokens_per_s) * float(flops) / PEAK_FLOPS


def write_tokens(config_path, out, seq_len, sequences):
    with open(config_path) as f:
        vocab = json.load(f)["vocab_size"]
    n = int(sequences) * int(seq_len) + 1
    rng = random.Random(0)
    ids = array.array("I", (rng.randrange(vocab) for _ in range(n)))
    assert ids.itemsize == 4
    if sys.byteorder != "little":
        ids.byteswap()
    with open(out, "wb") as f:
        f.write(struct.pack("<8sIIQQ", b"SHTOKENS", 1, 0, n, 0))
        f.write(ids.tobytes())


# Token file layout (src/data/token_file.h): magic, version, flags, n_tokens, packed_seq_len.
TOKEN_HEADER = "<8sIIQQ"
TOKEN_FILE_DOCUMENTS = 3  # the version that records the document table


def document_starts(n_tokens, low=200, high=3000, seed=0):
    """Where each document of a stream of n_tokens begins: 0, then lengths drawn uniformly from
    [low, high] (seeded); the last document ends with the stream."""
    rng = random.Random(seed)
    starts, at = [], 0
    while at < n_tokens:
        starts.append(at)
        at += rng.randint(low, high)
    return starts


def write_document_tokens(config_path, out, seq_len, sequences, seed=0):
    """A version 3 token file: sequences x seq_len random ids below vocab_size, no loss mask,
    packed_seq_len = seq_len, and the document table of document_starts(n)."""
    with open(config_path) as f:
        vocab = json.load(f)["vocab_size"]
    n = int(sequences) * int(seq_len)
    rng = random.Random(seed)
    ids = array.array("I", (rng.randrange(vocab) for _ in range(n)))
    starts = array.array("Q", document_starts(n, seed=seed + 1))
    assert ids.itemsize == 4 and starts.itemsize == 8
    if sys.byteorder != "little":
        ids.byteswap()
        starts.byteswap()
    with open(out, "wb") as f:
        f.write(struct.pack(TOKEN_HEADER, b"SHTOKENS", TOKEN_FILE_DOCUMENTS, 0, n, int(seq_len)))
        f.write(ids.tobytes())
        f.write(struct.pack("<Q", len(starts)))
        f.write(starts.tobytes())


def read_document_tokens(path):
    """(ids, starts) of a version 3 token file without a loss mask: array('I'), list of ints.
    Raises ValueError naming the file for any other layout."""
    with open(path, "rb") as f:
        data = f.read()
    size = struct.calcsize(TOKEN_HEADER)
    magic, version, flags, n, _ = struct.unpack_from(TOKEN_HEADER, data)
    if magic != b"SHTOKENS" or version != TOKEN_FILE_DOCUMENTS or flags != 0:
        raise ValueError(f"{path}: not a version 3 token file without a loss mask "
                         f"(magic {magic!r}, version {version}, flags {flags})")
    ids = array.array("I")
    ids.frombytes(data[size:size + 4 * n])
    (count,) = struct.unpack_from("<Q", data, size + 4 * n)
    starts = array.array("Q")
    starts.frombytes(data[size + 4 * n + 8:])
    if sys.byteorder != "little":
        ids.byteswap()
        starts.byteswap()
    if len(ids) != n or len(starts) != count or not starts or starts[0] != 0 or any(
            b <= a for a, b in zip(starts, starts[1:])) or starts[-1] >= n:
        raise ValueError(f"{path}: token count or document table inconsistent with the header")
    return ids, list(starts)


def document_windows(starts, n_tokens, seq_len):
    """Per seq_len window of the stream (as shardtrain cuts a token file: non-overlapping from
    token 0, the remainder dropped): where its documents begin, relative to the window. A
    window's first token always begins one (a document that crosses into it continues as a
    piece of its own), as data/dataset.h reads data.packing = documents."""
    windows = []
    for begin in range(0, n_tokens - seq_len + 1, seq_len):
        first = bisect.bisect_right(starts, begin)
        last = bisect.bisect_left(starts, begin + seq_len)
        windows.append([0] + [s - begin for s in starts[first:last]])
    return windows


def ours_tokens_per_s(metrics_path, world):
    with open(metrics_path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if len(records) < 3:
        raise ValueError(f"{metrics_path}: {len(records)} steps logged, need >= 3")
    # Timed from the end of step 2 to the end of the last step: steps 1 and 2 (allocation,
    # first kernels) are not timed, as in every run_bench.sh figure so far.
    a, b = records[1], records[-1]
    return (b["tokens"] - a["tokens"]) / (b["elapsed_s"] - a["elapsed_s"]) / int(world)


def ours_comm_wait_ms(metrics_path):
    """Mean exposed communication per step (the "comm_wait_s" that shardtrain records with
    SHARDTRAIN_MEASURE_COMM_WAIT=1), over the timed steps; None when not recorded."""
    with open(metrics_path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    waits = [r["comm_wait_s"] for r in records[2:] if "comm_wait_s" in r]
    return 1e3 * sum(waits) / len(waits) if waits else None


def ours_host_wait(metrics_path):
    """The timed steps' mean host wait ("host_wait_s": the host blocked on the GPU) against
    their mean step time, as one line; None when not recorded (CPU). A small share says the
    host, not the GPU, sets the step's pace."""
    with open(metrics_path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    timed = [r for r in records[2:] if "host_wait_s" in r]
    if not timed:
        return None
    wait = 1e3 * sum(r["host_wait_s"] for r in timed) / len(timed)
    step = 1e3 * sum(r["step_time_s"] for r in timed) / len(timed)
    return f"host waited for the GPU {wait:.1f} of {step:.1f} ms a step ({100 * wait / step:.0f}%)"


def loss_difference(metrics_a, metrics_b):
    def losses(path):
        with open(path) as f:
            return [json.loads(line)["loss"] for line in f if line.strip()]
    a, b = losses(metrics_a), losses(metrics_b)
    if len(a) != len(b) or not a:
        sys.exit(f"loss-diff: {metrics_a} has {len(a)} steps, {metrics_b} {len(b)}")
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))


def torch_tokens_per_s(log_path):
    with open(log_path) as f:
        lines = [line for line in f if '"tokens_per_s"' in line]
    if not lines:
        raise ValueError(f"{log_path}: no result line")
    # Under torchrun only rank 0 prints it; a prefix such as "[rank0]:" is skipped.
    line = lines[-1]
    return json.loads(line[line.index("{"):])["tokens_per_s"]


def peak_mib(mem_csv, gpus):
    peak = None
    with open(mem_csv) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 2 or not parts[0].isdigit():
                continue
            try:
                used = float(parts[1])
            except ValueError:  # "[N/A]"
                continue
            if int(parts[0]) < int(gpus):
                peak = used if peak is None else max(peak, used)
    if peak is None:
        raise ValueError(f"{mem_csv}: no memory samples")
    return peak


def plan_total_mib(plan_output, strategy):
    """`shardtrain plan` prints one row per strategy: name, group, then "X MiB" columns by
    category (fp32 master, compute copy, moments, grad shard, full grads, gathered,
    activations), the last one the total. Older builds printed seven columns (params = master +
    copy); both are read."""
    with open(plan_output) as f:
        for line in f:
            words = line.split()
            if words and words[0] == strategy.upper():
                sizes = re.findall(r"([0-9.]+) MiB", line)
                if len(sizes) not in (7, 8):
                    raise ValueError(f"{plan_output}: {strategy.upper()}: {line.strip()}")
                return float(sizes[-1])
    raise ValueError(f"{plan_output}: no row for {strategy.upper()}")


def bench_rows(shape, ours, theirs, flops, ours_mib, torch_mib, plan_mib=None, eager=None,
               eager_mib=None):
    def ratio(a, b):
        return f"{float(a) / float(b):.3f}" if float(b) > 0 else "-"

    def row(name, tps, mib, extra=""):
        return (f"{shape:<28} {name:<14} {float(tps):12.0f} {mfu_percent(tps, flops):6.1f}% "
                f"{float(mib) / 1024:9.1f}{extra}")

    plan = ""
    if plan_mib is not None and float(plan_mib) > 0:
        plan = f"   plan {float(plan_mib) / 1024:.1f} GiB, measured/plan {ratio(ours_mib, plan_mib)}"
    rows = [row("shardtrain", ours, ours_mib, plan), row("pytorch-comp", theirs, torch_mib),
            f"{shape:<28} {'ratio':<14} {ratio(ours, theirs):>12} {'':7} {ratio(ours_mib, torch_mib):>9}"]
    if eager is not None:
        rows.append(row("pytorch-eager", eager, eager_mib))
        rows.append(f"{shape:<28} {'ratio eager':<14} {ratio(ours, eager):>12} {'':7} "
                    f"{ratio(ours_mib, eager_mib):>9}")
    return "\n".join(rows)


def record(runs_path, pairs):
    """One run: run=, engine=, strategy=, gpus=, status=, flops=, and the files metrics= (ours)
    or log= (PyTorch), mem=, plan= (ours). A figure that cannot be read turns the status into
    the reason."""
    r = dict(pair.split("=", 1) for pair in pairs)
    gpus = int(r["gpus"])
    out = {"run": r["run"], "engine": r["engine"], "strategy": r["strategy"], "gpus": gpus,
           "status": r.get("status", "ok"), "tokens_per_s_gpu": None, "mfu": None,
           "peak_mib": None, "plan_mib": None}
    try:
        if r.get("plan"):
            out["plan_mib"] = plan_total_mib(r["plan"], r["strategy"])
    except (OSError, ValueError) as e:
        print(f"plan: {e}", file=sys.stderr)
    try:
        if r.get("mem"):
            out["peak_mib"] = peak_mib(r["mem"], gpus)
    except (OSError, ValueError) as e:
        print(f"memory: {e}", file=sys.stderr)
    if out["status"] == "ok":
        try:
            tps = (ours_tokens_per_s(r["metrics"], gpus) if r["engine"] == "shardtrain"
                   else torch_tokens_per_s(r["log"]))
            out["tokens_per_s_gpu"] = tps
            out["mfu"] = mfu_percent(tps, r["flops"])
            if r["engine"] == "shardtrain":
                out["comm_wait_ms"] = ours_comm_wait_ms(r["metrics"])
        except (OSError, ValueError, KeyError) as e:
            out["status"] = f"no result ({e})"
    with open(runs_path, "a") as f:
        f.write(json.dumps(out) + "\n")


def scaling_table(runs_path):
    with open(runs_path) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    ok = [r for r in runs if r["tokens_per_s_gpu"] is not None]
    base = {}  # (run, engine, strategy) -> the run at the fewest GPUs with a result
    for r in ok:
        key = (r["run"], r["engine"], r["strategy"])
        if key not in base or r["gpus"] < base[key]["gpus"]:
            base[key] = r
    def baseline(engine):
        return {(r["run"], r["strategy"], r["gpus"]): r for r in ok if r["engine"] == engine}
    compiled, eager = baseline("pytorch-compiled"), baseline("pytorch")

    def num(value, fmt):
        return "-" if value is None else format(value, fmt)

    lines = [
        "per GPU: tokens/s, MFU (790 TFLOP/s), peak nvidia-smi memory.used (largest GPU);",
        "planGiB = `shardtrain plan` per-rank total; eff = tokens/s per GPU / the same at the "
        "fewest GPUs (@N when not 1); vs comp / vs eager = shardtrain / PyTorch FSDP2 tokens/s, "
        "compiled (per-layer torch.compile: the baseline that counts) / eager; "
        "wait ms = exposed communication per step (rank 0's compute stream waiting for FSDP's "
        "collectives)",
        f"{'shape':<18} {'engine':<16} {'strategy':<13} {'gpus':>4} {'tok/s/gpu':>10} "
        f"{'MFU':>6} {'peakGiB':>8} {'planGiB':>8} {'meas/plan':>9} {'eff':>9} {'vs comp':>8} "
        f"{'vs eager':>8} {'wait ms':>8}  status",
    ]
    order = {"shardtrain": 0, "pytorch-compiled": 1, "pytorch": 2}
    for r in sorted(runs, key=lambda r: (r["run"], r["strategy"], r["gpus"],
                                         order.get(r["engine"], 3))):
        tps = r["tokens_per_s_gpu"]
        peak, plan = r["peak_mib"], r["plan_mib"]
        ratio = peak / plan if peak and plan else None
        eff = "-"
        b = base.get((r["run"], r["engine"], r["strategy"]))
        if tps is not None and b is not None:
            eff = f"{tps / b['tokens_per_s_gpu']:.3f}" + ("" if b["gpus"] == 1 else f"@{b['gpus']}")
        mfu = "-" if r["mfu"] is None else f"{r['mfu']:.1f}%"
        def versus(runs_of):
            t = runs_of.get((r["run"], r["strategy"], r["gpus"]))
            if r["engine"] == "shardtrain" and tps is not None and t is not None:
                return tps / t["tokens_per_s_gpu"]
            return None
        lines.append(
            f"{r['run']:<18} {r['engine']:<16} {r['strategy']:<13} {r['gpus']:>4} "
            f"{num(tps, '10.0f'):>10} {mfu:>6} "
            f"{num(peak and peak / 1024, '8.1f'):>8} {num(plan and plan / 1024, '8.1f'):>8} "
            f"{num(ratio, '9.3f'):>9} {eff:>9} {num(versus(compiled), '8.3f'):>8} "
            f"{num(versus(eager), '8.3f'):>8} "
            f"{num(r.get('comm_wait_ms'), '8.1f'):>8}  {r['status']}")
    return "\n".join(lines)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    command, args = argv[1], argv[2:]
    if command == "flops" and len(args) in (2, 3):
        print(flops_per_token(*args))
    elif command == "bench-rows" and len(args) in (6, 7, 9):
        print(bench_rows(*args))
    elif command == "tokens" and len(args) == 4:
        write_tokens(*args)
    elif command == "doc-tokens" and len(args) == 4:
        write_document_tokens(*args)
    elif command == "ours-tps" and len(args) == 2:
        print(ours_tokens_per_s(*args))
    elif command == "host-wait" and len(args) == 1:
        print(ours_host_wait(*args) or "host wait not recorded")
    elif command == "loss-diff" and len(args) == 2:
        print(f"{loss_difference(*args):.3g}")
    elif command == "torch-tps" and len(args) == 1:
        print(torch_tokens_per_s(*args))
    elif command == "peak-mib" and len(args) == 2:
        print(peak_mib(*args))
    elif command == "plan-total" and len(args) == 2:
        print(plan_total_mib(*args))
    elif command == "record" and len(args) >= 2:
        record(args[0], args[1:])
    elif command == "scaling-table" and len(args) == 1:
        print(scaling_table(*args))
    else:
        sys.exit(f"benchlib.py: bad arguments {argv[1:]}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv)
