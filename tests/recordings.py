"""Real workloads recorded once per test session, asserted on by many tests.

A TensorFlow or PyTorch workload takes seconds to import and run on a 2-core machine; the
launch-mode tests (``tests/test_launch.py``: fractions and verdicts through the CLI) and the
agent tests (``tests/agent/``: steps, hooks, pipelines) used to run each shape twice. Now each
shape (a workload and its arguments, named in ``SHAPES``) is recorded once, by the real
``sofa-top record --json -- python tests/workloads/...``, the first time a test asks for it; every
test that asks again gets the same session file. A recording that failed fails every test that
asks for it, with the same message.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sofa_top.datamodel.samples import (
    AgentInfo,
    Event,
    PipelineSample,
    PipelineStage,
    StepSample,
)
from sofa_top.recording.reader import SessionReader

WORKLOADS = Path(__file__).parent / "workloads"
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))

# The eager compute shapes run one intra-op thread, as the torch workloads do: on cores other
# jobs keep busy (a CPU hog, the other test workers), TensorFlow's default pool of one thread
# per core is cpu-oversubscribed (rightly), not compute-bound.
_ONE = ("--threads", "1")

# name -> (script in tests/workloads, its arguments, warm-up steps the workload excludes)
SHAPES: dict[str, tuple[str, tuple[str, ...], int]] = {
    "tf-eager input next": ("agent_tf_eager.py", ("--mode", "input", "--loop", "next"), 5),
    "tf-eager compute next": (
        "agent_tf_eager.py",
        ("--mode", "compute", "--loop", "next", *_ONE),
        5,
    ),
    "tf-eager input for": ("agent_tf_eager.py", ("--mode", "input", "--loop", "for"), 5),
    "tf-eager compute for": (
        "agent_tf_eager.py",
        ("--mode", "compute", "--loop", "for", *_ONE),
        5,
    ),
    "keras fit input": ("agent_keras_fit.py", ("--mode", "input"), 5),
    # (Keras' own pipeline threads need the default pools: with one intra-op thread its input
    # wait grows to the compute/input border on a busy machine)
    "keras fit compute": ("agent_keras_fit.py", ("--mode", "compute"), 5),
    "torch input": ("agent_torch.py", ("--mode", "input"), 3),
    "torch compute": ("agent_torch.py", ("--mode", "compute"), 3),
    "torch optimizer": ("agent_torch.py", ("--mode", "optimizer"), 3),
}


def _pipeline(d: dict[str, Any]) -> PipelineSample:
    stages = tuple(PipelineStage(**st) for st in d.pop("stages", ()))
    return PipelineSample(**{**d, "stages": stages})


def _info(d: dict[str, Any]) -> AgentInfo:
    return AgentInfo(
        **{
            **d,
            "frameworks": tuple(tuple(x) for x in d["frameworks"]),
            "hooks_applied": tuple(d["hooks_applied"]),
            "hooks_skipped": tuple(tuple(x) for x in d["hooks_skipped"]),
        }
    )


@dataclass
class Recording:
    """One finished ``sofa-top record --json -- CMD`` run: its summary and its session."""

    name: str
    path: Path
    summary: dict[str, Any]
    stderr: str
    warmup: int
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def _read(self, what: str) -> Any:
        if what not in self._cache:
            reader = SessionReader(self.path)
            try:
                self._cache["steps"] = reader.steps()
                self._cache["events"] = reader.events()
            finally:
                reader.close()
        return self._cache[what]

    @property
    def exit_code(self) -> int:
        return int(self.summary["exit_code"])

    def steps(self, source: str | None = None) -> list[StepSample]:
        steps: list[StepSample] = self._read("steps")
        return [s for s in steps if source is None or (s.name or s.source) == source]

    def events(self, *kinds: str) -> list[Event]:
        events: list[Event] = self._read("events")
        return [e for e in events if e.kind in kinds]

    def pipelines(self) -> list[PipelineSample]:
        return [_pipeline(dict(e.data)) for e in self.events("pipeline")]

    def infos(self) -> list[AgentInfo]:
        return [_info(dict(e.data)) for e in self.events("agent")]

    def stdout(self) -> list[str]:
        """The workload's stdout lines, as the session kept them."""
        return [e.message for e in self.events("log") if e.data.get("stream") == "stdout"]

    def value(self, key: str) -> float:
        """The number the workload printed as ``KEY=<x>`` (last occurrence)."""
        pattern = re.compile(rf"^{re.escape(key)}=(\S+)$")
        found = [m.group(1) for line in self.stdout() if (m := pattern.match(line))]
        assert found, f"{key} not in the output of {self.name}: {self.describe()}"
        return float(found[-1])

    def agent_fraction(self, source: str, first_step: int) -> float:
        """Input wait over step time, from the agent's steps of ``source`` numbered
        ``first_step`` on (the steps the workload measured itself)."""
        steps = [s for s in self.steps(source) if s.step >= first_step]
        assert steps, f"no {source} steps from {first_step}: {self.describe()}"
        total = sum(s.duration_s for s in steps)
        assert total > 0, "no step time"
        return sum(s.input_wait_s for s in steps) / total

    def describe(self) -> str:
        """What was recorded, for assertion messages."""
        kinds: dict[str, int] = {"steps": len(self.steps())}
        for e in self._read("events"):
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        stderr = [e.message for e in self.events("log") if e.data.get("stream") == "stderr"]
        return f"{self.path}: exit {self.summary.get('exit_code')}, {kinds}; stderr: {stderr[-8:]}"


class Recordings:
    """Records each shape of ``SHAPES`` on first use, into one directory."""

    def __init__(
        self,
        directory: Path,
        shapes: dict[str, tuple[str, tuple[str, ...], int]] | None = None,
    ) -> None:
        self.directory = directory
        self.shapes = SHAPES if shapes is None else shapes
        self._done: dict[str, Recording | str] = {}

    def get(self, name: str) -> Recording:
        if name not in self._done:
            self._done[name] = self._record(name)
        done = self._done[name]
        if isinstance(done, str):
            raise AssertionError(f"recording {name!r} failed: {done}")
        return done

    def _record(self, name: str) -> Recording | str:
        script, args, warmup = self.shapes[name]
        out = self.directory / (name.replace(" ", "-") + ".sofa")
        cmd = [sys.executable, str(WORKLOADS / script), *args, "--warmup", str(warmup)]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        try:
            proc = subprocess.run(
                [SOFA_TOP, "record", "--json", "-o", str(out), "--", *cmd],
                capture_output=True,
                text=True,
                timeout=300,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return f"{cmd} did not finish within 300 s"
        if proc.returncode != 0:
            return f"sofa-top exited {proc.returncode}: {proc.stderr[-2000:]}"
        return Recording(name, out, json.loads(proc.stdout), proc.stderr, warmup)
