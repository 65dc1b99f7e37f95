"""A torchrun DDP job (gloo, CPU, a tiny model) with one slow rank, for the rank tests.

Run it under ``python -m torch.distributed.run --nproc_per_node=N``. Every rank trains for
``SECONDS`` (all ranks stop at the same step: rank 0's clock decides, told through a MAX
all-reduce every step, so no rank is left waiting in a collective for one that stopped).

``--slow-rank R --sleep-ms MS``: rank R sleeps MS per sample in ``__getitem__`` (a straggler
waiting on storage latency); ``--die-rank R --die-after S``: rank R raises after S seconds.
``--steps N`` stops after N steps instead (a fixed amount of work, so that runs with and
without sofa-top can be compared: rank 0 prints ``CHECKSUM=`` of the trained weights);
``--comm-hook`` registers the user's own DDP communication hook (it counts its calls:
``HOOK_CALLS=``); ``--report`` makes rank 0 print ``STEPS_PER_S=`` (benchmarks).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return 10**8

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)  # storage latency: the rank waits, the CPU does not
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), torch.randint(0, 10, (), generator=g)


def say(line: str) -> None:
    """One line in one write: the ranks share stdout, and print may split a line in two."""
    os.write(1, (line + "\n").encode())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("seconds", type=float)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--sleep-ms", type=float, default=4.0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--die-rank", type=int, default=-1)
    p.add_argument("--die-after", type=float, default=3.0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--comm-hook", action="store_true")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    sleep_s = args.sleep_ms / 1000 if rank == args.slow_rank else 0.0
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    )
    calls = [0]
    if args.comm_hook:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def counting_hook(state, bucket):  # type: ignore[no-untyped-def]
            # no annotations: DDP checks them, and postponed ones are strings
            calls[0] += 1
            return default_hooks.allreduce_hook(None, bucket)

        model.register_comm_hook(None, counting_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Samples(sleep_s), batch_size=args.batch, num_workers=args.workers)
    start = time.monotonic()
    say(f"rank {rank} of {dist.get_world_size()} (pid {os.getpid()}) training")
    steps = 0
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if rank == args.die_rank and time.monotonic() - start >= args.die_after:
            raise RuntimeError(f"rank {rank} failed on purpose after {steps} steps")
        elapsed = time.monotonic() - start
        done = steps >= args.steps if args.steps else elapsed >= args.seconds
        stop = torch.tensor([int(rank == 0 and done)])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            break
    elapsed = time.monotonic() - start
    say(f"rank {rank}: {steps} steps")
    if rank == 0:
        checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
        say(f"CHECKSUM={checksum!r}")
        say(f"HOOK_CALLS={calls[0]}")
        if args.report:
            say(f"STEPS_PER_S={steps / elapsed:.4f}")
    dist.barrier()  # no rank tears the group down while another still uses it
    # DDP's reducer (and the user's hook's futures) hold gloo work: freed while the group lives,
    # not at interpreter exit, where gloo's teardown may abort the process (SIGABRT)
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
