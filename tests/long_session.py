"""A synthetic long session, written with the store's own writer: what ``benchmarks/finalize.py``
and ``tests/test_finalize.py`` finalize.

Its tables are a real ``sofa-top record`` of the bundled torch demo's (10 minutes on this 2-core
machine, 2026-12-07), with two DataLoader worker processes beside the target as a typical
training job has, and the stacks and steps at what a quiet machine records: process and system
samples at 10 Hz (the process collector's default interval), the scheduler's accounting and
the runnable count twice a second, a stack window a second (100 Hz; the loop's main thread
over 14 of ~25 stacks, an idle pin-memory thread, the agent's idle thread, the two workers),
``steps_per_s`` steps, the agent's report every 30 s, a neighbours scan every 3 s, a log line
every 50 steps, a pipeline description every 5 s and a verdict change every 5 minutes. 2 hours
at the defaults: 1.67 M points, 7,200 stack windows, 158 k stack counts, 72 k steps, 5.5 k
events (26 distinct stacks: a real session has hundreds, which the summary's merge of repeated
stacks folds less).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

from sofa_top.datamodel.samples import (
    AgentInfo,
    Event,
    Frame,
    PipelineSample,
    PipelineStage,
    ProcessSample,
    ProcInfo,
    Sample,
    StackClass,
    StackCount,
    StackWindow,
    StepSample,
    SystemSample,
    ThreadTimes,
    TreeSched,
)
from sofa_top.datamodel.snapshot import TargetInfo
from sofa_top.recording.hub import Session
from sofa_top.recording.store import SessionStore

PID, WORKERS = 3_999_001, (3_999_002, 3_999_003)  # above any PID this machine hands out
MAIN_TID, PIN_TID, AGENT_TID = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000
CMD = ("python", "/w/train.py")
TARGET = TargetInfo(pid=PID, name="train", cmdline=CMD, launched=True)

_TRAIN = [Frame("<module>", "/w/train.py", 90), Frame("main", "/w/train.py", 71)]
_FETCH = [
    Frame("__next__", "/torch/utils/data/dataloader.py", 631),
    Frame("_next_data", "/torch/utils/data/dataloader.py", 1329),
    Frame("_get_data", "/torch/utils/data/dataloader.py", 1285),
    Frame("get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
    Frame("wait", "/usr/lib/python3.11/threading.py", 324),
]
_MODEL = [
    Frame("_wrapped_call_impl", "/torch/nn/modules/module.py", 1511),
    Frame("_call_impl", "/torch/nn/modules/module.py", 1520),
    Frame("forward", "/torch/nn/modules/container.py", 217),
]
_LAYERS = [
    Frame("forward", "/torch/nn/modules/conv.py", 460),
    Frame("forward", "/torch/nn/modules/batchnorm.py", 171),
    Frame("forward", "/torch/nn/modules/linear.py", 116),
    Frame("forward", "/torch/nn/modules/pooling.py", 164),
]
_BACKWARD = [
    Frame("backward", "/torch/_tensor.py", 522),
    Frame("backward", "/torch/autograd/__init__.py", 266),
]
_OPT = [
    Frame("wrapper", "/torch/optim/optimizer.py", 385),
    Frame("step", "/torch/optim/sgd.py", 75),
    Frame("sgd", "/torch/optim/sgd.py", 241),
]
_WORKER = [
    Frame("_worker_loop", "/torch/utils/data/_utils/worker.py", 308),
    Frame("fetch", "/torch/utils/data/_utils/fetch.py", 51),
    Frame("__getitem__", "/w/data.py", 40),
]
_IDLE = (
    Frame("_bootstrap", "/usr/lib/python3.11/threading.py", 995),
    Frame("run", "/usr/lib/python3.11/threading.py", 975),
    Frame("wait", "/usr/lib/python3.11/threading.py", 320),
)


def _main_stacks(rng: random.Random) -> list[tuple[tuple[Frame, ...], StackClass]]:
    """The loop thread's stacks: waiting for the next batch, in the model, backward, the
    optimizer, the loop's own Python."""
    out: list[tuple[tuple[Frame, ...], StackClass]] = []
    step = [*_TRAIN, Frame("train_epoch", "/w/train.py", 55)]
    for i in range(5):
        out.append((tuple(step + _FETCH[: 2 + i % 4]), "input"))
    for layer in _LAYERS:
        for line in (10, 20):
            leaf = Frame(layer.function, layer.filename, layer.line + line)
            out.append(
                (tuple([*step, Frame("train_step", "/w/train.py", 31), *_MODEL, leaf]), "compute")
            )
    for b in range(2):
        out.append(
            (tuple([*step, Frame("train_step", "/w/train.py", 34), *_BACKWARD[: b + 1]]), "compute")
        )
    for o in range(3):
        out.append(
            (tuple([*step, Frame("train_step", "/w/train.py", 36), *_OPT[: o + 1]]), "compute")
        )
    for line in range(rng.randint(2, 4)):
        out.append((tuple([*step, Frame("log_metrics", "/w/train.py", 60 + line)]), "python"))
    return out


def _worker_stacks() -> list[tuple[tuple[Frame, ...], StackClass]]:
    decode = [Frame("decode", "/w/data.py", 22 + i) for i in range(4)]
    wait = Frame("get", "/usr/lib/python3.11/multiprocessing/queues.py", 103)
    return [*(((*_WORKER, leaf), "input") for leaf in decode), ((_WORKER[0], wait), "idle")]


def _procs(ts: float, i: int, alive: bool) -> tuple[ProcInfo, ...]:
    target = ProcInfo(
        PID,
        1,
        "python",
        CMD,
        ts - i / 10,
        60.0 + i % 7,
        14,
        1_400 << 20,
        i * 8192,
        4096,
        i,
        "running",
        alive=alive,
        role="target",
    )
    workers = tuple(
        ProcInfo(
            w,
            PID,
            "python",
            CMD,
            ts - i / 10,
            45.0 + i % 5,
            2,
            600 << 20,
            i * 65536,
            0,
            i,
            "sleeping",
            alive=alive,
            role="DataLoader worker",
        )
        for w in WORKERS
    )
    return (target, *workers)


def _sched(rng: random.Random) -> TreeSched:
    def times(on: float, wait: float, threads: int) -> ThreadTimes:
        return ThreadTimes(on * (0.9 + 0.2 * rng.random()), wait, threads, 0, 1)

    return TreeSched(
        0.5,
        (
            ("loop", times(0.55, 0.05, 1)),
            ("threads", times(0.05, 0.01, 13)),
            ("workers", times(0.9, 0.2, 4)),
            ("tree", times(1.5, 0.26, 18)),
        ),
    )


def samples(
    seconds: int, t0: float, steps_per_s: float = 10.0, hz: int = 10
) -> Iterator[list[Sample]]:
    """The session's samples, one second's worth at a time, in time order within each;
    ``hz``: process and system samples a second (the scheduler's accounting with every
    fifth, at least once a second)."""
    rng = random.Random(7)
    main = _main_stacks(rng)
    workers = _worker_stacks()
    step_s = 1.0 / steps_per_s
    next_step, k = t0 + 5.0, 0  # the loop starts after 5 s of imports
    for sec in range(seconds):
        batch: list[Sample] = []
        base = t0 + sec
        for tenth in range(hz):
            ts = base + tenth / hz
            i = sec * 10 + tenth * 10 // hz
            half = tenth % 5 == 0
            batch.append(
                ProcessSample(
                    ts,
                    PID,
                    True,
                    _procs(ts, i, True),
                    150.0 + 20 * rng.random(),
                    2_600 << 20,
                    i * 139264,
                    i * 4096,
                    18,
                    tree_runnable=2 if half else None,
                    cores=2,
                    sched=_sched(rng) if half else None,
                )
            )
            batch.append(
                SystemSample(
                    ts, (80.0 + 10 * rng.random(), 75.0), 80.0, 0.5, 6 << 30, 16 << 30, 0, 0
                )
            )
        while next_step < base + 1.0:
            end = next_step + step_s * (0.8 + 0.4 * rng.random())
            wait = (end - next_step) * (0.5 + 0.3 * rng.random())
            batch.append(
                StepSample(
                    end,
                    k,
                    next_step,
                    end - next_step,
                    wait,
                    "torch-dataloader",
                    32,
                    PID,
                    wait_cpu_s=wait * 0.1,
                    forward_s=0.02,
                    backward_s=0.01,
                    optimizer_s=0.001,
                    phase_hint="train",
                    autograd=True,
                    wait_run_s=wait * 0.1,
                    wait_queue_s=wait * 0.05,
                )
            )
            if k % 50 == 49:
                batch.append(
                    Event(end, "log", f"step {k + 1}: loss 0.{k % 97:02d}", {"stream": "stdout"})
                )
            next_step, k = end, k + 1
        picks = rng.sample(main, 14)
        stacks = [
            StackCount(PID, MAIN_TID, "MainThread", f, 4 + rng.randint(0, 8), c) for f, c in picks
        ]
        stacks.append(StackCount(PID, PIN_TID, "pin_memory", _IDLE, 100, "idle"))
        stacks.append(StackCount(PID, AGENT_TID, "sofa-top-agent", _IDLE, 100, "idle"))
        for w in WORKERS:
            stacks += [StackCount(w, w, "MainThread", f, 20, c) for f, c in rng.sample(workers, 3)]
        batch.append(StackWindow(base, base + 1.0, 100.0, 100, tuple(stacks), 4.0))
        if sec % 3 == 1:
            top = [{"pid": 9000 + j, "name": f"job{j}", "cores": 0.2} for j in range(3)]
            batch.append(Event(base + 0.5, "neighbours", "", {"others_cores": 0.6, "top": top}))
        if sec % 30 == 2:
            batch.append(
                AgentInfo(
                    base + 0.7,
                    PID,
                    "3.11.7",
                    (("torch", "2.5.1"),),
                    ("torch-dataloader", "torch-optimizer", "torch-backward", "torch-model-call"),
                    (("tf-eager", "not imported by the workload"),),
                    0,
                )
            )
        if sec % 5 == 3:
            stage = PipelineStage("DataLoader", "source", 0, 2, 0.012)
            batch.append(PipelineSample(base + 0.8, "torch", (stage,), pid=PID))
        if sec % 300 == 150:
            kind = ("input-bound", "compute-bound")[(sec // 300) % 2]
            data = {
                "kind": kind,
                "confidence": 0.8,
                "headline": kind,
                "severity": None,
                "evidence": {"input_fraction": 0.6},
                "recommendations": [],
            }
            batch.append(Event(base + 0.9, "verdict", kind, data))
        batch.sort(key=lambda s: s.ts)
        yield batch


def write_long(path: Path, seconds: int, steps_per_s: float = 10.0, hz: int = 10) -> Session:
    """A session of ``seconds`` recorded seconds (ending now) in ``path``, as the hub leaves it
    when it is asked to stop: everything written and committed, not yet finalized. Start it
    (``Session.start``) and stop it (``Session.stop``) to finalize it as the hub does.
    ``steps_per_s`` and ``hz``: the steps' and the process samples' rates (``samples``)."""
    t0 = time.time() - seconds - 1.0
    store = SessionStore(path)
    session = Session(TARGET, [], store, mode="record", extra_meta={"name": "train"})
    store.set_meta(started=t0)
    store.write(
        [Event(t0 + 0.3, "agent-connected", "agent connected", {"pid": PID, "mode": "launch"})]
    )
    for n, batch in enumerate(samples(seconds, t0, steps_per_s, hz)):
        store.write(batch)
        if n % 60 == 59:
            store.commit()
    end = t0 + seconds
    store.write(
        [
            ProcessSample(
                end,
                PID,
                False,
                _procs(end, seconds * 10, False),
                None,
                None,
                None,
                None,
                None,
                exit_code=0,
            ),
            Event(
                end,
                "target-exit",
                f"target PID {PID} exited with code 0",
                {"pid": PID, "exit_code": 0},
            ),
        ]
    )
    store.commit()
    return session
