"""Window aggregation: hot functions, class split, per-thread stats."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from sofa_top.analysis.stackstats import IDLE_THREAD, list_threads, summarize
from sofa_top.datamodel.samples import STACK_CLASSES, Frame, StackClass, StackCount, StackWindow

MOD = Frame("<module>", "train.py", 30)
LOOP = Frame("main", "train.py", 20)
NEXT = Frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py", 725)
GETITEM = Frame("Ds.__getitem__", "train.py", 5)
BACKWARD = Frame("_engine_run_backward", "torch/autograd/graph.py", 979)
WAIT = Frame("Condition.wait", "threading.py", 327)


def count(
    frames: tuple[Frame, ...], n: int, klass: StackClass, tid: int = 10, name: str = "MainThread"
) -> StackCount:
    return StackCount(pid=1, tid=tid, thread_name=name, frames=frames, count=n, klass=klass)


def window(
    stacks: list[StackCount], t: float = 0.0, rate: float = 100.0, cpu: float | None = 3.0
) -> StackWindow:
    return StackWindow(
        ts_start=t,
        ts_end=t + 1.0,
        rate_hz=rate,
        samples=max((s.count for s in stacks), default=0),
        stacks=tuple(stacks),
        sampler_cpu=cpu,
    )


W1 = window(
    [
        count((MOD, LOOP, NEXT, GETITEM), 60, "input"),
        count((MOD, LOOP, BACKWARD), 30, "compute"),
        count((MOD, LOOP), 10, "python"),
        count((WAIT,), 100, "idle", tid=11, name="pin"),
    ],
    t=0.0,
    rate=100.0,
    cpu=2.0,
)
W2 = window([count((MOD, LOOP, BACKWARD), 50, "compute")], t=1.0, rate=50.0, cpu=4.0)


def test_summary_of_two_windows() -> None:
    """The loop's thread fills the split and the hot functions; the pin-memory thread, idle in
    every sample, is a helper counted apart."""
    s = summarize([W1, W2])
    assert s is not None
    assert s.thread_samples == 150
    assert (s.idle_threads, s.idle_thread_samples) == (1, 100)
    assert (s.ts_start, s.ts_end) == (0.0, 2.0)
    assert s.split == {"input": 0.4, "compute": 80 / 150, "python": 10 / 150, "idle": 0.0}
    assert math.isclose(s.rate_hz, 75.0) and s.sampler_cpu is not None
    assert math.isclose(s.sampler_cpu, 3.0)
    by_name = {f.function: f for f in s.functions}
    assert [f.function for f in s.functions[:2]] == ["_engine_run_backward", "Ds.__getitem__"]
    assert "Condition.wait" not in by_name
    back = by_name["_engine_run_backward"]
    assert math.isclose(back.own_pct, 100 * 80 / 150) and back.own_pct == back.total_pct
    assert (back.klass, back.thread) == ("compute", "MainThread")
    main = by_name["main"]
    assert math.isclose(main.own_pct, 100 * 10 / 150) and main.total_pct == 100.0
    assert main.line == 20
    # never innermost: class of the samples it appears in
    assert by_name["_BaseDataLoaderIter.__next__"].klass == "input"


def test_an_idle_process_is_all_helpers_and_shows_them() -> None:
    s = summarize([window([count((WAIT,), 40, "idle"), count((WAIT,), 40, "idle", tid=11)])])
    assert s is not None
    assert s.split["idle"] == 1.0 and s.idle_threads == 0 and s.thread_samples == 80


def test_threads_busiest_first() -> None:
    threads = list_threads([W1, W2])
    assert [(t.tid, t.name, t.samples) for t in threads] == [
        (10, "MainThread", 150),
        (11, "pin", 100),
    ]
    assert threads[1].split["idle"] == 1.0
    s = summarize([W1, W2])
    assert s is not None and s.threads == threads


def test_tid_filter() -> None:
    s = summarize([W1, W2], tid=11)
    assert s is not None
    assert s.thread_samples == 100 and s.split["idle"] == 1.0
    assert [f.function for f in s.functions] == ["Condition.wait"]
    assert summarize([W1, W2], tid=999) is None


def test_empty_and_error_windows() -> None:
    assert summarize([]) is None
    err = StackWindow(ts_start=0, ts_end=1, rate_hz=0, samples=0, error="ptrace denied: x")
    assert summarize([err]) is None
    s = summarize([err, W2])
    assert s is not None and s.rate_hz == 50.0 and s.ts_start == 0


def test_recursion_counts_once() -> None:
    rec = Frame("walk", "t.py", 3)
    s = summarize([window([count((MOD, rec, rec, rec), 10, "python")])])
    assert s is not None
    walk = next(f for f in s.functions if f.function == "walk")
    assert walk.total_pct == 100.0 and walk.own_pct == 100.0


def test_unnamed_thread_label_and_top() -> None:
    s = summarize([window([count((MOD, LOOP), 5, "python", name="")])], top=1)
    assert s is not None
    assert len(s.functions) == 1 and s.functions[0].thread == "tid 10"


_frames = st.lists(
    st.sampled_from([MOD, LOOP, NEXT, GETITEM, BACKWARD, WAIT]), min_size=0, max_size=5
).map(tuple)
_counts = st.builds(
    count,
    _frames,
    st.integers(0, 1000),
    st.sampled_from(STACK_CLASSES),
    st.integers(1, 4),
    st.sampled_from(["MainThread", "", "w"]),
)


@given(st.lists(st.lists(_counts, max_size=6), max_size=4))
def test_summary_laws(spec: list[list[StackCount]]) -> None:
    windows = [window(stacks, t=float(i)) for i, stacks in enumerate(spec)]
    s = summarize(windows)
    total = sum(c.count for w in windows for c in w.stacks)
    if total == 0:
        assert s is None
        return
    assert s is not None
    # the loop's threads and the idle helpers partition the samples
    assert s.thread_samples + s.idle_thread_samples == total
    helpers = {t.tid for t in s.threads if t.split["idle"] >= IDLE_THREAD}
    if s.idle_threads:
        assert s.idle_threads == len(helpers) < len(s.threads)
    loop = [c for w in windows for c in w.stacks if c.tid not in helpers or not s.idle_threads]
    assert s.thread_samples == sum(c.count for c in loop)
    assert math.isclose(sum(s.split.values()), 1.0)
    assert set(s.split) == set(STACK_CLASSES)
    assert sum(t.samples for t in s.threads) == total
    assert math.isclose(
        sum(f.own_pct for f in s.functions),
        100.0 * sum(c.count for c in loop if c.frames) / s.thread_samples,
    )
    for f in s.functions:
        assert 0.0 <= f.own_pct <= f.total_pct <= 100.0 + 1e-9
    assert [f.own_pct for f in s.functions] == sorted(
        (f.own_pct for f in s.functions), reverse=True
    )
    # per-thread summaries partition the whole (one thread has no helpers)
    per = [summarize(windows, tid=t.tid) for t in s.threads]
    assert sum(p.thread_samples for p in per if p is not None) == total


AGENT_LOOP = Frame("Agent._run", "/x/sofa_top/agent/core.py", 600)


def test_agent_threads_are_overhead_from_the_stored_windows() -> None:
    """The collector keeps the agent's threads (``sofa-top*``); the summary, live or replayed
    from the same windows, leaves them out of the workload's stacks and counts their running
    samples in ``agent_fraction``."""
    from sofa_top.collectors.pyspy_raw import RawStack
    from sofa_top.collectors.stacks import build_stacks

    raw = [
        RawStack((MOD, LOOP, BACKWARD), 90, tid=10, thread_name="MainThread"),
        RawStack((AGENT_LOOP,), 10, tid=20, thread_name="sofa-top-agent"),
        RawStack((WAIT,), 100, tid=21, thread_name="sofa-top-cuda-window"),
    ]
    stacks, _ = build_stacks(raw, default_pid=1)
    assert {s.thread_name for s in stacks} == {
        "MainThread",
        "sofa-top-agent",
        "sofa-top-cuda-window",
    }
    s = summarize([window(list(stacks))])
    assert s is not None
    assert [t.name for t in s.threads] == ["MainThread"]
    assert all("sofa_top/agent" not in f.filename for f in s.functions)
    assert s.agent_samples == 10  # the drain thread ran; the idle window thread costs nothing
    assert s.agent_fraction == 10 / (s.thread_samples + 10)
    assert [t.name for t in list_threads([window(list(stacks))])] == ["MainThread"]
