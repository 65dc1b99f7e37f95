"""Detach leaves no wrapper: every callable the agent's hooks patch (torch.distributed's
collectives and ``Work.wait``, ``autograd.backward``, ``DistributedDataParallel.__init__``, the
DataLoader and tf.data iterators, Keras' trainer, global hooks, a model's train function and
the step in its closure) is, after the detach, the very object it was before the attach."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import WORKLOADS

from faults.attach_helpers import sofa_threads, value, wait_detached
from faults.conftest import running, start_sofa, wait_until
from sofa_top.recording.reader import SessionReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

HOOKS = {"torch-collectives", "torch-ddp", "torch-backward", "torch-dataloader", "keras-fit"}


def _read(path: Path, what: Callable[[SessionReader], set[str]]) -> set[str]:
    """``what`` the session holds so far (empty until it can be read)."""
    try:
        reader = SessionReader(path)
    except Exception:
        return set()
    try:
        return what(reader)
    except Exception:
        return set()
    finally:
        reader.close()


def _hooks(path: Path) -> set[str]:
    """The hooks the injected agent reported applied."""
    return _read(
        path, lambda r: {h for e in r.events("agent") for h in e.data.get("hooks_applied", [])}
    )


def _sources(path: Path) -> set[str]:
    """The step sources the session holds so far."""
    return _read(path, lambda r: {s.source for s in r.steps()})


def _line(proc: object, key: str) -> str:
    """Read the target's stdout up to the line that starts with ``key``; that line."""
    stdout = proc.stdout  # type: ignore[attr-defined]
    while True:
        line = stdout.readline().decode()
        assert line, f"the target ended before {key}"
        if line.startswith(key):
            return line.strip()


def test_detach_leaves_no_wrapper(tmp_path: Path) -> None:
    attached, stop = tmp_path / "attached", tmp_path / "stop"
    argv = [sys.executable, str(WORKLOADS / "patched_callables.py")]
    argv += ["--attached", str(attached), "--stop", str(stop)]
    out = tmp_path / "a.sofa"
    with running(argv) as proc:
        rec = start_sofa("record", "--pid", str(proc.pid), "-o", str(out), "--inject-timeout", "90")
        try:
            wait_until(lambda: {"tf-eager", "torch-collectives"} <= _hooks(out), 120, "hooks")
            attached.touch()  # it trains through every hook while the agent is in
            patched = int(_line(proc, "PATCHED_WHILE_ATTACHED=").split("=")[1])
            _line(proc, "ATTACHED_DONE")
            assert _hooks(out) >= HOOKS, _hooks(out)
            # the last steps reach the session at the agent's next flush (every 0.1 s, later
            # beside busy neighbours): the detach is stopped after them
            wait_until(lambda: {"keras-fit", "torch-dataloader"} <= _sources(out), 60, "steps")
        finally:
            rec.send_signal(signal.SIGINT)
            rec.communicate(timeout=60)
        wait_detached(proc.pid, "the agent to detach")
        assert sofa_threads(proc.pid) == []
        stop.touch()
        rest = _line(proc, "LEFT_AFTER_DETACH=")
        assert proc.wait(timeout=60) == 0
    # while attached, the hooks were in place: the comparison can see a wrapper
    assert patched >= 10, patched
    assert value(rest, "LEFT_AFTER_DETACH") == "[]", rest
    reader = SessionReader(out)
    try:
        steps = {s.source for s in reader.steps()}
        connected = [e.data for e in reader.events("agent-connected")]
    finally:
        reader.close()
    assert any(d.get("mode") == "attach" for d in connected), json.dumps(connected)
    assert {"keras-fit", "torch-dataloader"} <= steps, steps
