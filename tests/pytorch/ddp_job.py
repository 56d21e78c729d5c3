"""A tiny PyTorch DDP job for `shardtrain launch` tests (src/launch/torchrun_compat_dist_test.cpp)
and for tools/device/torchrun_nccl.sh: env:// init, one all-reduce checked against its exact
value, a few steps of a tiny DDP model, parameters checked equal on every rank.

Usage: ddp_job.py [--backend gloo|nccl] [--steps N] [--fail-rank R --fail-code C]
                  [--raise-on-rank R] [--sleep-after-step S] [--marker FILE]
Prints "ddp ok rank=R world=W restart=N loss=L" and exits 0 when all checks pass.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-code", type=int, default=0)
    parser.add_argument("--raise-on-rank", type=int, default=-1)
    parser.add_argument("--sleep-after-step", type=float, default=0.0)
    parser.add_argument("--marker", default="")
    args, extra = parser.parse_known_args()
    if extra:
        print("extra args: " + " ".join(extra), flush=True)

    dist.init_process_group(args.backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if args.marker and rank == 0:
        with open(args.marker, "w") as f:
            f.write(str(os.getpid()))

    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    assert value.item() == expected, f"all_reduce gave {value.item()}, expected {expected}"

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        x = torch.randn(8, 4, generator=generator).to(device)
        loss = (ddp(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == args.raise_on_rank and restart == 0:
            raise ValueError(f"boom on rank {rank}")
        if rank == args.fail_rank and restart == 0:
            sys.exit(args.fail_code)
        if args.sleep_after_step > 0:
            time.sleep(args.sleep_after_step)
    # DDP keeps replicas identical: every rank holds rank 0's parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(g, gathered[0]) for g in gathered), "replicas differ"
    print(f"ddp ok rank={rank} world={world} restart={restart} loss={loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
