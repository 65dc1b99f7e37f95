"""The agent changes nothing a program does: run a workload without sofa-top and under
``sofa-top record``, and read what each run did the same way (its exit status, the type of
the error it died of, the last loss it logged).

Used by ``tests/test_differential.py`` (the workloads cheap enough for the suite) and by
``benchmarks/differential.py`` (every test workload and corpus script).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sofa_top.recording.reader import SessionReader

SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
# the last line of a traceback: "ValueError: ...", "torch.OutOfMemoryError", "KeyboardInterrupt"
_ERROR = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))\b(?::|$)"
)
# "loss 0.69", "loss: 0.6931", "loss=0.5", "'loss': 0.7", "train_loss 1e-3" (the last one counts)
_LOSS = re.compile(r"loss\W{0,3}\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class Outcome:
    """What one run of a workload did."""

    status: int  # the exit status, as a shell reports it (128 + N: killed by signal N)
    error: str | None  # the type of the exception it died of (from its traceback), if any
    loss: str | None  # the last loss it printed, as printed


def clean_env() -> dict[str, str]:
    """This environment without an outer sofa-top's agent variables, TensorFlow kept quiet."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SOFA_TOP_SOCKET", "SOFA_TOP_AGENT_SETTINGS", "PYTHONPATH")
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def shell_status(code: int) -> int:
    """``Popen.returncode`` as a shell reports it: 128 + N for death by signal N."""
    return 128 - code if code < 0 else code


def outcome(code: int, stdout: Sequence[str], stderr: Sequence[str]) -> Outcome:
    """Read a run's outcome from its exit code and its output lines."""
    errors = [m.group(1) for line in stderr if (m := _ERROR.match(line.strip()))]
    losses = [m.group(1) for line in stdout for m in _LOSS.finditer(line)]
    losses = losses or [m.group(1) for line in stderr for m in _LOSS.finditer(line)]
    return Outcome(
        shell_status(code),
        errors[-1] if errors and code != 0 else None,
        losses[-1] if losses else None,
    )


def run_plain(
    cmd: Sequence[str], env: Mapping[str, str], cwd: Path | None = None, timeout: float = 300
) -> Outcome:
    """Run ``cmd`` without sofa-top."""
    r = subprocess.run(
        list(cmd), env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    return outcome(r.returncode, _lines(r.stdout), _lines(r.stderr))


@dataclass(frozen=True)
class Recorded:
    """A run under ``sofa-top record``: the workload's outcome and sofa-top's own."""

    workload: Outcome
    record_status: int  # sofa-top record's exit status
    session: Path
    record_stderr: str
    agent_errors: tuple[str, ...]  # the agent's own failures (it switches itself off at one)
    step_sources: frozenset[str]  # the clocks that measured steps


def run_recorded(
    cmd: Sequence[str],
    env: Mapping[str, str],
    session: Path,
    cwd: Path | None = None,
    timeout: float = 300,
) -> Recorded:
    """Run ``cmd`` under ``sofa-top record`` and read the workload's outcome back from the
    session: its exit code and its output."""
    r = subprocess.run(
        [SOFA_TOP, "record", "--json", "-o", str(session), "--", *cmd],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    reader = SessionReader(session)
    try:
        code = reader.meta().get("exit_code")
        logs = reader.events("log")
        errors = tuple(e.message for e in reader.events("agent-error"))
        sources = frozenset(s.name or s.source for s in reader.steps())
    finally:
        reader.close()
    out = [e.message for e in logs if e.data.get("stream") == "stdout"]
    err = [e.message for e in logs if e.data.get("stream") == "stderr"]
    workload = outcome(code if isinstance(code, int) else -999, out, err)
    return Recorded(workload, r.returncode, session, r.stderr, errors, sources)


def _lines(text: str) -> list[str]:
    # a progress bar rewrites its line with \r: the last rewrite is what stays on screen
    return [line.rsplit("\r", 1)[-1] for line in text.splitlines()]
