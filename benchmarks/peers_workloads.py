"""The labelled PyTorch workloads of ``peers.py``: each measures its own truth.

Usage::

    python peers_workloads.py SHAPE [--steps N] [--instrument none|traceml|torch-profiler]

Shapes: ``dataloader-cpu`` (a DataLoader without workers whose ``__getitem__`` is CPU-bound
Python), ``storage`` (the same, each sample waiting 2 ms for simulated network storage),
``compute`` (batches in memory, a wide MLP), ``inference`` (no DataLoader: each request is
preprocessed in the loop, then the model runs under ``no_grad``), ``ddp`` (run under
``torchrun --nproc-per-node 4``: gloo DDP, rank 2's storage makes each sample wait 5 ms: the
straggler).

The truth: the loop times its own input (``next`` on the loader, or the preprocessing call) and
its whole steps, and prints one line ``TRUTH {json}`` at the end: ``input_fraction`` (input
time over loop time), ``steps``, ``elapsed_s`` (the timed loop, start-up excluded), and for
``ddp`` the rank and ``straggler`` (the rank whose input is slow).

``--instrument`` is the code change each peer needs, and only that: ``traceml`` wraps each step
in ``traceml.trace_step(model)`` after ``traceml.init()`` (its plain-PyTorch integration; run it
with ``traceml run``), and for inference also the request iterator in
``traceml.wrap_dataloader_fetch`` (it hooks DataLoaders only); ``torch-profiler`` wraps the loop
in ``torch.profiler.profile`` with ``prof.step()`` per step, then prints ``PEER {json}``: the
share of each profiled step spent in the DataLoader's ``__next__`` event, the input share a
reader of its table gets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SHAPES = ("dataloader-cpu", "storage", "compute", "inference", "ddp")
STRAGGLER_RANK = 2
WARMUP = 3


def burn(n: int, seed: int) -> float:
    """Pure-Python CPU work (decoding, tokenizing)."""
    acc = 0
    for i in range(n):
        acc = (acc + i * seed) % 9973
    return float(acc)


class Samples(Dataset[tuple[torch.Tensor, int]]):
    """``cpu_iters`` of Python work and ``sleep_s`` of storage wait per sample."""

    def __init__(self, cpu_iters: int, sleep_s: float, width: int = 64) -> None:
        self.cpu_iters, self.sleep_s, self.width = cpu_iters, sleep_s, width

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        value = burn(self.cpu_iters, index) if self.cpu_iters else float(index % 7)
        return torch.full((self.width,), value / 9973.0), index % 10


def mlp(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


class Instrument:
    """The peer's code change: a context for the whole loop and one per step."""

    def __init__(self, kind: str, model: nn.Module) -> None:
        self.kind = kind
        self.model = model
        self.prof: Any = None
        if kind == "traceml":
            import traceml_ai as traceml  # type: ignore[import-not-found]

            traceml.init(mode="auto")
            self._traceml = traceml

    @contextlib.contextmanager
    def loop(self) -> Iterator[None]:
        if self.kind != "torch-profiler":
            yield
            return
        from torch.profiler import ProfilerActivity, profile, schedule

        with profile(
            # a window of steps, as its documentation profiles a loop
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=1, active=20, repeat=1),
        ) as prof:
            self.prof = prof
            yield

    def fetches(self, batches: Iterator[Any]) -> Iterator[Any]:
        """TraceML times a fetch it does not hook itself (no DataLoader) when told to."""
        if self.kind == "traceml":
            wrapped: Iterator[Any] = self._traceml.wrap_dataloader_fetch(batches)
            return wrapped
        return batches

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        if self.kind == "traceml":
            with self._traceml.trace_step(self.model):
                yield
        else:
            yield
            if self.prof is not None:
                self.prof.step()

    def report(self) -> dict[str, Any] | None:
        """torch.profiler: the DataLoader's share of the profiled steps."""
        if self.prof is None:
            return None
        steps = loader = 0.0
        for e in self.prof.key_averages():
            if e.key.startswith("ProfilerStep"):
                steps += e.cpu_time_total
            elif e.key.startswith("enumerate(DataLoader)"):
                loader += e.cpu_time_total
        return {"tool": "torch.profiler", "input_fraction": loader / steps if steps else None}


def train(
    loader: DataLoader[Any], model: nn.Module, steps: int, inst: Instrument
) -> tuple[float, float, int]:
    """Training: a few untimed warm-up steps (lazy imports, first allocations), then the timed
    loop; its input time, its total time, its steps."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    batches = iter(loader)
    warm_up(lambda: step(*next(batches)))
    return timed_loop(batches, step, steps, inst)


def warm_up(one_step: Callable[[], object], n: int = WARMUP) -> None:
    """Steps before the clock starts (``peers.py`` leaves their py-spy samples out too)."""
    for _ in range(n):
        one_step()


def timed_loop(
    batches: Iterator[Any], step: Callable[..., None], steps: int, inst: Instrument
) -> tuple[float, float, int]:
    """The measured loop: the loop's own clock on each fetch (outside the peer's step wrapper,
    where its documentation puts it: ``for batch in loader: with trace_step(model):``)."""
    waited = [0.0]

    def timed(source: Iterator[Any]) -> Iterator[Any]:
        while True:
            a = time.perf_counter()
            batch = next(source)
            waited[0] += time.perf_counter() - a
            yield batch

    done = 0
    t0 = time.perf_counter()
    with inst.loop():
        for x, y in timed(batches):
            with inst.step():
                step(x, y)
            done += 1
            if done >= steps:
                break
    return waited[0], time.perf_counter() - t0, done


def infer(model: nn.Module, steps: int, inst: Instrument) -> tuple[float, float, int]:
    """Inference with the preprocessing in the loop (no DataLoader), after a warm-up."""
    model.eval()
    warm_up(lambda: infer_loop(model, 1, Instrument("none", model)))
    return infer_loop(model, steps, inst)


def infer_loop(model: nn.Module, steps: int, inst: Instrument) -> tuple[float, float, int]:
    """The measured inference loop: each request preprocessed in the loop's thread (a
    generator the loop pulls from), then the model under no_grad."""
    prep = [0.0]

    def requests() -> Iterator[torch.Tensor]:
        for i in range(steps):
            a = time.perf_counter()
            rows = [[burn(1500, i * 31 + j) / 9973.0] * 256 for j in range(16)]
            x = torch.tensor(rows)
            prep[0] += time.perf_counter() - a
            yield x

    t0 = time.perf_counter()
    with inst.loop(), torch.no_grad():
        for x in inst.fetches(requests()):
            with inst.step():
                model(x)
    return prep[0], time.perf_counter() - t0, steps


def run(shape: str, steps: int, instrument: str) -> dict[str, Any]:
    """Run one shape; its truth."""
    torch.set_num_threads(1)  # two cores, shared: one intra-op thread per process
    torch.manual_seed(0)
    rank = int(os.environ.get("RANK", "0"))
    truth: dict[str, Any] = {"shape": shape}
    if shape == "ddp":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        model: nn.Module = nn.parallel.DistributedDataParallel(mlp(64, 2))
        # the straggler's storage is slow: it waits 5 ms a sample, the others read at once
        slow = rank == STRAGGLER_RANK
        data = Samples(cpu_iters=500, sleep_s=0.005 if slow else 0.0)
        inst = Instrument(instrument, model)
        waited, elapsed, n = train(DataLoader(data, batch_size=4), model, steps, inst)
        truth.update(rank=rank, straggler=STRAGGLER_RANK)
        dist.barrier()
        dist.destroy_process_group()
    elif shape == "inference":
        model = mlp(256, 3)
        inst = Instrument(instrument, model)
        waited, elapsed, n = infer(model, steps, inst)
    else:
        cpu, sleep, width, depth, batch = {
            "dataloader-cpu": (2500, 0.0, 64, 2, 8),
            "storage": (0, 0.002, 64, 2, 8),
            "compute": (0, 0.0, 384, 4, 64),
        }[shape]
        model = mlp(width, depth)
        inst = Instrument(instrument, model)
        loader = DataLoader(Samples(cpu, sleep, width), batch_size=batch, num_workers=0)
        waited, elapsed, n = train(loader, model, steps, inst)
    truth.update(input_fraction=round(waited / elapsed, 4), steps=n, elapsed_s=round(elapsed, 4))
    truth["pid"] = os.getpid()
    peer = inst.report()
    if peer is not None:
        print("PEER " + json.dumps(peer), flush=True)
    return truth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shape", choices=SHAPES)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--instrument", choices=("none", "traceml", "torch-profiler"), default="none")
    a = p.parse_args()
    truth = json.dumps(run(a.shape, a.steps, a.instrument))
    print("TRUTH " + truth, flush=True)
    out = os.environ.get("PEERS_TRUTH_FILE")
    if out:  # under a profiler that keeps the workload's stdout to itself
        with open(out, "a") as f:
            f.write(truth + "\n")


if __name__ == "__main__":
    main()
