"""Ranks of a data-parallel job: who a process is in the job, and how each rank spends a step.

``RankId`` comes from a process's environment (torchrun's ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``GROUP_RANK``, ...; ``TF_CONFIG`` for ``tf.distribute``), read by the process
collector from ``/proc/PID/environ`` or reported by the agent in its ``hello`` frame (the
parsing itself is ``sofa_top.agent.rankenv``: the agent must stay stdlib-only). ``RankStat`` is
what the ranks pane, ``record --json`` and the Prometheus exporter show per rank; the rule that
turns ranks into a ``straggler`` or ``balanced`` verdict lives in ``sofa_top.analysis.ranks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sofa_top.datamodel.units import Percent, Pid
from sofa_top.datamodel.verdict import Verdict
from sofa_top.datamodel.verdict_evidence import input_cause_of

RankSource = Literal["torchrun", "tf-config"]


def _opt_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


@dataclass(frozen=True, slots=True)
class RankId:
    """Where one process sits in a distributed job."""

    rank: int  # global rank (RANK; the task's index among TF workers)
    world_size: int | None = None  # WORLD_SIZE
    local_rank: int | None = None  # LOCAL_RANK: its index on its node
    local_world_size: int | None = None  # LOCAL_WORLD_SIZE
    group_rank: int | None = None  # torchrun's node rank (GROUP_RANK)
    host: str = ""  # the machine it runs on
    master: str = ""  # MASTER_ADDR:MASTER_PORT (torchrun) or the chief's address (TF)
    source: RankSource = "torchrun"

    @property
    def node(self) -> str:
        """The host plus torchrun's node rank: two launchers on one host are two nodes."""
        if self.group_rank is None:
            return self.host
        return f"{self.host}/{self.group_rank}"

    def as_json(self) -> dict[str, object]:
        """The fields as JSON (the ``data`` of a ``rank`` event, the agent's ``hello.rank``)."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "group_rank": self.group_rank,
            "host": self.host,
            "master": self.master,
            "source": self.source,
            "node": self.node,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> RankId | None:
        """The inverse of ``as_json``; None when ``d`` has no integer ``rank`` >= 0."""
        rank = _opt_int(d.get("rank"))
        if rank is None or rank < 0:
            return None
        host, master = d.get("host"), d.get("master")
        return cls(
            rank=rank,
            world_size=_opt_int(d.get("world_size")),
            local_rank=_opt_int(d.get("local_rank")),
            local_world_size=_opt_int(d.get("local_world_size")),
            group_rank=_opt_int(d.get("group_rank")),
            host=host if isinstance(host, str) else "",
            master=master if isinstance(master, str) else "",
            source="tf-config" if d.get("source") == "tf-config" else "torchrun",
        )


@dataclass(frozen=True, slots=True)
class RankStat:
    """One rank over a window: how its steps split, and its own verdict."""

    rank: int
    pid: Pid
    node: str
    local_rank: int | None = None
    world_size: int | None = None
    steps: int = 0  # steps in the window
    step_s: float | None = None  # median step time
    input_wait_fraction: float | None = None  # of the step time, 0..1
    collective_wait_fraction: float | None = None  # None: not measured (TF ranks, no DDP)
    verdict: Verdict | None = None  # the rank's own verdict (``analysis.verdicts.judge``)
    cpu_percent: Percent | None = None  # the rank's process and its workers, % of one core
    alive: bool = True
    exit: str | None = (
        None  # how the rank ended, once it did ("exited with code 1: RuntimeError ...")
    )
    run: str = ""  # the sofa-top session it was recorded in (``cluster`` reads several)

    @property
    def compute_fraction(self) -> float | None:
        """What is left of the step: neither waiting for input nor for the other ranks."""
        if self.input_wait_fraction is None:
            return None
        return max(0.0, 1.0 - self.input_wait_fraction - (self.collective_wait_fraction or 0.0))

    @property
    def cause(self) -> str | None:
        """Why the rank is slow: the input cause when input-bound, else its verdict kind."""
        v = self.verdict
        if v is None:
            return None
        cause = input_cause_of(v.evidence)
        if v.kind == "input-bound" and cause is not None:
            return cause
        return v.kind

    def as_json(self) -> dict[str, object]:
        """One item of ``ranks`` in ``record --json`` and ``cluster --json``."""
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node": self.node,
            "pid": self.pid,
            "world_size": self.world_size,
            "steps": self.steps,
            "step_s": _round(self.step_s, 6),
            "input_wait_fraction": _round(self.input_wait_fraction, 4),
            "collective_wait_fraction": _round(self.collective_wait_fraction, 4),
            "compute_fraction": _round(self.compute_fraction, 4),
            "cpu_percent": _round(self.cpu_percent, 1),
            "verdict": self.verdict.kind if self.verdict is not None else None,
            "cause": self.cause,
            "headline": self.verdict.headline if self.verdict is not None else "",
            "alive": self.alive,
            "exit": self.exit,
            "run": self.run or None,
        }


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)
