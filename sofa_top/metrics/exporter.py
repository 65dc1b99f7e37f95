"""``--metrics-port``: serve the live session at ``/metrics`` (``prometheus_client``).

A snapshot consumer like the TUI: the session hands it every snapshot (about once a second)
and each scrape turns the latest one into gauges (names in ``sofa_top.metrics.names``). The
port is bound when the exporter is made, before anything is launched or recorded, so that a
port in use is one clear line and nothing else; it listens on 127.0.0.1 unless the user asks
for another address.
"""

from __future__ import annotations

import platform
import statistics
import threading
from collections.abc import Iterable, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sofa_top import __version__
from sofa_top.analysis import steps as step_facts
from sofa_top.analysis.ranks import owners
from sofa_top.analysis.verdicts import WINDOW_S
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.ranks import RankStat
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.datamodel.verdict import Verdict
from sofa_top.datamodel.verdict_evidence import StragglerEvidence
from sofa_top.metrics import names as n
from sofa_top.metrics.spec import MetricsSpec

VerdictKey = tuple[str, str, str]  # kind, cause, severity


def _gauge(name: str, doc: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _str(v: int | None) -> str:
    return "" if v is None else str(v)


def _job_stat(snapshot: Snapshot) -> RankStat | None:
    """A job that is not distributed, as rank 0 of 1 (from the recent steps)."""
    steps = [s for s in snapshot.steps if s.ts >= snapshot.ts - WINDOW_S]
    if not steps:
        return None
    total = sum(s.duration_s for s in steps)
    measured = [s.collective_s for s in steps if s.collective_s is not None]
    return RankStat(
        rank=0,
        pid=snapshot.target.pid,
        node=platform.node(),
        local_rank=0,
        world_size=1,
        steps=len(steps),
        step_s=statistics.median(s.duration_s for s in steps),
        input_wait_fraction=step_facts.input_fraction(
            steps,
            snapshot.stacks.host_split if snapshot.stacks else None,
            snapshot.stacks.host_samples if snapshot.stacks else 0,
        ),
        collective_wait_fraction=sum(measured) / total if measured and total > 0 else None,
        verdict=snapshot.verdict,
    )


class _Families:
    """The gauges of one scrape."""

    def __init__(self) -> None:
        rl = n.RANK_LABELS
        self.step = _gauge(n.STEP_SECONDS, "Median step time over the last 10 s", rl)
        self.input = _gauge(n.INPUT_WAIT, "Share of the step spent waiting for input", rl)
        self.coll = _gauge(
            n.COLLECTIVE_WAIT, "Share of the step blocked in collectives (all-reduce, ...)", rl
        )
        self.compute = _gauge(n.COMPUTE, "Share of the step computing (neither wait)", rl)
        self.rate = _gauge(n.STEPS_PER_SECOND, "Steps per second (1 / median step time)", rl)
        self.count = _gauge(n.WINDOW_STEPS, "Steps the step figures are computed from", rl)
        self.verdict = _gauge(
            n.VERDICT_INFO,
            "1 for the rank's current verdict; earlier ones stay at 0",
            (*rl, "kind", "cause", "severity"),
        )
        self.pid = _gauge(n.RANK_PID, "The rank's process id", rl)
        self.up = _gauge(n.RANK_UP, "1 while the rank's process runs, 0 once it exited", rl)
        self.world = _gauge(n.WORLD_SIZE, "The job's world size", rl)
        self.cpu = _gauge(n.PROCESS_CPU, "CPU of the rank's processes, % of one core", rl)
        self.rss = _gauge(n.PROCESS_RSS, "Resident memory of the rank's processes", rl)

    def all(self) -> list[Metric]:
        return [v for v in vars(self).values() if isinstance(v, Metric)]


def metric_families(
    snapshot: Snapshot | None, run: str, host: str, seen: dict[tuple[str, ...], set[VerdictKey]]
) -> list[Metric]:
    """The gauges for ``snapshot`` (``seen``: the verdicts each rank had, kept at 0)."""
    info = _gauge(n.INFO, "sofa-top is recording this run", ("run", "node", "host", "version"))
    info.add_metric([run, host, host, __version__], 1.0)
    out: list[Metric] = [info]
    if snapshot is None:
        return out
    f = _Families()
    stats = list(snapshot.ranks)
    if not stats:
        job = _job_stat(snapshot)
        stats = [job] if job is not None else []
    rss: dict[int, float] = {}
    cpu: dict[int, float] = {}
    if snapshot.process is not None:
        procs = [p for p in snapshot.process.procs if p.alive]
        roots = {s.pid for s in stats}
        belongs = owners({p.pid: p.ppid for p in procs}, roots)
        for p in procs:
            root = belongs.get(p.pid)
            if root is not None:
                cpu[root] = cpu.get(root, 0.0) + (p.cpu_percent or 0.0)
                rss[root] = rss.get(root, 0.0) + float(p.rss or 0)
    for s in stats:
        labels = [run, s.node, str(s.rank), _str(s.local_rank)]
        f.pid.add_metric(labels, float(s.pid))
        f.up.add_metric(labels, 1.0 if s.alive else 0.0)
        f.count.add_metric(labels, float(s.steps))
        if s.world_size is not None:
            f.world.add_metric(labels, float(s.world_size))
        if s.step_s:
            f.step.add_metric(labels, s.step_s)
            f.rate.add_metric(labels, 1.0 / s.step_s)
        for fam, value in (
            (f.input, s.input_wait_fraction),
            (f.coll, s.collective_wait_fraction),
            (f.compute, s.compute_fraction),
        ):
            if value is not None:
                fam.add_metric(labels, value)
        # the rank's mean over the window: one 0.1 s reading is quantized to 10% by the clock tick
        mean_cpu = s.cpu_percent if s.cpu_percent is not None else cpu.get(s.pid)
        if mean_cpu is not None:
            f.cpu.add_metric(labels, mean_cpu)
        if s.pid in rss:
            f.rss.add_metric(labels, rss[s.pid])
        _verdicts(f.verdict, labels, s.verdict, s.cause, seen)
    out += f.all()
    out += _machine(snapshot, run, host)
    if snapshot.rank_verdict is not None:
        out.append(_job_verdict(snapshot.rank_verdict, run, host))
    return out


def _verdicts(
    fam: GaugeMetricFamily,
    labels: list[str],
    verdict: Verdict | None,
    cause: str | None,
    seen: dict[tuple[str, ...], set[VerdictKey]],
) -> None:
    known = seen.setdefault(tuple(labels), set())
    current: VerdictKey | None = None
    if verdict is not None:
        current = (verdict.kind, cause or "", verdict.severity or "")  # labels are strings
        known.add(current)
    for key in sorted(known):
        fam.add_metric([*labels, *key], 1.0 if key == current else 0.0)


def _job_verdict(v: Verdict, run: str, host: str) -> GaugeMetricFamily:
    fam = _gauge(
        n.JOB_VERDICT_INFO,
        "This sofa-top's cross-rank verdict over its node's ranks",
        ("run", "node", "kind", "straggler"),
    )
    rank = v.evidence.rank if isinstance(v.evidence, StragglerEvidence) else None
    fam.add_metric([run, host, v.kind, "" if rank is None else str(rank)], 1.0)
    return fam


def _machine(snapshot: Snapshot, run: str, host: str) -> list[Metric]:
    labels = ("run", "node")
    out: list[Metric] = []
    proc = snapshot.process
    if proc is not None:
        for name, doc, value in (
            (n.TREE_CPU, "CPU of the whole target tree, % of one core", proc.tree_cpu_percent),
            (n.TREE_RSS, "Resident memory of the whole target tree", proc.tree_rss),
        ):
            if value is not None:
                fam = _gauge(name, doc, labels)
                fam.add_metric([run, host], float(value))
                out.append(fam)
    sys_ = snapshot.system
    if sys_ is not None and sys_.error is None:
        for name, doc, value in (
            (n.SYSTEM_CPU, "Machine CPU, mean of the cores, 0..100", sys_.cpu_total),
            (n.SYSTEM_MEMORY, "Machine memory in use", float(sys_.mem_used)),
        ):
            fam = _gauge(name, doc, labels)
            fam.add_metric([run, host], value)
            out.append(fam)
    gpu = snapshot.gpu
    if gpu is not None and gpu.status == "ok":
        gl = ("run", "node", "gpu")
        fams = {
            "util": _gauge(n.GPU_UTIL, "GPU utilization", gl),
            "mem": _gauge(n.GPU_MEMORY, "GPU memory in use", gl),
            "power": _gauge(n.GPU_POWER, "GPU power draw", gl),
            "temp": _gauge(n.GPU_TEMPERATURE, "GPU temperature", gl),
        }
        for d in gpu.devices:
            values = {"util": d.util, "mem": d.mem_used, "power": d.power_w, "temp": d.temp_c}
            for key, value in values.items():
                if value is not None:
                    fams[key].add_metric([run, host, str(d.index)], float(value))
        out += list(fams.values())
    return out


class _SnapshotCollector(Collector):
    def __init__(self, exporter: MetricsExporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterable[Metric]:
        return self._exporter.families()


class MetricsExporter:
    """Serves ``/metrics`` from the latest snapshot until ``close``."""

    def __init__(self, spec: MetricsSpec, run: str) -> None:
        """Bind ``spec`` now (raises UserError when the port is taken or the host is bad)."""
        self.run = run
        self.host = platform.node()
        self._snapshot: Snapshot | None = None
        self._seen: dict[tuple[str, ...], set[VerdictKey]] = {}
        self._lock = threading.Lock()  # scrapes may come concurrently (a threading server)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_SnapshotCollector(self))
        where = f"{spec.host}:{spec.port}"
        try:
            server, _thread = start_http_server(spec.port, addr=spec.host, registry=registry)
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            raise UserError(f"cannot serve metrics on {where}: {why}") from None
        self._server: WSGIServer | None = server
        self.port = int(server.server_address[1])
        self.url = f"http://{spec.host}:{self.port}/metrics"

    def update(self, snapshot: Snapshot) -> None:
        """The newest snapshot (called from the hub's thread)."""
        self._snapshot = snapshot

    def families(self) -> list[Metric]:
        """The gauges of the latest snapshot."""
        with self._lock:
            return metric_families(self._snapshot, self.run, self.host, self._seen)

    def close(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
