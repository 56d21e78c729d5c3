#!/usr/bin/env python3
"""KubeRay driver: Ray places the nodes, shardtrain trains.

The RayJob rendered by `shardtrain k8s rayjob` runs this as its entrypoint, on the Ray head:

    python3 shardtrain_ray.py --nodes 2 --gpus-per-node 8 --run-id llama-ft -- \
        train --config /etc/shardtrain/job.toml

It reserves one placement-group bundle per node (STRICT_SPREAD: each on a different Ray node,
holding all of that node's GPUs), finds the address of bundle 0's node, and runs one Ray task
per bundle that runs `shardtrain launch --nnodes N --node-rank i ... --rdzv-endpoint
<node 0>:29500` with the worker command. Each task streams its launcher's output line by line
(prefixed `[node i] `; Ray forwards task output to the driver) and returns its exit code; the
driver exits with the first non-zero one (0 when every node succeeded). Restarts after a
worker failure are the launcher's job (--max-restarts). Ray is used only to place one launcher
per node (no Ray Train API).

When a node is lost (its task dies with the pod), Ray's own task retry would rerun the task with
the node-0 address it was built with, a stale IP once node 0's pod is replaced. So tasks are
never retried by Ray: the driver waits for the placement group to be whole again, reads node 0's
address anew and starts every node's launcher again (a new round, up to --max-restarts rounds).
A node that exits 2 (a config error) ends the job at once with 2: no round repeats it.

Only standard Ray APIs are used (ray.init, ray.remote, placement groups, ray.nodes). The command
construction below is plain Python, tested without Ray (shardtrain_ray_test.py).
"""

import argparse
import subprocess
import sys

STORE_PORT = 29500  # node 0's launcher hosts the rendezvous store here (kStorePort)


def parse_args(argv):
    """The driver's flags; everything after `--` is the worker command. Bad input: exit 2."""
    if "--" not in argv:
        print("shardtrain_ray: error: give the worker command after --, e.g. "
              "-- train --config job.toml", file=sys.stderr)
        raise SystemExit(2)
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="shardtrain_ray")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, required=True)
    parser.add_argument("--nproc-per-node", type=int)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--max-restarts", type=int, default=3)
    parser.add_argument("--stop-grace", type=int, default=270)
    parser.add_argument("--metrics-port", type=int,
                        help="each node's launcher serves Prometheus /metrics on this port")
    parser.add_argument("--binary", default="shardtrain")
    args = parser.parse_args(argv[:split])
    args.worker_command = argv[split + 1:]
    if args.nodes < 1:
        parser.error(f"--nodes {args.nodes}: expected at least 1")
    if args.gpus_per_node < 0:
        parser.error(f"--gpus-per-node {args.gpus_per_node}: expected 0 or more")
    if not args.worker_command:
        parser.error("the worker command after -- is empty")
    if args.nproc_per_node is None:
        args.nproc_per_node = max(1, args.gpus_per_node)
    return args


def bundles(nodes, gpus_per_node):
    """One bundle per node: a CPU for the launcher plus all of the node's GPUs."""
    bundle = {"CPU": 1}
    if gpus_per_node > 0:
        bundle["GPU"] = gpus_per_node
    return [dict(bundle) for _ in range(nodes)]


def launch_command(args, node_rank, master_address):
    """The `shardtrain launch` command of node `node_rank`, node 0 at `master_address`."""
    endpoint = f"[{master_address}]:{STORE_PORT}" if ":" in master_address else \
        f"{master_address}:{STORE_PORT}"
    metrics = ["--metrics-port", str(args.metrics_port)] if args.metrics_port is not None else []
    return [args.binary, "launch",
            "--nnodes", str(args.nodes),
            "--node-rank", str(node_rank),
            "--nproc-per-node", str(args.nproc_per_node),
            "--rdzv-backend", "static",
            "--rdzv-endpoint", endpoint,
            "--rdzv-id", args.run_id,
            "--max-restarts", str(args.max_restarts),
            "--stop-grace", str(args.stop_grace)] + metrics + \
        ["--"] + list(args.worker_command)


def combined_exit_code(codes):
    """The job's exit code: the first failing node's, else 0."""
    for code in codes:
        if code != 0:
            return code
    return 0


LOST = None  # a round's code for a node whose task died with its Ray node


def next_round(codes, round_index, max_restarts):
    """After a round's per-node codes (LOST for a lost node): ("exit", code) or ("again", None).

    Every node 0: exit 0. Any node 2 (a config error): exit 2, never retried. A lost node, with
    rounds left: again. Otherwise the first failing node's code (the launchers already spent
    their own restarts), or 1 when nodes were lost and no round is left."""
    if all(code == 0 for code in codes):
        return ("exit", 0)
    if 2 in codes:
        return ("exit", 2)
    if LOST in codes:
        if round_index < max_restarts:
            return ("again", None)
        known = [code for code in codes if code not in (0, LOST)]
        return ("exit", known[0] if known else 1)
    return ("exit", combined_exit_code(codes))


def master_address_of(group, placement_group_table, nodes):
    """The address of the Ray node holding bundle 0 of `group` now."""
    node_of_bundle = placement_group_table(group)["bundles_to_node_id"]
    addresses = {node["NodeID"]: node["NodeManagerAddress"] for node in nodes()}
    return addresses[node_of_bundle[0]]


def run_streaming(command, node_rank):
    """Runs `command`, printing its output line by line prefixed with the node; its exit code."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as process:
        for line in process.stdout:
            print(f"[node {node_rank}] {line}", end="", flush=True)
        return process.wait()


def main(argv):
    args = parse_args(argv)
    import ray  # only here: the functions above are tested where Ray is absent
    from ray.util.placement_group import placement_group, placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init()
    group = placement_group(bundles(args.nodes, args.gpus_per_node), strategy="STRICT_SPREAD")
    run_node = ray.remote(run_streaming)
    for round_index in range(args.max_restarts + 1):
        ray.get(group.ready())  # after a lost node: until Ray has placed its bundle again
        master_address = master_address_of(group, placement_group_table, ray.nodes)
        print(f"shardtrain_ray: round {round_index}: {args.nodes} node(s), node 0 at "
              f"{master_address}", flush=True)
        tasks = [
            run_node.options(
                num_cpus=1, num_gpus=args.gpus_per_node, max_retries=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=rank),
            ).remote(launch_command(args, rank, master_address), rank)
            for rank in range(args.nodes)
        ]
        codes = []
        for task in tasks:
            try:
                codes.append(ray.get(task))
            except ray.exceptions.RayError as error:  # the node (pod) died under the task
                print(f"shardtrain_ray: a node was lost: {type(error).__name__}", flush=True)
                codes.append(LOST)
        action, code = next_round(codes, round_index, args.max_restarts)
        if action == "exit":
            print(f"shardtrain_ray: finished with exit code {code}", flush=True)
            return code
    return 1

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
