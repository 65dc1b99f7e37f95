"""Input causes in ``compare``: the agent's ``parallelism`` option for real in TensorFlow and
PyTorch, the parallelism search, headroom and the JSON schema.

The workloads are ``tests/workloads/input_shapes_{tf,torch}.py``; runs are short (1 repeat, a
few dozen steps) and nothing is timed: the speed goals live in ``benchmarks/input_causes.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, log_lines, validate_compare_json

from sofa_top.agent.toggles import OptimizeSpec
from sofa_top.optimizers.compare import (
    ConfigResult,
    SearchLevelStarted,
    analyze_session,
    record_one,
    run_compare,
)
from sofa_top.optimizers.compare.runner import BUFFERED_PER_PRODUCER, run_warmup
from sofa_top.optimizers.headroom import Diagnosis, Headroom, headroom, headroom_line
from sofa_top.optimizers.measures import InputStats, RunOutcome, Throughput
from sofa_top.optimizers.search import search_parallelism

CORES = len(os.sched_getaffinity(0))
LOSS = re.compile(r"loss=(\S+)")


def _cmd(framework: str, shape: str, *extra: str) -> list[str]:
    path = WORKLOADS / f"input_shapes_{framework}.py"
    return [sys.executable, str(path), "--shape", shape, "--seconds", "120", *extra]


def _losses(session: str) -> list[float]:
    return [float(m.group(1)) for line in log_lines(session) if (m := LOSS.search(line))]


def _run(tmp_path: Path, cmd: list[str], opt: dict[str, Any], steps: int) -> RunOutcome:
    path = tmp_path / "run.sofa"
    spec, problems = OptimizeSpec.from_json(opt)
    assert not problems
    memory = record_one(cmd, spec, path, "parallelism-test", steps, None, 3, timeout_s=150.0)
    return analyze_session(path, 3, steps, spec, memory)


def _sane_headroom(cr: ConfigResult) -> None:
    h = cr.headroom
    assert h.throughput is not None and h.throughput > 0, h
    assert h.fraction_reached is not None and 0 < h.fraction_reached <= 1.5, h
    assert h.unit == cr.throughput.unit == "samples/s"
    assert h.bound in ("compute", "cores", "latency")


# -- the agent's option, for real ---------------------------------------------------------------


@pytest.mark.slow
def test_torch_parallelism_sets_workers_above_the_cores(tmp_path: Path) -> None:
    n = CORES + 2
    out = _run(tmp_path, _cmd("torch", "latency"), {"prefetch": {"parallelism": n}}, steps=25)
    assert out.failed is None, out.failed
    assert out.applied == ("prefetch",), out.not_applied
    assert any(f"DataLoader(num_workers={n}, persistent_workers=True" in w for w in out.where)
    assert out.parallelism == n  # from the optimize event's data
    losses = _losses(out.session)
    assert losses and all(math.isfinite(v) for v in losses)
    assert out.memory is not None and out.memory > 0


@pytest.mark.slow
def test_tf_parallelism_overrides_autotune_and_sizes_the_pool(tmp_path: Path) -> None:
    # --autotune: map(AUTOTUNE) and a final prefetch, both of which the option must override
    n = CORES + 2
    cmd = _cmd("tf", "latency", "--autotune")
    out = _run(tmp_path, cmd, {"prefetch": {"parallelism": n}}, steps=25)
    assert out.failed is None, out.failed
    assert out.applied == ("prefetch",), out.not_applied
    assert f"tf.data: map(num_parallel_calls={n})" in out.where
    assert f"tf.data: private_threadpool_size={n} at iteration" in out.where
    assert out.parallelism == n
    losses = _losses(out.session)
    assert losses and all(math.isfinite(v) for v in losses)


# -- the search and headroom on real workloads --------------------------------------------------


@pytest.mark.slow
def test_torch_latency_search_goes_past_the_cores_and_stops(tmp_path: Path) -> None:
    events: list[object] = []
    # 60 measured steps: 16 DataLoader workers deliver in bursts (about 8 batches, then a
    # wait), and 20 steps held one burst more or less: 0.95-1.9x the headroom from one run to
    # the next; 60 hold enough of them for the rate to mean something
    r = run_compare(
        _cmd("torch", "latency"), ["baseline", "prefetch"], repeats=1, steps=60,
        warmup_steps=3, on_progress=events.append, out_dir=tmp_path, search_levels=4,
    )  # fmt: skip
    assert r.diagnosis is not None and r.diagnosis.cause == "latency", r.diagnosis
    assert r.diagnosis.cores == CORES
    assert r.search is not None
    levels = [lv.parallelism for lv in r.search.levels]
    assert levels[0] == CORES and levels == sorted(levels) and len(levels) <= 4
    chosen = r.search.chosen
    assert isinstance(chosen, int) and chosen > CORES, r.search
    assert r.search.stop, r.search
    runs = {c.config: c for c in r.runs}
    pre = runs["prefetch"]
    assert pre.parallelism == chosen
    assert pre.optimize.to_json() == {"prefetch": {"parallelism": chosen}}
    assert any(f"num_workers={chosen}," in w for w in pre.where)
    for cr in r.runs:
        _sane_headroom(cr)
    assert "run-failed" not in pre.flags and "non-finite-loss" not in pre.flags
    assert any(isinstance(e, SearchLevelStarted) for e in events)
    d = json.loads(json.dumps(r.to_json()))
    validate_compare_json(d)
    assert d["search"]["chosen"] == chosen and d["diagnosis"]["cause"] == "latency"
    assert [x["parallelism"] for x in d["runs"]] == [None, chosen]
    assert all(lv["rss"] and lv["memory"] for lv in d["search"]["levels"])


@pytest.mark.slow
def test_torch_cpu_shape_stays_at_the_core_count(tmp_path: Path) -> None:
    r = run_compare(
        _cmd("torch", "cpu"), ["baseline", "prefetch"], repeats=1, steps=30, warmup_steps=3,
        out_dir=tmp_path,
    )  # fmt: skip
    d = r.diagnosis
    assert d is not None and d.cause in ("cpu", "contention"), d
    assert r.search is not None and r.search.cause == d.cause, r.search
    if d.cause == "cpu":  # a CPU-bound stage stays at the core count: no search
        assert r.search.levels == () and r.search.chosen == CORES, r.search
    else:
        # other processes hold the cores it needs (this machine under a CI run's load): more
        # producers get a larger share of a contended CPU, so compare searches, and picks a
        # level it measured
        assert d.others_cores is not None and d.others_cores > 0, d
        tried = {lv.parallelism for lv in r.search.levels}
        assert tried and r.search.chosen in tried, r.search
    pre = next(c for c in r.runs if c.config == "prefetch")
    assert pre.parallelism == r.search.chosen
    assert any(f"num_workers={pre.parallelism}," in w for w in pre.where), pre.where
    for cr in r.runs:
        _sane_headroom(cr)
    assert pre.headroom.bound in ("cores", "compute")  # never a latency bound
    line = headroom_line(pre.speedup, pre.headroom)
    assert "of what" in line or "compute-only" in line


# -- the search's rules and the headroom model, on made-up numbers ------------------------------


def _diag(cause: str | None, **kw: Any) -> Diagnosis:
    base: dict[str, Any] = {
        "cause": cause, "input_fraction": 0.9, "input_cpu_cores": 0.1, "input_parallelism": 1,
        "cores": 2, "compute_s": 0.002, "input_s": 0.032, "cpu_per_step_s": 0.004,
        "batch_size": 8.0, "memory": 300_000_000, "rss": 320_000_000,
    }  # fmt: skip
    return Diagnosis(**{**base, **kw})


def _measure(rates: dict[int, float], memory: dict[int, int] | None = None) -> Any:
    tried: list[int] = []

    def measure(p: int) -> RunOutcome:
        tried.append(p)
        mem = (memory or {}).get(p, 310_000_000)
        return RunOutcome(
            f"p{p}", rates[p], "samples/s", None, None, ("prefetch",), (), (), False, None,
            parallelism=p, memory=mem, rss=mem,
        )  # fmt: skip

    measure.tried = tried  # type: ignore[attr-defined]
    return measure


def test_search_stops_when_throughput_stops_improving() -> None:
    m = _measure({2: 450.0, 4: 900.0, 8: 1600.0, 16: 1700.0, 32: 9e9})
    s = search_parallelism(_diag("latency"), m, ram=16 * 2**30)
    assert m.tried == [2, 4, 8, 16]  # 16 is under 10% better than 8: stop, keep 8
    assert s.chosen == 8 and "less than 10% better than 8" in s.stop
    assert [lv.throughput for lv in s.levels] == [450.0, 900.0, 1600.0, 1700.0]


def test_search_stops_on_memory() -> None:
    mem = {2: 350_000_000, 4: 450_000_000, 8: 650_000_000}
    m = _measure({2: 450.0, 4: 900.0, 8: 1600.0}, mem)
    s = search_parallelism(_diag("latency"), m, ram=16 * 2**30)
    assert m.tried == [2, 4, 8] and s.chosen == 4  # 650 MB > 2 x 300 MB: 8 is out
    assert "memory 2.2x" in s.stop
    # projected past half the RAM: the next level is never started
    m = _measure({2: 450.0, 4: 900.0, 8: 1600.0}, mem)
    s = search_parallelism(_diag("mixed"), m, ram=700_000_000)  # 4 projects to 400 MB
    assert m.tried == [2] and s.chosen == 2 and "half the RAM" in s.stop


def test_search_cpu_cause_and_no_cause_run_nothing() -> None:
    m = _measure({})
    assert search_parallelism(_diag("cpu"), m).chosen == 2
    assert search_parallelism(_diag(None), m).chosen is None
    assert m.tried == []


def test_headroom_model() -> None:
    d = _diag("latency")
    # bounds in steps/s: compute 500, 2 cores / 4 ms = 500, latency 16 / 32 ms = 500 at P=16
    tp = Throughput(800.0, 800.0, 800.0, "samples/s")
    h = headroom([], tp, 4, True, d)
    assert h.bound == "latency" and h.throughput == pytest.approx(4 / 0.032 * 8)
    assert h.fraction_reached == pytest.approx(0.8)
    assert headroom_line(3.2, Headroom.unknown("samples/s")) == "3.20x"  # no headroom yet
    assert headroom_line(3.2, h) == "3.20x — at 80% of what parallelism 4 allows"
    tp = Throughput(3000.0, 3000.0, 3000.0, "samples/s")
    h = headroom([], tp, 2, True, _diag("cpu", compute_s=0.001))  # compute 1000/s, cores 500/s
    assert h.bound == "cores" and h.throughput == pytest.approx(4000.0)
    assert h.text == "at 75% of what 2 cores allow"
    assert headroom([], tp, 2, True, None).throughput is None
    # its own runs: 6 ms CPU per step (parallel costs more than serial), 0.5 core taken by
    # other processes: 1.5 / 6 ms = 250 steps/s
    stats = InputStats(0.001, 0.0, 0.004, 0.006, cores_busy=1.4, others_cores=0.5)
    runs = [RunOutcome("s", 1800.0, "samples/s", None, None, (), (), (), False, None, input=stats)]
    tp = Throughput(1800.0, 1800.0, 1800.0, "samples/s")
    h = headroom(runs, tp, 2, True, _diag("cpu", compute_s=0.001))
    assert h.free_cores == pytest.approx(1.5) and h.cpu_per_step_s == 0.006
    assert h.throughput == pytest.approx(2000.0) and h.fraction_reached == pytest.approx(0.9)
    assert h.text == "at 90% of what 2 cores allow (0.5 of them busy elsewhere)"


def test_headroom_of_waiting_input_on_a_machine_others_keep_busy() -> None:
    """Other processes keep both cores busy while the baseline mostly sleeps on its input: what
    little CPU the tree got (it asked for little) is no bound on it, so the bound stays the
    latency one (seen on a shared CI machine: "at 100% of what 2 cores allow")."""
    d = _diag("latency", cpu_per_step_s=0.0005)  # latency bound: 1 / 32 ms at P=1
    # 28 steps/s at 0.5 ms CPU each: 0.014 cores busy; the others took the remaining 1.986
    stats = InputStats(0.002, 0.032, 0.035, 0.0005, cores_busy=0.014, others_cores=1.986)
    runs = [RunOutcome("b", 224.0, "samples/s", None, None, (), (), (), False, None, input=stats)]
    tp = Throughput(224.0, 224.0, 224.0, "samples/s")
    h = headroom(runs, tp, None, False, d)
    assert h.bound == "latency", h
    assert h.throughput == pytest.approx(8 / 0.032)
    assert h.fraction_reached == pytest.approx(224.0 / 250.0)
    # an equal share next to the others' load: 2 / (1 + 1.986) cores
    assert h.free_cores == pytest.approx(2 / 2.986)


def test_headroom_never_exceeds_the_bound_it_states() -> None:
    """A run that beats a bound shows the bound did not hold: the next one that does is the
    headroom, never "at 126% of what 2 cores allow"."""
    d = _diag("cpu", compute_s=0.001)  # compute 1000 steps/s, 2 cores / 4 ms = 500 steps/s
    tp = Throughput(5040.0, 5000.0, 5100.0, "samples/s")  # 630 steps/s: past the cores bound
    h = headroom([], tp, 2, True, d)
    assert h.bound == "compute" and h.throughput == pytest.approx(8000.0)
    assert h.fraction_reached is not None and h.fraction_reached <= 1.0
    assert h.text == "at 63% of the compute-only rate (no input wait)"
    # past every bound: no headroom is claimed at all
    tp = Throughput(9000.0, 9000.0, 9000.0, "samples/s")
    assert headroom([], tp, 2, True, d).text is None


def test_a_run_excludes_at_least_what_its_producers_buffered() -> None:
    """Until the batches its workers prefetched are drained, a run measures the buffer."""

    def spec(raw: object) -> OptimizeSpec:
        return OptimizeSpec.from_json(raw)[0]

    assert run_warmup(3, spec({}), 2) == 3  # baseline: the warm-up asked for
    # twice the buffer (it is refilled while it drains); ~ a worker a core by default
    assert run_warmup(3, spec({"prefetch": True}), 2) == 2 * 2 * BUFFERED_PER_PRODUCER
    p16 = spec({"prefetch": {"parallelism": 16}})
    assert run_warmup(3, p16, 2) == 2 * 16 * BUFFERED_PER_PRODUCER
    assert run_warmup(500, p16, 2) == 500
    assert run_warmup(3, spec({"xla": True}), 2) == 3


def test_headroom_counts_a_serial_source_and_says_when_nothing_is_left() -> None:
    # a serial from_generator: 30 ms of its own per step, the baseline stepping at 31 ms
    # (within 5% of what the generator allows: overlapping the compute wins nothing more)
    d = _diag("latency", serial_source="read_items", serial_s=0.030, step_s=0.031)
    # the latency bound at P=16 would promise 500 steps/s; the generator allows 33
    tp = Throughput(8 * 31.2, 8 * 31.2, 8 * 31.2, "samples/s")
    h = headroom([], tp, 16, True, d)
    assert h.bound == "serial-source" and h.throughput == pytest.approx(8 / 0.030)
    assert h.text is not None and "what the serial source read_items allows" in h.text
    assert "nothing left to win without changing read_items" in h.text
    # a source that is not near its cap yet: the bound, and no such claim
    fast = _diag("latency", serial_source="read_items", serial_s=0.010, step_s=0.032)
    h = headroom([], tp, 16, True, fast)
    assert h.bound == "serial-source" and "nothing left" not in (h.text or "")
    # compute-changing toggles: the baseline's compute-only rate bounds nothing for them
    d = _diag(None, compute_s=0.001, cpu_per_step_s=None, input_s=0.0005)
    tp = Throughput(900.0 * 8, 900.0 * 8, 900.0 * 8, "samples/s")
    assert headroom([], tp, None, False, d).bound == "compute"
    assert headroom([], tp, None, False, d, compute_changed=True).bound is None
