"""Stack classification on stacks captured from the real workloads, plus properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sofa_top.analysis.classify import classify_stack, is_input_frame, reconcile_activity
from sofa_top.collectors.pyspy_raw import parse_raw_line
from sofa_top.datamodel.samples import STACK_CLASSES, Frame, StackCount


def frames_of(line: str) -> tuple[Frame, ...]:
    parsed = parse_raw_line(line + " 1")
    assert parsed is not None
    return parsed.frames


# Main-thread stacks captured with py-spy from tests/workloads/*.py (process frames dropped).
TORCH_GETITEM = ";".join(
    [
        "thread (6340): MainThread",
        "<module> (torch_input_bound.py:52)",
        "main (torch_input_bound.py:43)",
        "_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:725)",
        "_SingleProcessDataLoaderIter._next_data (torch/utils/data/dataloader.py:785)",
        "_MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:54)",
        "_MapDatasetFetcher.fetch.<locals>.<listcomp> (torch/utils/data/_utils/fetch.py:54)",
        "SlowDataset.__getitem__ (torch_input_bound.py:33)",
    ]
)
TORCH_BACKWARD = ";".join(
    [
        "thread (6600): MainThread",
        "<module> (torch_compute_bound.py:47)",
        "main (torch_compute_bound.py:42)",
        "Tensor.backward (torch/_tensor.py:623)",
        "backward (torch/autograd/__init__.py:395)",
        "_engine_run_backward (torch/autograd/graph.py:979)",
    ]
)
TORCH_CONV = ";".join(
    [
        "thread (6600): MainThread",
        "<module> (torch_compute_bound.py:47)",
        "main (torch_compute_bound.py:41)",
        "Module._wrapped_call_impl (torch/nn/modules/module.py:1778)",
        "Module._call_impl (torch/nn/modules/module.py:1789)",
        "Conv2d.forward (torch/nn/modules/conv.py:565)",
        "Conv2d._conv_forward (torch/nn/modules/conv.py:560)",
    ]
)
TF_GET_NEXT = ";".join(
    [
        "thread (6965): MainThread",
        "<module> (tf_input_bound.py:48)",
        "main (tf_input_bound.py:41)",
        "OwnedIterator.__next__ (tensorflow/python/data/ops/iterator_ops.py:826)",
        "OwnedIterator._next_internal (tensorflow/python/data/ops/iterator_ops.py:776)",
        "iterator_get_next (tensorflow/python/ops/gen_dataset_ops.py:3081)",
    ]
)
TF_EAGER_OP = ";".join(
    [
        "thread (6965): MainThread",
        "<module> (tf_input_bound.py:48)",
        "main (tf_input_bound.py:42)",
        "filter_traceback.<locals>.error_handler (tensorflow/python/util/traceback_utils.py:164)",
        "ResourceVariable.assign_add (tensorflow/python/ops/resource_variable_ops.py:1045)",
        "assign_add_variable_op (tensorflow/python/ops/gen_resource_variable_ops.py:46)",
    ]
)
TF_QUICK_EXECUTE = ";".join(
    [
        "thread (1): MainThread",
        "<module> (train.py:30)",
        "train_step (train.py:20)",
        "error_handler (tensorflow/python/util/traceback_utils.py:150)",
        "Function.__call__ (tensorflow/python/eager/polymorphic_function/function.py:8)",
        "quick_execute (tensorflow/python/eager/execute.py:53)",
    ]
)
WAITER = ";".join(
    [
        "thread (7108): waiter",
        "Thread._bootstrap (threading.py:1002)",
        "Thread._bootstrap_inner (threading.py:1045)",
        "Thread.run (threading.py:982)",
        "Event.wait (threading.py:629)",
        "Condition.wait (threading.py:327)",
    ]
)
SLEEPER = ";".join(
    [
        "thread (7106): MainThread",
        "<module> (sleeper.py:35)",
        "main (sleeper.py:30)",
        "nap_here (sleeper.py:23)",
    ]
)
FORK_PARENT = ";".join(
    [
        "thread (5760): MainThread",
        "<module> (forker.py:9)",
        "BaseProcess.join (multiprocessing/process.py:149)",
        "Popen.wait (multiprocessing/popen_fork.py:43)",
        "Popen.poll (multiprocessing/popen_fork.py:27)",
    ]
)
BUSY = ";".join(
    [
        "thread (1): MainThread",
        "<module> (busy_python.py:34)",
        "main (busy_python.py:30)",
        "spin_here (busy_python.py:23)",
    ]
)
DL_MAIN_WAITING_FOR_WORKERS = ";".join(
    [
        "thread (1): MainThread",
        "<module> (train.py:10)",
        "_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:733)",
        "_MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1491)",
        "_MultiProcessingDataLoaderIter._get_data (torch/utils/data/dataloader.py:1453)",
        "_MultiProcessingDataLoaderIter._try_get_data (torch/utils/data/dataloader.py:1284)",
        "Queue.get (queue.py:180)",
        "Condition.wait (threading.py:331)",
    ]
)
DL_WORKER_WAITING_FOR_WORK = ";".join(
    [
        "thread (2): MainThread",
        "<module> (train.py:10)",
        "_worker_loop (torch/utils/data/_utils/worker.py:309)",
        "Queue.get (multiprocessing/queues.py:113)",
        "Connection.poll (multiprocessing/connection.py:257)",
        "Connection._poll (multiprocessing/connection.py:440)",
        "wait (multiprocessing/connection.py:1136)",
        "_PollSelector.select (selectors.py:415)",
    ]
)
DL_WORKER_WORKING = ";".join(
    [
        "thread (2): MainThread",
        "<module> (train.py:10)",
        "_worker_loop (torch/utils/data/_utils/worker.py:349)",
        "_MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:54)",
        "MyDataset.__getitem__ (train.py:5)",
    ]
)
IMPORTING_TF = ";".join(
    [
        "thread (1): MainThread",
        "<module> (train.py:1)",
        "_find_and_load (<frozen importlib._bootstrap>:1176)",
        "<module> (tensorflow/python/ops/array_ops.py:20)",
    ]
)


def test_real_workload_stacks() -> None:
    cases = {
        TORCH_GETITEM: "input",
        TORCH_BACKWARD: "compute",
        TORCH_CONV: "compute",
        TF_GET_NEXT: "input",
        TF_EAGER_OP: "compute",
        TF_QUICK_EXECUTE: "compute",
        WAITER: "idle",
        SLEEPER: "python",  # no frame says "sleep": the collector's OS check makes this idle
        FORK_PARENT: "idle",
        BUSY: "python",
        DL_MAIN_WAITING_FOR_WORKERS: "input",  # input wins over the idle-looking leaf
        DL_WORKER_WAITING_FOR_WORK: "idle",  # a worker with nothing to do is idle, not input
        DL_WORKER_WORKING: "input",
        IMPORTING_TF: "python",
    }
    for line, expected in cases.items():
        assert classify_stack(frames_of(line)) == expected, line


def test_full_paths_match_like_short_ones() -> None:
    full = tuple(
        Frame(f.function, f"/venv/lib/python3.11/site-packages/{f.filename}", f.line)
        if "/" in f.filename
        else f
        for f in frames_of(TORCH_BACKWARD)
    )
    assert classify_stack(full) == "compute"


def test_user_file_named_like_a_framework_is_not_matched() -> None:
    # "mytorch/nn/x.py" must not match "/torch/nn/"
    assert classify_stack((Frame("f", "mytorch/nn/x.py", 1),)) == "python"


def test_empty_stack_is_idle() -> None:
    assert classify_stack(()) == "idle"


_frame_pool = [
    f
    for line in (TORCH_GETITEM, TORCH_BACKWARD, TF_GET_NEXT, WAITER, BUSY, SLEEPER)
    for f in frames_of(line)
]


@given(st.lists(st.sampled_from(_frame_pool), max_size=12), st.integers(0, 12))
def test_input_frame_anywhere_wins_outside_worker_loops(frames: list[Frame], at: int) -> None:
    input_frame = frames_of(TF_GET_NEXT)[-1]
    assert is_input_frame(input_frame)
    stack = [*frames[:at], input_frame, *frames[at:]]
    assert classify_stack(stack) == "input"


def _count(frames: tuple[Frame, ...], n: int, klass: str | None = None) -> StackCount:
    return StackCount(
        pid=1,
        tid=1,
        thread_name="MainThread",
        frames=frames,
        count=n,
        klass=klass or classify_stack(frames),  # type: ignore[arg-type]
    )


def test_reconcile_sleeping_thread_becomes_idle() -> None:
    stacks = [_count(frames_of(SLEEPER), 59)]
    out = reconcile_activity(stacks, 0.01)
    assert sum(s.count for s in out if s.klass == "idle") == 58
    assert sum(s.count for s in out if s.klass == "python") == 1


def test_reconcile_keeps_input_and_compute_and_busy_python() -> None:
    stacks = [
        _count(frames_of(TF_GET_NEXT), 50),
        _count(frames_of(TF_EAGER_OP), 5),
        _count(frames_of(BUSY), 5),
    ]
    # the main thread waits on a futex in iterator_get_next: almost no CPU, still input
    out = reconcile_activity(stacks, 0.1)
    assert {s.klass: s.count for s in out if s.klass != "idle"} == {
        "input": 50,
        "compute": 5,
        "python": 5,
    }
    assert reconcile_activity(stacks, 1.0) == tuple(stacks)
    assert reconcile_activity(stacks, None) == tuple(stacks)


def test_reconcile_idle_worker_input() -> None:
    stacks = [_count(frames_of(DL_WORKER_WORKING), 10), _count(frames_of(BUSY), 10)]
    out = reconcile_activity(stacks, 0.0)
    assert all(s.klass == "idle" for s in out)
    assert sum(s.count for s in out) == 20


@given(
    st.lists(
        st.tuples(
            st.sampled_from([BUSY, SLEEPER, TF_GET_NEXT, TORCH_CONV, WAITER]), st.integers(0, 500)
        ),
        max_size=6,
    ),
    st.none() | st.floats(-1.0, 2.0, allow_nan=False),
)
def test_reconcile_properties(spec: list[tuple[str, int]], fraction: float | None) -> None:
    stacks = [_count(frames_of(line), n) for line, n in spec]
    out = reconcile_activity(stacks, fraction)
    total = sum(s.count for s in stacks)
    assert sum(s.count for s in out) == total
    assert all(s.count > 0 for s in out if s not in stacks)

    def by_class(xs: tuple[StackCount, ...] | list[StackCount]) -> dict[str, int]:
        return {k: sum(s.count for s in xs if s.klass == k) for k in STACK_CLASSES}

    before, after = by_class(stacks), by_class(out)
    # only python samples move, and only to idle
    assert after["input"] == before["input"] and after["compute"] == before["compute"]
    assert after["python"] <= before["python"]
    assert after["idle"] - before["idle"] == before["python"] - after["python"]
    if fraction is not None:
        running = round(max(0.0, min(1.0, fraction)) * total)
        assert after["python"] == min(before["python"], max(running, 0))
    # same frames, same thread: moved samples keep their stack
    assert {s.frames for s in out} <= {s.frames for s in stacks}
