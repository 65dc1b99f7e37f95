"""Runs workloads with the agent injected and collects the samples sofa-top would see."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from sofa_top.agent.launch_env import agent_env
from sofa_top.collectors.agent import AgentCollector, AgentServer
from sofa_top.datamodel.samples import AgentInfo, Event, PipelineSample, Sample, StepSample

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "tests" / "workloads"
TERMINAL_EVENTS = ("agent-exit", "agent-disconnected", "agent-protocol-error")

INPUT_BOUND = 0.20  # at or above: the loop is input-bound


def classify(fraction: float) -> str:
    """The verdict a fraction gives: "input" (>= 0.20) or "compute"."""
    return "input" if fraction >= INPUT_BOUND else "compute"


def input_fraction(steps: Sequence[StepSample]) -> float:
    """Input wait over step time, summed over ``steps``."""
    total = sum(s.duration_s for s in steps)
    assert total > 0, "no step time"
    return sum(s.input_wait_s for s in steps) / total


class LiveServer:
    """An AgentServer with its AgentCollector running in a thread, gathering samples."""

    def __init__(self, socket_dir: Path | None = None, **collector_kw: Any) -> None:
        self.server = AgentServer(socket_dir)
        self.collector = AgentCollector(self.server, **collector_kw)
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _emit(self, sample: Sample) -> None:
        with self._lock:
            self.samples.append(sample)

    def _run(self) -> None:
        try:
            self.collector.run(self._emit, self._stop)
        except BaseException as e:  # surfaced by stop()
            self.error = e

    @property
    def socket_path(self) -> Path:
        return self.server.socket_path

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def wait_for(self, predicate: Callable[[list[Sample]], bool], timeout: float = 60.0) -> bool:
        """Poll until ``predicate(samples)`` holds; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.snapshot()):
                return True
            time.sleep(0.02)
        return predicate(self.snapshot())

    def wait_settled(self, timeout: float = 60.0) -> bool:
        """Wait until every connected agent has exited or been dropped."""

        def settled(samples: list[Sample]) -> bool:
            connected = {_pid(e) for e in samples if _is_event(e, "agent-connected")}
            ended = {_pid(e) for e in samples if _is_event(e, *TERMINAL_EVENTS)}
            return connected <= ended

        return self.wait_for(settled, timeout)

    def start(self) -> LiveServer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> float:
        """Stop the collector; returns how long it took to return."""
        t0 = time.monotonic()
        self._stop.set()
        self._thread.join(timeout)
        took = time.monotonic() - t0
        assert not self._thread.is_alive(), "collector did not stop"
        if self.error is not None:
            raise self.error
        return took

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread.is_alive():
            self.stop()
        self.server.close()


def _is_event(s: Sample, *kinds: str) -> bool:
    return isinstance(s, Event) and s.kind in kinds


def _pid(e: Sample) -> object:
    return e.data.get("pid") if isinstance(e, Event) else None


@dataclass
class AgentRun:
    """A finished workload run and what the agent server collected."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    samples: list[Sample] = field(default_factory=list)

    def steps(self, source: str | None = None) -> list[StepSample]:
        return [
            s
            for s in self.samples
            if isinstance(s, StepSample) and (source is None or (s.name or s.source) == source)
        ]

    def events(self, *kinds: str) -> list[Event]:
        return [s for s in self.samples if isinstance(s, Event) and s.kind in kinds]

    def infos(self) -> list[AgentInfo]:
        return [s for s in self.samples if isinstance(s, AgentInfo)]

    def pipelines(self) -> list[PipelineSample]:
        return [s for s in self.samples if isinstance(s, PipelineSample)]

    def value(self, key: str) -> float:
        """The number printed by the workload as ``KEY=<x>`` (last occurrence)."""
        found = re.findall(rf"^{re.escape(key)}=(\S+)$", self.stdout, re.MULTILINE)
        assert found, f"{key} not in workload output:\n{self.stdout}\n{self.stderr[-3000:]}"
        return float(found[-1])

    def agent_fraction(self, source: str, first_step: int) -> float:
        """Input fraction from the agent's steps of ``source`` numbered ``first_step`` on."""
        steps = [s for s in self.steps(source) if s.step >= first_step]
        assert steps, f"no {source} steps from {first_step}: {self.summary()}"
        return input_fraction(steps)

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for s in self.samples:
            name = type(s).__name__ + (f":{s.kind}" if isinstance(s, Event) else "")
            kinds[name] = kinds.get(name, 0) + 1
        return f"rc={self.returncode} samples={kinds} stderr tail:\n{self.stderr[-2000:]}"


def workload_cmd(name: str, *args: str, python: str = sys.executable) -> list[str]:
    return [python, str(WORKLOADS / name), *args]


def run_cmd(
    cmd: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 120.0,
    cwd: Path | None = None,
) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        list(cmd),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
    )
    return proc, time.monotonic() - t0


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any agent variables (from an outer sofa-top)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SOFA_TOP_SOCKET", "SOFA_TOP_AGENT_SETTINGS", "PYTHONPATH")
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra or {})
    return env


def run_with_agent(
    cmd: Sequence[str],
    settings: Mapping[str, Any] | None = None,
    timeout: float = 120.0,
    env_extra: Mapping[str, str] | None = None,
) -> AgentRun:
    """Start a server, run ``cmd`` with the agent injected, wait for its last frames."""
    with LiveServer() as live:
        env = base_env(env_extra)
        env.update(agent_env(live.socket_path, settings, base=env))
        proc, wall = run_cmd(cmd, env, timeout)
        live.wait_settled()
        live.stop()
        return AgentRun(proc.returncode, proc.stdout, proc.stderr, wall, live.snapshot())
