"""Input causes from the scheduler's accounting of the producers' threads, and what a
comparison measured carried into the verdict: pure functions, each threshold on both sides."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_verdicts import SERIAL_TF

from sofa_top.analysis import causes
from sofa_top.analysis.causes import (
    CONTENTION_WAIT,
    CPU_BUSY,
    LATENCY_BLOCKED,
    LATENCY_MAJOR,
    NEIGHBOURS_BUSY,
    Neighbours,
    readings_of,
    sched_means,
)
from sofa_top.analysis.measured import apply_measured
from sofa_top.analysis.verdicts import Evidence, judge
from sofa_top.datamodel.evidence_json import parse_evidence
from sofa_top.datamodel.samples import (
    Neighbour,
    PipelineSample,
    PipelineStage,
    StepSample,
    ThreadTimes,
    TreeSched,
)
from sofa_top.datamodel.verdict import Measured, Recommendation, TimeSplit, Verdict
from sofa_top.datamodel.workload import ModelReport
from sofa_top.recording.series import sched_points

HOG = Neighbours(1.0, (Neighbour(4242, "python", 1.0), Neighbour(7, "kworker", 0.01)))
QUIET = Neighbours(0.1, ())
LOADER0 = PipelineSample(0.0, "torch", (PipelineStage("Images", "source", 1, None, None),))
LOADER2 = PipelineSample(
    0.0,
    "torch",
    (
        PipelineStage("Images", "source", 2, None, None),
        PipelineStage("worker prefetch", "prefetch", None, 4, None),
    ),
)


def _loop_steps(run: float, queue: float, n: int = 20, wait: float = 0.08) -> list[StepSample]:
    """Steps whose input waits the loop's thread spent ``run`` on a CPU and ``queue`` waiting
    for one (fractions of the wait)."""
    return [
        StepSample(
            float(i),
            i,
            i - 0.1,
            0.1,
            wait,
            "torch-dataloader",
            8,
            1,
            wait * run,
            wait_run_s=wait * run,
            wait_queue_s=wait * queue,
        )
        for i in range(n)
    ]


def _cause(run: float, queue: float, nb: Neighbours | None = QUIET) -> str:
    v = judge(Evidence(steps=_loop_steps(run, queue), pipeline=LOADER0, cpu_count=2, neighbours=nb))
    assert v.kind == "input-bound"
    return str(v.as_json()["evidence"]["input_cause"])


def test_the_loop_threads_split_decides_on_both_sides_of_each_threshold() -> None:
    # blocked: latency at LATENCY_BLOCKED, not below
    assert _cause(0.0, 1 - LATENCY_BLOCKED - 0.005) == "latency"
    assert _cause(0.3, 0.25, QUIET) == "mixed"  # blocked 45%: under both bars
    # half blocked and blocked more than anything else: still latency (its neighbours named)
    assert _cause(0.04, 0.37, HOG) == "latency"
    assert _cause(0.04, 1 - LATENCY_MAJOR + 0.02, HOG) == "contention"
    # on a CPU (or runnable on a quiet machine: its own threads queue): cpu from CPU_BUSY
    assert _cause(CPU_BUSY + 0.005, 0.0) == "cpu"
    assert _cause(CPU_BUSY - 0.02, 0.0) == "mixed"
    assert _cause(0.2, 0.5, QUIET) == "cpu"
    # waiting for a CPU that other processes hold: contention from CONTENTION_WAIT
    assert _cause(0.45, CONTENTION_WAIT + 0.005, HOG) == "contention"
    assert _cause(0.45, CONTENTION_WAIT - 0.02, HOG) == "cpu"
    busy_enough = Neighbours(NEIGHBOURS_BUSY, ())
    assert _cause(0.3, 0.5, busy_enough) == "contention"
    assert _cause(0.3, 0.5, Neighbours(NEIGHBOURS_BUSY - 0.01, ())) == "cpu"
    # a stage that sleeps stays latency however busy the machine is
    assert _cause(0.02, 0.2, Neighbours(1.9, HOG.top)) == "latency"


def test_the_split_is_in_the_evidence_and_the_headline_names_the_neighbours() -> None:
    v = judge(Evidence(steps=_loop_steps(0.02, 0.2), pipeline=LOADER0, cpu_count=2, neighbours=HOG))
    ev = v.as_json()["evidence"]
    assert ev["input_cause_source"] == "schedstat" and ev["input_producers"] == "the loop's thread"
    assert ev["input_time_split"] == {"on_cpu": 0.02, "cpu_wait": 0.2, "blocked": 0.78}
    assert ev["input_contention"] is True and ev["others_cores"] == 1.0
    assert "waits on I/O" in v.headline and "python 4242: 1.0" in v.headline
    assert "kworker" not in v.headline  # a neighbour that takes nothing is not named
    texts = " | ".join(r.text for r in v.recommendations)
    assert "num_workers=16" in v.recommendations[0].text and "cannot help" not in texts
    assert "renice -n 10 -p 4242" in texts
    # contention: named in the headline, the cores first in the advice
    c = judge(replace(Evidence(steps=_loop_steps(0.3, 0.6)), pipeline=LOADER0, neighbours=HOG))
    assert c.as_json()["evidence"]["input_cause"] == "contention"
    assert "waits for a CPU that other processes hold" in c.headline
    assert c.recommendations[0].toggle is None and "python 4242" in c.recommendations[0].text


def _sched(**groups: ThreadTimes) -> dict[str, ThreadTimes]:
    return dict(groups)


def test_workers_and_tf_data_threads_are_divided_by_their_parallelism() -> None:
    steps = [replace(s, wait_run_s=None, wait_queue_s=None) for s in _loop_steps(0, 0)]
    # two DataLoader workers: 1.8 cores on a CPU between them is 90% each
    sched = {"workers": ThreadTimes(1.8, 0.1, 2, procs=2), "loop": ThreadTimes(0.1, 0.0, 1)}
    found = causes.producer_split(steps, LOADER2, sched, 2, 2)  # type: ignore[arg-type]
    assert found is not None and found.producers == "2 DataLoader workers"
    assert found.split.on_cpu == pytest.approx(0.9) and found.split.cpu_wait == pytest.approx(0.05)
    # a serial tf.data map without a prefetch works only while the loop waits (80% here)
    sched = {"threads": ThreadTimes(0.76, 0.0, 5)}
    found = causes.producer_split(steps, SERIAL_TF, sched, 1, 2)  # type: ignore[arg-type]
    assert found is not None and found.split.on_cpu == pytest.approx(0.95)
    # runnable threads handing work over overlap: the split is scaled to a whole
    sched = {"threads": ThreadTimes(0.8, 1.06, 6)}
    found = causes.producer_split(steps, SERIAL_TF, sched, 1, 2)  # type: ignore[arg-type]
    assert found is not None and sum(
        (found.split.on_cpu, found.split.cpu_wait, found.split.blocked)
    ) == pytest.approx(1.0)
    # nothing measured: no split (the verdict falls back to the CPU during the waits)
    assert causes.producer_split(steps, LOADER0, {}, 1, 2) is None


def test_stored_readings_give_back_the_same_means() -> None:
    a = TreeSched(0.5, (("loop", ThreadTimes(0.2, 0.1, 1)), ("tree", ThreadTimes(0.4, 0.3, 9))))
    b = TreeSched(0.5, (("loop", ThreadTimes(0.4, 0.3, 1)), ("tree", ThreadTimes(0.6, 0.5, 9))))
    live = sched_means([a, b])
    assert live["loop"].on_cpu == pytest.approx(0.3) and live["tree"].cpu_wait == pytest.approx(0.4)
    # as the store keeps them: points per reading, the first one's span unknown
    points: dict[str, list[tuple[float, float | None]]] = {}
    for ts, r in ((10.0, a), (10.5, a), (11.0, b)):
        for name, value, _err in sched_points(r):
            points.setdefault(name, []).append((ts, value))
    stored = sched_means(readings_of(points))
    assert stored["loop"].on_cpu == pytest.approx(0.3) and stored["tree"].threads == 9
    assert sched_means([TreeSched(0.0, error="no schedstat")]) == {}
    # the readings while the loop ran: the interpreter's start and imports are left out
    assert len(readings_of(points, since=10.6)) == 1 and len(readings_of(points)) == 2


def _pool(runnable: float, nb: Neighbours | None) -> Verdict:
    return judge(_pool_evidence(runnable, nb))


def _pool_evidence(runnable: float, nb: Neighbours | None) -> Evidence:
    steps = [StepSample(float(i), i, i - 0.1, 0.1, 0.0, "torch-optimizer") for i in range(20)]
    sched = {"tree": ThreadTimes(0.9, 0.9, int(runnable)), "threads": ThreadTimes(0.4, 0.4, 3)}
    return Evidence(
        steps=steps,
        cpu_count=2,
        runnable_threads=runnable,
        tree_cpu=90.0,
        sched=sched,  # type: ignore[arg-type]
        neighbours=nb,
    )


def _trainers(pids: int, pool: int, nb: Neighbours | None) -> Verdict:
    """A launcher (the target, idle in ``join``) and ``pids`` spawned trainers, each stepping
    its own loop with a ``pool``-thread intra-op pool: their threads wait in the tree, not in
    the target's ``threads`` group."""
    steps = [
        StepSample(float(i), i, i - 0.1, 0.1, 0.0, "torch-optimizer", pid=100 + i % pids)
        for i in range(40)
    ]
    sched = {
        "tree": ThreadTimes(0.6, 1.4, 2 * pids + 3),
        "loop": ThreadTimes(0.0, 0.0, 1),
        "threads": ThreadTimes(0.0, 0.0, 2),
    }
    return judge(
        Evidence(
            steps=steps, cpu_count=2, runnable_threads=float(pids * pool), tree_cpu=60.0,
            sched=sched, neighbours=nb,  # type: ignore[arg-type]
            model=ModelReport("torch", "Net", "__main__", 4000, 0, "", intra_op_threads=pool),
        )
    )  # fmt: skip


def test_spawned_trainers_pools_are_the_jobs_own_oversubscription() -> None:
    """Two spawned trainers of torch's default pool (2 threads each) on 2 cores beside a hog:
    4 threads of the job's own for 2 cores; the thread cap, per process, comes first and is
    no guess, and the neighbours come after. Each pool alone is only as wide as the cores."""
    v = _trainers(2, 2, HOG)
    assert v.kind == "cpu-oversubscribed", v.headline
    assert v.as_json()["evidence"]["oversubscribed_by"] == "both"
    first = v.recommendations[0]
    assert first.toggle == "threads" and "not measured" not in first.text
    assert first.text.startswith("torch.set_num_threads(1)")
    assert "each of the job's 2 training processes" in first.text
    assert any("renice" in r.text for r in v.recommendations[1:])
    assert _trainers(2, 2, QUIET).as_json()["evidence"]["oversubscribed_by"] == "own-pool"
    # the other side: one trainer of a 2-thread pool beside the hog is starved by the hog
    one = _trainers(1, 2, HOG)
    assert one.as_json()["evidence"]["oversubscribed_by"] == "neighbours"
    assert one.recommendations[0].toggle is None and "renice" in one.recommendations[0].text
    # ... and so are 2 trainers capped at 1 thread each: 2 threads of the job's for 2 cores
    capped = _trainers(2, 1, HOG)
    assert capped.as_json()["evidence"]["oversubscribed_by"] == "neighbours"
    assert "renice" in capped.recommendations[0].text


def test_oversubscription_tells_its_own_pools_from_the_neighbours() -> None:
    own = _pool(8.0, QUIET)
    assert (
        own.kind == "cpu-oversubscribed"
        and own.as_json()["evidence"]["oversubscribed_by"] == "own-pool"
    )
    assert own.as_json()["evidence"]["threads_waiting"] == 0.9  # measured, not runnable - busy
    assert own.recommendations[0].toggle == "threads"
    assert "not measured" not in own.recommendations[0].text
    theirs = _pool(2.0, HOG)
    assert theirs.as_json()["evidence"]["oversubscribed_by"] == "neighbours"
    assert "python 4242" in theirs.headline and theirs.recommendations[0].toggle is None
    cap = next(r for r in theirs.recommendations if r.toggle == "threads")
    assert "not measured here" in cap.text
    assert _pool(8.0, HOG).as_json()["evidence"]["oversubscribed_by"] == "both"
    assert _pool(2.0, None).as_json()["evidence"]["oversubscribed_by"] == "unknown"
    # with the pool's size known, the runnable count does not decide: a 2-thread pool that
    # waits 0.9 cores is oversubscribed at 1.4 runnable threads (seen: LBFGS on a busy machine)
    wide = ModelReport("torch", "Net", "__main__", 100, 0, "", intra_op_threads=2)
    # unknown size: 1.4 is no pool (an optimizer clock without stacks then abstains)
    assert _pool(1.4, HOG).kind != "cpu-oversubscribed"
    assert judge(replace(_pool_evidence(1.4, HOG), model=wide)).kind == "cpu-oversubscribed"
    # whose threads: a pool as wide as the 2 cores is not the workload's own doing, whatever
    # the runnable count (tf.data and inter-op threads wake around each op); a wider one is
    as_wide = judge(replace(_pool_evidence(3.0, HOG), model=wide))
    wide_ev = as_wide.as_json()["evidence"]
    assert wide_ev["oversubscribed_by"] == "neighbours", wide_ev
    wider = judge(replace(_pool_evidence(3.0, HOG), model=replace(wide, intra_op_threads=4)))
    assert wider.as_json()["evidence"]["oversubscribed_by"] == "both", wider.as_json()["evidence"]
    # a pool no wider than the cores it gets: no thread cap lowers it (neighbours starve it)
    sized = replace(wide, intra_op_threads=1)
    assert judge(replace(_pool_evidence(2.0, HOG), model=sized)).kind != "cpu-oversubscribed"
    # the loop's thread alone waiting is not a pool
    alone = Evidence(
        steps=[StepSample(float(i), i, i - 0.1, 0.1, 0.0, "torch-optimizer") for i in range(20)],
        cpu_count=2, runnable_threads=1.0, tree_cpu=20.0, neighbours=HOG,
        sched={"tree": ThreadTimes(0.2, 0.8, 1), "loop": ThreadTimes(0.2, 0.8, 1)},  # type: ignore[dict-item]
    )  # fmt: skip
    assert judge(alone).kind != "cpu-oversubscribed"
    # threads that do not wait for a CPU are not oversubscribed, however many are runnable
    calm = Evidence(
        steps=[StepSample(float(i), i, i - 0.1, 0.1, 0.0, "torch-optimizer") for i in range(20)],
        cpu_count=2, runnable_threads=4.0, tree_cpu=190.0,
        sched={"tree": ThreadTimes(1.9, 0.2, 4)},  # type: ignore[dict-item]
    )  # fmt: skip
    assert judge(calm).kind != "cpu-oversubscribed"


def _input_verdict() -> Verdict:
    return Verdict(
        "input-bound",
        0.9,
        "input-bound: 80% of each step waits for input",
        parse_evidence("input-bound", {"input_cause": "cpu"}),
        (
            Recommendation(
                "preprocessing keeps its producers on the 2 cores: ... more parallelism than "
                "the cores shares them (not measured here: ...)"
            ),
            Recommendation("cache decoded samples once"),
            Recommendation("torch.set_num_threads(1)", "threads"),
        ),
    )


def test_a_measured_win_is_quoted_and_what_it_contradicts_withdrawn() -> None:
    won = Measured("prefetch", "faster", 3.63, 3.1, 4.0, parallelism=16, change="DataLoader(16)")
    lost = Measured("threads", "slower", 0.55, 0.5, 0.6, threads=1)
    v = apply_measured(_input_verdict(), [lost, won])
    texts = [r.text for r in v.recommendations]
    assert texts[0] == "measured: prefetch x3.63 at parallelism 16 (3.10-4.00): DataLoader(16)"
    assert v.recommendations[0].toggle == "prefetch"
    assert not any("more parallelism than the" in t for t in texts)  # withdrawn
    assert "cache decoded samples once" in texts
    assert not any(r.toggle == "threads" for r in v.recommendations)
    assert (
        texts[-1].startswith("measured: threads x0.55 at 1 thread") and "not advised" in texts[-1]
    )
    assert v.headline.endswith("; measured: prefetch x3.63 at parallelism 16 (3.10-4.00)")
    ev = v.as_json()["evidence"]
    assert [m["toggle"] for m in ev["measured"]] == ["threads", "prefetch"]  # type: ignore[index]
    # the last measurement of a toggle counts; nothing measured changes nothing
    again = apply_measured(_input_verdict(), [won, replace(won, effect="unclear", speedup=1.02)])
    assert "no clear difference" in again.recommendations[-1].text
    assert apply_measured(_input_verdict(), []) == _input_verdict()


def test_measured_round_trips_through_json() -> None:
    m = Measured("prefetch", "faster", 3.63, 3.1, 4.0, 16, None, "", "DataLoader(16)")
    assert Measured.from_json(m.as_json()) == m
    assert Measured.from_json({"toggle": "nope", "effect": "faster"}) is None
    assert TimeSplit(0.1, 0.2, 0.7).as_json() == {"on_cpu": 0.1, "cpu_wait": 0.2, "blocked": 0.7}


def test_a_measured_guess_loses_its_not_measured_note() -> None:
    from sofa_top.datamodel.verdict import unmeasured

    guess = Recommendation(f"torch.set_num_threads(1){unmeasured('it depends')}", "threads")
    v = replace(_input_verdict(), recommendations=(guess,))
    won = apply_measured(v, [Measured("threads", "faster", 1.4, 1.3, 1.6, threads=1)])
    assert won.recommendations[0].text == (
        "torch.set_num_threads(1) (measured: threads x1.40 at 1 thread (1.30-1.60))"
    )
