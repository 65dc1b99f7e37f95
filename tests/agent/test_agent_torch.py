"""The agent inside real PyTorch workloads: DataLoader loops and optimizer-only loops.

The fraction and optimizer tests assert on the session's shared recordings
(``recordings.SHAPES``: each workload run once by the real ``sofa-top record``); the rest run
their own shapes.
"""

from __future__ import annotations

import statistics
import sys

import pytest
from agent_harness import classify, run_with_agent, workload_cmd
from recordings import Recordings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

pytest.importorskip("torch")

WARMUP = 3


@pytest.mark.parametrize("mode", ["input", "compute"])
def test_dataloader_fraction_matches_the_workloads_own(recordings: Recordings, mode: str) -> None:
    run = recordings.get(f"torch {mode}")
    assert run.exit_code == 0, run.describe()
    own = run.value("SELF_INPUT_FRACTION")
    seen = run.agent_fraction("torch-dataloader", WARMUP)
    assert abs(seen - own) <= 0.10, (seen, own)
    assert classify(seen) == classify(own) == mode
    steps = run.steps("torch-dataloader")
    assert [s.step for s in steps] == list(range(WARMUP + 30))
    assert {s.batch_size for s in steps} == {16}
    # a DataLoader was seen: optimizer steps are not double-counted
    assert run.steps("torch-optimizer") == []
    info = run.infos()[-1]
    assert {"torch-dataloader", "torch-optimizer"} <= set(info.hooks_applied)
    (pipe,) = run.pipelines()
    assert pipe.framework == "torch"
    assert pipe.stages[0].kind == "source" and pipe.stages[0].is_bottleneck  # num_workers=0


def test_a_loop_with_no_dataloader_gets_its_steps_from_its_model_calls(
    recordings: Recordings,
) -> None:
    """One preloaded batch, forward, backward, ``optimizer.step()``: the model-call clock marks
    the iterations (the optimizer's stays quiet), and its host time is the loop's own tiny
    overhead: no input to wait for."""
    run = recordings.get("torch optimizer")
    assert run.steps("torch-optimizer") == []
    steps = run.steps("torch-model-call")
    # the first model call only starts the clock
    assert [s.step for s in steps] == list(range(WARMUP + 30 - 1))
    # agent step n runs from model call n to n + 1: steps WARMUP-1.. cover the iterations
    # the workload measured (WARMUP..)
    own_ms = run.value("SELF_STEP_MS")
    agent_ms = statistics.fmean(s.duration_s for s in steps[WARMUP - 1 :]) * 1e3
    assert abs(agent_ms - own_ms) <= 0.05 * own_ms, (agent_ms, own_ms)
    assert run.value("SELF_INPUT_FRACTION") == 0.0
    assert run.agent_fraction("torch-model-call", WARMUP) <= 0.10
    assert run.summary["verdict"]["kind"] == "compute-bound", run.summary["verdict"]
    # every span was timed: forward, backward, the optimizer's step and zero_grad
    for s in steps[WARMUP - 1 :]:
        assert s.forward_s and s.backward_s and s.optimizer_s, s
        assert s.phase_hint == "train" and s.autograd is True
    split = run.summary["steps"]["compute_split"]
    assert split is not None and split["collective"] == 0.0
    assert all(split[k] > 0.02 for k in ("forward", "backward", "optimizer")), split
    assert [p["phase"] for p in run.summary["steps"]["phases"]] == ["train"]


def test_dataloader_workers_are_reported() -> None:
    run = run_with_agent(
        workload_cmd("agent_torch.py", "--mode", "input", "--workers", "2", "--steps", "20")
    )
    assert run.returncode == 0, run.summary()
    pid = int(run.value("WORKLOAD_PID"))
    (ev,) = run.events("agent-workers")
    workers = ev.data["workers"]
    assert isinstance(workers, list) and len(workers) == 2
    assert pid not in workers and ev.data["pid"] == pid
    # forked workers inherit the agent but stay silent: only the workload connected
    assert [e.data["pid"] for e in run.events("agent-connected")] == [pid]
    assert {s.pid for s in run.steps()} == {pid}
    own = run.value("SELF_INPUT_FRACTION")
    assert abs(run.agent_fraction("torch-dataloader", WARMUP) - own) <= 0.10
    (pipe,) = run.pipelines()
    assert any(s.kind == "prefetch" and s.parallelism == 2 for s in pipe.stages)


def test_disabled_hook_is_reported_and_the_optimizer_clock_takes_over() -> None:
    run = run_with_agent(
        workload_cmd("agent_torch.py", "--mode", "input", "--steps", "10"),
        # (the model-call clock off too: it would mark this loop above the optimizer's)
        settings={"disabled_hooks": ["torch-dataloader", "torch-model-call"]},
    )
    assert run.returncode == 0, run.summary()
    info = run.infos()[-1]
    assert dict(info.hooks_skipped)["torch-dataloader"] == "disabled in settings"
    assert dict(info.hooks_skipped)["torch-model-call"] == "disabled in settings"
    assert "torch-optimizer" in info.hooks_applied
    assert run.steps("torch-dataloader") == []
    assert len(run.steps("torch-optimizer")) == WARMUP + 10 - 1


def test_hooked_modules_look_untouched() -> None:
    """The import hook leaves the real loader on the module (source, resources still work)."""
    code = (
        "import inspect, torch.utils.data.dataloader as d\n"
        "from importlib.machinery import SourceFileLoader\n"
        "assert type(d.__loader__) is SourceFileLoader, d.__loader__\n"
        "assert type(d.__spec__.loader) is SourceFileLoader, d.__spec__.loader\n"
        "assert 'class DataLoader' in inspect.getsource(d)\n"
        "assert d._BaseDataLoaderIter.__next__.__wrapped__ is not None\n"
        "print('ok')\n"
    )
    run = run_with_agent([sys.executable, "-c", code])
    assert run.returncode == 0, run.summary()
    assert run.stdout.split() == ["ok"]
