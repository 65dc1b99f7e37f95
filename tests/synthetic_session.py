"""A synthetic session with known values: what the export tests write and read back."""

from pathlib import Path

from sofa_top.datamodel.samples import (
    Event,
    Frame,
    GpuDevice,
    GpuSample,
    ProcessSample,
    ProcInfo,
    Sample,
    StackCount,
    StackWindow,
    StepSample,
    SystemSample,
)
from sofa_top.recording.store import SessionStore

T0 = 1_700_000_000.0
PID, CHILD = 4242, 4243
MAIN_TID = 0x7F00_0000_1000  # a pthread id, as py-spy reports without native tids
TRAIN = Frame("<module>", "/w/train.py", 40)
STEP = Frame("train_step", "/w/train.py", 20)
FETCH = Frame("__next__", "/torch/utils/data/dataloader.py", 630)
FWD = Frame("forward", "/w/model.py", 12)
WORKER = Frame("_worker_loop", "/torch/utils/data/_utils/worker.py", 300)
LOAD = Frame("load", "/w/data.py", 7)
SLEEP = Frame("wait", "/usr/lib/python3.11/threading.py", 320)


def tree_cpu(i: int) -> float:
    return 100.0 + i


def gpu_util(k: int) -> float:
    return float(10 * k % 100)


def step_wait(k: int) -> float:
    return 0.1 if k % 2 == 0 else 0.3


VERDICTS = [
    (T0 + 2.0, "input-bound (moderate)", "input-bound", "moderate"),
    (T0 + 6.0, "compute-bound", "compute-bound", ""),
]


def verdict_event(ts: float, headline: str, kind: str, severity: str) -> Event:
    data: dict[str, object] = {
        "kind": kind,
        "confidence": 0.8,
        "headline": headline,
        "severity": severity,
        "evidence": {"input_fraction": 0.2},
        "recommendations": ["add .prefetch(tf.data.AUTOTUNE) after batch()"],
    }
    return Event(ts, "verdict", headline, data)


def session_samples(seconds: int, t0: float = T0) -> list[Sample]:
    """Samples of a ``seconds``-long training run starting at ``t0``, in time order."""
    out: list[Sample] = []
    for i in range(seconds * 10):
        ts = t0 + i / 10
        procs = (
            ProcInfo(
                PID,
                1,
                "python",
                ("python", "train.py"),
                t0 - 5,
                90.0 + i,
                5,
                (100 + i) << 20,
                i * 1000,
                0,
                1,
                "running",
                role="target",
            ),
            ProcInfo(
                CHILD,
                PID,
                "python",
                ("python", "-c", "worker"),
                t0 - 4,
                10.0,
                2,
                50 << 20,
                0,
                0,
                1,
                "running",
                role="DataLoader worker",
            ),
        )
        out.append(
            ProcessSample(ts, PID, True, procs, tree_cpu(i), (150 + i) << 20, i * 1000, 0, 7)
        )
        out.append(
            SystemSample(
                ts + 0.05, (40.0, 60.0 + i % 10), 50.0 + (i % 10) / 2, 1.0, 8 << 30, 16 << 30, 0, 0
            )
        )
    for k in range(seconds * 2):
        out.append(
            GpuSample(
                t0 + 0.5 * k + 0.01,
                "ok",
                (
                    GpuDevice(
                        0,
                        "H200",
                        gpu_util(k),
                        (1 + k) << 30,
                        140 << 30,
                        100.0 + k,
                        50.0,
                        1980.0,
                        1 << 30,
                    ),
                ),
            )
        )
    for j in range(seconds):
        out.append(
            StackWindow(
                t0 + j,
                t0 + j + 1,
                100.0,
                100,
                (
                    StackCount(PID, MAIN_TID, "MainThread", (TRAIN, STEP, FETCH), 30, "input"),
                    StackCount(PID, MAIN_TID, "MainThread", (TRAIN, STEP, FWD), 70, "compute"),
                    StackCount(CHILD, CHILD, "MainThread", (WORKER, LOAD), 60, "input"),
                    StackCount(CHILD, CHILD, "MainThread", (WORKER, SLEEP), 40, "idle"),
                ),
                2.0,
            )
        )
    for k in range(seconds * 2):
        start = t0 + 0.5 * k
        out.append(
            StepSample(start + 0.5, k, start, 0.5, step_wait(k), "torch-dataloader", 32, PID)
        )
    out += [verdict_event(t0 - T0 + ts, h, k, s) for ts, h, k, s in VERDICTS]
    out += [
        Event(t0 + 7.0, "optimize", "prefetch on", {"toggle": "prefetch"}),
        Event(t0 + seconds - 0.5, "target-exit", "target exited (code 0)", {"exit_code": 0}),
        Event(t0 + 1.0, "agent", "agent in pid 4242", {"pid": PID}),
    ]
    out.sort(key=lambda s: s.ts)
    return out


def make_session(path: Path, seconds: int = 10, *, close: bool = True) -> SessionStore:
    """A synthetic session file; ``close=False`` leaves the writer open (committed)."""
    store = SessionStore(path)
    store.set_meta(
        mode="record",
        target={"pid": PID, "name": "train", "cmdline": ["python", "train.py"]},
        started=T0,
        cpu_count=8,
        mem_total=16 << 30,
        host="testhost",
    )
    store.write(session_samples(seconds))
    store.commit()
    if close:
        store.close(ended=T0 + seconds, end_reason="target exited", exit_code=0)
    return store


def session_file(tmp_path: Path) -> Path:
    """A closed synthetic session, ``run.sofa`` in ``tmp_path``."""
    path = tmp_path / "run.sofa"
    make_session(path)
    return path
