"""The agent inside real TensorFlow workloads: tf.data eager loops and Keras ``fit``.

The fraction tests assert on the session's shared recordings (``recordings.SHAPES``: each
workload run once by the real ``sofa-top record``); the rest run their own shapes.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from agent_harness import LiveServer, base_env, classify, run_with_agent, workload_cmd
from procs import spawned, wait_for
from recordings import Recordings

from sofa_top.agent.launch_env import agent_env
from sofa_top.datamodel.samples import PipelineSample, Sample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

pytest.importorskip("tensorflow")

WARMUP = 5


@pytest.mark.parametrize("loop", ["next", "for"])
@pytest.mark.parametrize("mode", ["input", "compute"])
def test_tf_eager_fraction_matches_the_workloads_own(
    recordings: Recordings, mode: str, loop: str
) -> None:
    run = recordings.get(f"tf-eager {mode} {loop}")
    assert run.exit_code == 0, run.describe()
    own = run.value("SELF_INPUT_FRACTION")
    seen = run.agent_fraction("tf-eager", WARMUP)
    assert abs(seen - own) <= 0.10, (seen, own)
    assert classify(seen) == classify(own) == mode
    steps = run.steps("tf-eager")
    # 45 batches: a step from each batch's arrival to the next one's (or to the end of data)
    assert [s.step for s in steps] == list(range(45))
    assert {s.batch_size for s in steps} == {8}
    info = run.infos()[-1]
    assert {"tf-eager", "tf-data-pipeline"} <= set(info.hooks_applied)
    assert ("tensorflow", "2.21.0") in info.frameworks or any(
        name == "tensorflow" for name, _ in info.frameworks
    )
    declared = [p for p in run.pipelines() if p.note.startswith("declared")]
    assert declared, run.describe()
    kinds = [s.kind for s in declared[0].stages]
    assert "map" in kinds and "batch" in kinds
    flagged = [s for s in declared[0].stages if s.is_bottleneck]
    if mode == "input":  # the serial map with no prefetch after it
        assert [(s.kind, s.parallelism) for s in flagged] == [("map", 1)]
    else:  # prefetched: nothing to flag in the declared pipeline
        assert flagged == []


def test_tf_data_runtime_pipeline_view() -> None:
    """With tf.data's autotune model on, the runtime stages come with their self time. The
    agent reads them a second after the iterator starts and then every pipeline_interval_s:
    the loop runs until that view has arrived."""
    cmd = workload_cmd("agent_tf_eager.py", "--mode", "compute", "--seconds", "600")

    def runtime(samples: list[Sample]) -> list[PipelineSample]:
        return [
            s for s in samples if isinstance(s, PipelineSample) and s.note.startswith("runtime")
        ]

    with LiveServer() as live:
        env = base_env()
        env.update(agent_env(live.socket_path, {"pipeline_interval_s": 0.5}, base=env))
        with spawned(cmd, env=env, stderr=subprocess.DEVNULL) as work:
            wait_for(lambda: runtime(live.snapshot()), 120, "a runtime pipeline view")
            assert work.poll() is None
    stages = runtime(live.snapshot())[-1].stages
    assert any(s.kind == "prefetch" for s in stages)
    assert all(s.self_time_s is None or s.self_time_s >= 0 for s in stages)
    assert sum(s.is_bottleneck for s in stages) == 1
    assert not any(s.is_bottleneck and s.kind == "prefetch" for s in stages)


SERIAL_AND_PARALLEL = """
import json
import tensorflow as tf
from sofa_top.agent.hooks_tf import runtime_stages

opts = tf.data.Options()
opts.autotune.enabled = True
opts.experimental_optimization.map_parallelization = False
opts.experimental_optimization.inject_prefetch = False
opts.experimental_optimization.map_and_batch_fusion = False
out = {}
for name, calls in (("serial", None), ("parallel", 3)):
    ds = tf.data.Dataset.range(10_000).map(lambda x: x * 2, num_parallel_calls=calls)
    it = iter(ds.batch(4).with_options(opts))
    for _ in range(200):
        next(it)
    out[name] = [(s["kind"], s["parallelism"]) for s in runtime_stages(it)[0]]
print(json.dumps(out))
"""


def test_tf_data_runtime_view_reads_a_plain_map_as_serial() -> None:
    """tf.data's model has no parallelism parameter on a plain ``Map`` node (``Dataset.map``
    without ``num_parallel_calls``, left serial by the options the SOFA case study sets): the
    runtime view says 1, as the declared one does, so the input advice offers parallel calls
    rather than reading it as AUTOTUNE over every core."""
    proc = subprocess.run(
        [sys.executable, "-c", SERIAL_AND_PARALLEL], capture_output=True, text=True, timeout=280
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ["map", 1] in out["serial"], out
    assert ["map", 3] in out["parallel"], out


@pytest.mark.parametrize("mode", ["input", "compute"])
def test_keras_fit_fraction_matches_the_workloads_own(recordings: Recordings, mode: str) -> None:
    run = recordings.get(f"keras fit {mode}")
    assert run.exit_code == 0, run.describe()
    own = run.value("SELF_INPUT_FRACTION")
    lower = run.value("SELF_INPUT_FRACTION_LOWER")
    upper = run.value("SELF_INPUT_FRACTION_UPPER")
    seen = run.agent_fraction("keras-fit", WARMUP)
    assert abs(seen - own) <= 0.10, (seen, own)
    # and, step by step, the wait the agent timed lies inside the workload's own bracket
    assert lower - 0.02 <= seen <= upper + 0.02, (lower, seen, upper)
    assert classify(seen) == classify(own) == mode
    steps = run.steps("keras-fit")
    assert [s.step for s in steps] == list(range(45))
    assert {s.batch_size for s in steps} == {32}
    info = run.infos()[-1]
    assert "keras-fit" in info.hooks_applied


def test_keras_fit_epochs_restart_the_step_clock() -> None:
    run = run_with_agent(
        workload_cmd("agent_keras_fit.py", "--mode", "compute", "--steps", "10", "--epochs", "2")
    )
    assert run.returncode == 0, run.summary()
    steps = run.steps("keras-fit")
    assert len(steps) == 30
    # the first step of each epoch starts at its own fetch, not at the previous epoch's end
    second = steps[15]
    assert second.start > steps[14].ts
    assert all(b.start == a.ts for a, b in itertools.pairwise(steps[15:]))


@pytest.mark.parametrize(("mode", "source"), [("input", "pipeline"), ("compute", "memory")])
def test_keras_fit_with_steps_per_execution_is_measured(mode: str, source: str) -> None:
    """N batches per compiled call: the wait is timed inside Keras' own loop, per execution."""
    spe = 16
    run = run_with_agent(
        workload_cmd(
            "agent_keras_fit.py",
            *("--mode", mode, "--source", source, "--steps-per-execution", str(spe)),
            *("--warmup", str(spe), "--steps", "40"),  # 56 steps: 3 full executions and 8
        )
    )
    assert run.returncode == 0, run.summary()
    first = int(run.value("SELF_FIRST_STEP"))
    own = run.value("SELF_INPUT_FRACTION")
    lower = run.value("SELF_INPUT_FRACTION_LOWER")
    upper = run.value("SELF_INPUT_FRACTION_UPPER")
    seen = run.agent_fraction("keras-fit", first)
    assert abs(seen - own) <= 0.10, (seen, own)
    assert lower - 0.03 <= seen <= upper + 0.03, (lower, seen, upper)
    assert classify(seen) == classify(own) == mode
    steps = run.steps("keras-fit")
    # every batch is a step, the short last execution too
    assert [s.step for s in steps] == list(range(56))
    # Keras slices in-memory arrays without a Batch stage: no batch size to read there
    assert {s.batch_size for s in steps} == ({32} if source == "pipeline" else {None})
    assert all(s.wait_cpu_s is None for s in steps)  # no CPU reading inside the graph
    info = run.infos()[-1]
    assert "keras-fit" in info.hooks_applied
    (note,) = (n for src, n in info.step_notes if src == "keras-fit")
    assert f"steps_per_execution={spe}" in note and "divided by its steps" in note


def test_keras_fit_steps_per_execution_with_a_generator_that_ends_early() -> None:
    """A generator shorter than steps_per_epoch: Keras stops the epoch; every batch counted."""
    code = (
        "import numpy as np, tensorflow as tf\n"
        "def gen():\n"
        "    for i in range(20):\n"
        "        yield np.full((8, 4), i, np.float32), np.zeros((8, 1), np.float32)\n"
        "spec = (tf.TensorSpec((8, 4), tf.float32), tf.TensorSpec((8, 1), tf.float32))\n"
        "ds = tf.data.Dataset.from_generator(gen, output_signature=spec)\n"
        "m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])\n"
        "m.compile('sgd', 'mse', steps_per_execution=8)\n"
        "h = m.fit(ds, epochs=1, steps_per_epoch=100, verbose=0)\n"
        "print('epochs', len(h.history['loss']))\n"
    )
    run = run_with_agent([sys.executable, "-c", code])
    assert run.returncode == 0, run.summary()
    assert "epochs 1" in run.stdout
    assert [s.step for s in run.steps("keras-fit")] == list(range(20))
    assert run.events("agent-error") == []


def test_iteration_inside_tf_function_is_left_alone(tmp_path: Path) -> None:
    """Graph-mode iteration has nothing to time from Python; it must not trip the agent."""
    code = (
        "import tensorflow as tf\n"
        "ds = tf.data.Dataset.range(20).batch(4)\n"
        "@tf.function\n"
        "def total():\n"
        "    s = tf.constant(0, tf.int64)\n"
        "    for x in ds:\n"
        "        s += tf.reduce_sum(x)\n"
        "    it = iter(ds)\n"
        "    return s + tf.reduce_sum(next(it))\n"
        "print(int(total()), sum(int(tf.reduce_sum(x)) for x in ds))\n"
    )
    script = tmp_path / "graph_loop.py"  # autograph needs the source: not `python -c`
    script.write_text(code)
    run = run_with_agent([sys.executable, str(script)])
    assert run.returncode == 0, run.summary()
    assert run.stdout.split() == ["196", "190"]
    assert "sofa-top agent:" not in run.stderr
    assert run.events("agent-error") == []
    assert len(run.steps("tf-eager")) == 5  # the eager pass only: 5 batches
