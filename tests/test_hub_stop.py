"""What collectors emit while they stop is recorded, however much it is: after the target's
exit the agent collector reads its sockets' backlog (a step flood, the agent's bye), and the hub
records it all before it finalizes the file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sofa_top.collectors.base import Emit
from sofa_top.datamodel.samples import Event, ProcessSample, StepSample
from sofa_top.datamodel.snapshot import TargetInfo
from sofa_top.recording.hub import QUEUE_MAX, Session
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.store import SessionStore

BACKLOG = 3 * QUEUE_MAX  # more than the hub's queue holds, and than one batch it takes


class ExitThenBacklog:
    """Says the target exited, then, once told to stop, emits a backlog of steps and a bye
    (what the agent collector's drain does after an exit)."""

    name = "agent"  # the collector that gets the waiting emit

    def run(self, emit: Emit, stop: threading.Event) -> None:
        emit(ProcessSample(time.time(), 1, False, (), None, None, None, None, None, exit_code=0))
        stop.wait(60)
        t0 = time.time()
        for i in range(BACKLOG):
            emit(StepSample(t0 + i * 1e-6, i, t0 + i * 1e-6, 1e-6, 0.0, "torch-optimizer"))
        emit(Event(time.time(), "agent-exit", "agent exited", {"dropped": 0}))


def test_a_backlog_emitted_while_stopping_after_the_exit_is_all_recorded(tmp_path: Path) -> None:
    target = TargetInfo(pid=1, name="train", cmdline=("python", "train.py"), launched=True)
    out = tmp_path / "s.sofa"
    s = Session(target, [ExitThenBacklog()], SessionStore(out), mode="launch")
    s.start()
    assert s.wait(120), "the session did not finish after the target's exit"
    assert s.end_reason == "target exited" and s.dropped == 0
    r = SessionReader(out)
    assert r.count_steps() == BACKLOG
    assert [e.kind for e in r.events("agent-exit")] == ["agent-exit"]
