"""Verdicts are pure functions: each threshold is checked on both sides."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sofa_top.analysis.causes import Neighbours
from sofa_top.analysis.steps import HOOKED, MIN_HOST_SAMPLES, RunFacts, input_fraction
from sofa_top.analysis.verdicts import (
    HIGH_INPUT_FRACTION,
    INPUT_BOUND_FRACTION,
    MIN_STEPS,
    MODERATE_INPUT_FRACTION,
    Evidence,
    judge,
)
from sofa_top.datamodel.samples import (
    AgentInfo,
    Neighbour,
    PipelineSample,
    PipelineStage,
    StepSample,
    SystemSample,
)
from sofa_top.datamodel.snapshot import FunctionStat, StackSummary, ThreadStat
from sofa_top.datamodel.verdict import UNMEASURED
from sofa_top.optimizers.advice import toggles_off


def _steps(n: int, wait_fraction: float, step_s: float = 0.1) -> list[StepSample]:
    return [
        StepSample(float(i), i, float(i) - step_s, step_s, step_s * wait_fraction, "tf-eager")
        for i in range(n)
    ]


def _stacks(samples: int = 500, **split: float) -> StackSummary:
    full = {"input": 0.0, "compute": 0.0, "python": 0.0, "idle": 0.0, **split}
    return StackSummary(
        0.0, 5.0, samples, (), full, (ThreadStat(1, 1, "MainThread", samples, full),), 100.0, 2.0
    )


SERIAL_TF = PipelineSample(
    0.0,
    "tf.data",
    (
        PipelineStage("Range", "source", None, None, None),
        PipelineStage("Map", "map", 1, None, 0.01, is_bottleneck=True),
        PipelineStage("Batch", "batch", None, None, None),
    ),
)


@pytest.mark.parametrize(
    "fraction, kind, severity",
    [
        (0.78, "input-bound", "high"),
        (HIGH_INPUT_FRACTION, "input-bound", "high"),
        (INPUT_BOUND_FRACTION, "input-bound", "high"),
        (INPUT_BOUND_FRACTION - 0.01, "compute-bound", None),
        (MODERATE_INPUT_FRACTION, "compute-bound", None),
        (0.0, "compute-bound", None),
    ],
)
def test_step_thresholds(fraction: float, kind: str, severity: str | None) -> None:
    v = judge(Evidence(steps=_steps(20, fraction), tree_cpu=100.0, cpu_count=2))
    assert (v.kind, v.severity) == (kind, severity)
    assert v.as_json()["evidence"]["input_fraction"] == pytest.approx(fraction, abs=1e-3)


@pytest.mark.parametrize("fraction", [0.63496, 0.11496])
def test_the_headline_and_the_evidence_say_one_percent(fraction: float) -> None:
    """A share on a rounding edge (63.496%: 63% as it is, 64% once kept to 0.635) is rounded
    once, where it is derived: the headline and the evidence line, which prints the kept
    number, read the same percent."""
    v = judge(Evidence(steps=_steps(20, fraction), tree_cpu=100.0, cpu_count=2))
    kept = v.as_json()["evidence"]["input_fraction"]
    assert isinstance(kept, float)
    assert f"{kept:.0%} of each step" in v.headline, (kept, v.headline)


def test_a_moderate_input_wait_is_a_line_of_the_compute_verdict() -> None:
    """Between XProf's 5% and INPUT_BOUND_FRACTION the step is compute's: the headline says
    so, then the input share and what an input lever can gain at most; the lever comes after
    the compute advice."""
    v = judge(Evidence(steps=_steps(20, 0.10), pipeline=SERIAL_TF, cpu_count=2))
    assert v.kind == "compute-bound"
    assert "an input lever gains at most 1.11x" in v.headline
    assert v.as_json()["evidence"]["input_speedup_bound"] == pytest.approx(1 / 0.9, abs=1e-3)
    assert judge(Evidence(steps=_steps(20, 0.18), cpu_count=2)).kind == "compute-bound"
    toggles = [r.toggle for r in v.recommendations]
    assert "prefetch" in toggles and toggles[0] != "prefetch"
    lever = next(r.text for r in v.recommendations if r.toggle == "prefetch")
    assert lever.startswith("at most 1.11x from the input: 10% of each step waits for it: ")
    assert "prefetch" not in toggles_off("tensorflow", v.kind, None, set(toggles))
    # below XProf's moderate bar the input is not mentioned
    low = judge(Evidence(steps=_steps(20, 0.03), pipeline=SERIAL_TF, cpu_count=2))
    assert "input_speedup_bound" not in low.as_json()["evidence"]
    assert "prefetch" not in [r.toggle for r in low.recommendations]


def test_input_bound_names_the_stage_and_the_fix() -> None:
    v = judge(Evidence(steps=_steps(20, 0.78), pipeline=SERIAL_TF))
    assert v.headline == "input-bound: 78% of each step waits for input in stage Map"
    texts = [r.text for r in v.recommendations]
    assert any("num_parallel_calls=tf.data.AUTOTUNE" in t for t in texts)
    assert "add .prefetch(tf.data.AUTOTUNE) after batch()" in texts
    assert {r.toggle for r in v.recommendations} == {"prefetch"}
    assert v.as_json()["evidence"]["bottleneck_stage"] == "Map"


def test_torch_dataloader_recommendation() -> None:
    p = PipelineSample(0.0, "torch", (PipelineStage("DataLoader", "source", 0, None, None),))
    v = judge(Evidence(steps=_steps(10, 0.5), pipeline=p))
    assert "num_workers" in v.recommendations[0].text


@pytest.mark.parametrize(
    "source, fix",
    [("torch-dataloader", "DataLoader(num_workers="), ("keras-fit", "num_parallel_calls=")],
)
def test_the_first_steps_name_the_framework_of_the_fix(source: str, fix: str) -> None:
    # before the agent's status or any stack sample: the step hook alone names the framework
    steps = [replace(s, source=source) for s in _steps(10, 0.8)]
    v = judge(Evidence(steps=steps, tree_cpu=5.0, cpu_count=2))
    texts = [r.text for r in v.recommendations]
    assert any(fix in t for t in texts), texts
    loop = [replace(s, source="python", name="loop") for s in steps]  # an api loop's clock
    generic = judge(Evidence(steps=loop, tree_cpu=5.0))
    assert not any(fix in r.text for r in generic.recommendations)


def test_few_steps_fall_back_to_stacks() -> None:
    v = judge(
        Evidence(
            steps=_steps(2, 0.9),
            stacks=_stacks(compute=0.8, python=0.2),
            tree_cpu=180.0,
            cpu_count=2,
        )
    )
    assert v.kind == "compute-bound" and v.as_json()["evidence"]["source"] == "stacks"


@pytest.mark.parametrize(
    "split, kind",
    [
        ({"input": 0.6, "compute": 0.4}, "input-bound"),
        ({"input": 0.1, "compute": 0.7, "python": 0.2}, "compute-bound"),
        ({"python": 0.9, "compute": 0.1}, "python-overhead"),
        ({"python": 0.3, "compute": 0.3, "idle": 0.4}, "unknown"),
    ],
)
def test_attach_mode_from_stacks(split: dict[str, float], kind: str) -> None:
    assert judge(Evidence(stacks=_stacks(**split), tree_cpu=90.0)).kind == kind


@pytest.mark.parametrize(
    "samples, split, kind",
    [
        # a short run beside busy neighbours: the sampler's budget bought 8 Hz for 5 s
        (40, {"python": 0.94, "compute": 0.06}, "python-overhead"),
        (40, {"input": 0.6, "compute": 0.4}, "input-bound"),
        # as many samples, a split that could be chance: not read
        (40, {"input": 0.25, "compute": 0.45, "python": 0.3}, "unknown"),
        (40, {"compute": 0.6, "python": 0.4}, "unknown"),
        # too few to read any split
        (12, {"python": 1.0}, "unknown"),
    ],
)
def test_a_few_stack_samples_are_read_when_one_share_is_beyond_doubt(
    samples: int, split: dict[str, float], kind: str
) -> None:
    v = judge(Evidence(stacks=_stacks(samples, **split), tree_cpu=90.0))
    assert v.kind == kind, v
    if kind == "unknown":
        assert "too few stack samples" in v.headline, v.headline


def test_stacks_alone_name_the_models_framework_not_its_inputs() -> None:
    """A torch model fed by TensorFlow's image ops, attached without the agent: the hot
    functions are TensorFlow's (the model's calls, little work of their own, rank below 30th),
    and the fix is still the torch model's, not tf.data's."""
    tf_ops = [
        FunctionStat(f"op{i}", "tensorflow/python/ops/gen_math_ops.py", 1, 2.0, 2.0, "t", "input")
        for i in range(45)
    ]
    model = FunctionStat(
        "Module._call_impl", "torch/nn/modules/module.py", 1, 0.0, 15.0, "t", "compute"
    )
    stacks = replace(_stacks(input=0.8, compute=0.2), functions=(*tf_ops, model))
    v = judge(Evidence(stacks=stacks, tree_cpu=100.0, cpu_count=4))
    assert v.kind == "input-bound" and v.as_json()["evidence"]["source"] == "stacks"
    recs = " | ".join(r.text for r in v.recommendations)
    assert "tf.data" not in recs and "DataLoader" in recs, recs


def test_idle_and_unknown_and_memory() -> None:
    assert judge(Evidence(stacks=_stacks(idle=1.0), tree_cpu=0.5)).kind == "idle"
    unknown = judge(Evidence())
    assert unknown.kind == "unknown" and "launch" in unknown.recommendations[0].text
    sys_full = SystemSample(0.0, (100.0,), 100.0, 0.0, 97, 100, 50, 100)
    assert judge(Evidence(system=sys_full, steps=_steps(10, 0.0))).kind == "memory-pressure"


# -- input causes: cpu vs latency -----------------------------------------------------------------
def _waited(
    n: int, wait_fraction: float, busy_cores: float, step_s: float = 0.1
) -> list[StepSample]:
    """Steps whose waits kept ``busy_cores`` of the process's CPU busy (the agent's measure)."""
    wait = step_s * wait_fraction
    return [
        StepSample(float(i), i, i - step_s, step_s, wait, "tf-eager", 8, 1, wait * busy_cores)
        for i in range(n)
    ]


def torch_loader(workers: int) -> PipelineSample:
    return PipelineSample(
        0.0, "torch", (PipelineStage("Images", "source", max(1, workers), None, None),)
    )


@pytest.mark.parametrize(
    "busy, pipeline, child_cpu, cause",
    [
        (0.95, SERIAL_TF, None, "cpu"),  # a serial map keeps its one core busy
        (0.05, SERIAL_TF, None, "latency"),  # the map sleeps on reads
        (0.50, SERIAL_TF, None, "mixed"),
        (0.02, torch_loader(2), 190.0, "cpu"),  # two busy DataLoader workers
        (0.02, torch_loader(2), 8.0, "latency"),  # two workers that mostly wait
        (0.90, torch_loader(0), None, "cpu"),  # __getitem__ in the loop's own thread
        (0.90, None, None, "cpu"),  # nothing known of the pipeline: a serial loop
    ],
)
def test_input_cause(
    busy: float, pipeline: PipelineSample | None, child_cpu: float | None, cause: str
) -> None:
    v = judge(
        Evidence(
            steps=_waited(20, 0.8, busy),
            cpu_count=2,
            pipeline=pipeline,
            child_cpu=child_cpu,
            tree_cpu=100.0,
        )
    )
    assert v.kind == "input-bound"
    assert v.as_json()["evidence"]["input_cause"] == cause
    assert v.as_json()["evidence"]["input_cause_source"] == "agent"
    expected = busy + (child_cpu or 0.0) / 100
    assert v.as_json()["evidence"]["input_cpu_cores"] == pytest.approx(expected, abs=1e-3)
    words = {"cpu": "CPU-bound preprocessing", "latency": "waits on I/O", "mixed": "partly"}
    assert words[cause] in v.headline


def test_input_cause_thresholds_on_both_sides() -> None:
    from sofa_top.analysis.inputs import INPUT_CPU_BUSY, INPUT_CPU_IDLE

    def cause(busy: float) -> object:
        v = judge(Evidence(steps=_waited(20, 0.8, busy), pipeline=SERIAL_TF, cpu_count=2))
        return v.as_json()["evidence"]["input_cause"]

    assert cause(INPUT_CPU_BUSY + 0.005) == "cpu"
    assert cause(INPUT_CPU_BUSY - 0.02) == "mixed"
    assert cause(INPUT_CPU_IDLE - 0.005) == "latency"
    assert cause(INPUT_CPU_IDLE + 0.02) == "mixed"


def test_latency_recommends_parallelism_past_the_cores() -> None:
    v = judge(Evidence(steps=_waited(20, 0.8, 0.03), pipeline=SERIAL_TF, cpu_count=2))
    first = v.recommendations[0]
    assert first.toggle == "prefetch"
    assert "private_threadpool_size=16" in first.text and "num_parallel_calls=16" in first.text
    v = judge(
        Evidence(steps=_waited(20, 0.8, 0.0), pipeline=torch_loader(0), cpu_count=4, child_cpu=0)
    )
    assert "num_workers=16" in v.recommendations[0].text


def test_cpu_cause_on_all_cores_names_cheaper_work_and_rules_nothing_out() -> None:
    autotuned = PipelineSample(
        0.0, "tf.data", (PipelineStage("ParallelMap", "map", 2, None, None),)
    )
    v = judge(Evidence(steps=_waited(20, 0.8, 1.9), pipeline=autotuned, cpu_count=2))
    assert v.as_json()["evidence"]["input_cause"] == "cpu"
    texts = " | ".join(r.text for r in v.recommendations)
    assert "keeps its producers on the 2 cores" in texts and "cannot help" not in texts
    assert "cache()" in texts and "tf.data service" in texts
    # serial on 2 cores: parallelizing to the cores is still the first fix
    v = judge(Evidence(steps=_waited(20, 0.8, 0.95), pipeline=SERIAL_TF, cpu_count=2))
    assert v.recommendations[0].toggle == "prefetch"
    assert "cannot help" not in " ".join(r.text for r in v.recommendations)


def test_input_cause_without_the_agent_uses_the_tree() -> None:
    # attach mode: stacks say input-bound, the tree's CPU tells the cause
    for tree_cpu, cause in ((12.0, "latency"), (105.0, "cpu")):
        v = judge(Evidence(stacks=_stacks(input=0.7, compute=0.3), tree_cpu=tree_cpu, cpu_count=2))
        assert v.kind == "input-bound"
        assert (
            v.as_json()["evidence"]["input_cause"],
            v.as_json()["evidence"]["input_cause_source"],
        ) == (cause, "tree")
    # steps without the agent's CPU measure and no tree CPU: no cause, no guess
    v = judge(Evidence(steps=_steps(20, 0.8)))
    assert "input_cause" not in v.as_json()["evidence"]


def test_input_cause_carries_iowait() -> None:
    system = SystemSample(0.0, (5.0, 5.0), 5.0, 12.0, 1 << 30, 8 << 30, 0, 0)
    v = judge(Evidence(steps=_waited(20, 0.8, 0.02), pipeline=SERIAL_TF, system=system))
    assert (
        v.as_json()["evidence"]["input_cause"] == "latency"
        and v.as_json()["evidence"]["iowait_percent"] == 12.0
    )


def test_without_the_schedulers_accounting_the_cause_is_the_stages_cpu() -> None:
    """No schedstat (another kernel, an older session): the stage's CPU during the waits over
    its usable cores decides, whatever other processes do (a model of what they leave free
    read a starved, sleeping stage as CPU-bound: the demo's own input under one CPU hog)."""
    for busy, cause in ((0.95, "cpu"), (0.5, "mixed"), (0.03, "latency")):
        v = judge(Evidence(steps=_waited(20, 0.8, busy), pipeline=SERIAL_TF, cpu_count=2))
        assert (
            v.as_json()["evidence"]["input_cause"],
            v.as_json()["evidence"]["input_cause_source"],
        ) == (cause, "agent")
        assert v.as_json()["evidence"]["input_time_split"] is None
        busy_around = replace_ev(v, busy)
        assert busy_around.as_json()["evidence"]["input_cause"] == cause


def replace_ev(v: object, busy: float) -> object:
    ev = Evidence(
        steps=_waited(20, 0.8, busy),
        pipeline=SERIAL_TF,
        cpu_count=2,
        neighbours=Neighbours(1.7, (Neighbour(9, "hog", 1.0),)),
    )
    return judge(ev)


# -- step sources and the reasons of unknown verdicts ------------------------------------------


def test_the_verdict_names_its_step_source() -> None:
    steps = [replace(s, source="torch-backward") for s in _steps(20, 0.0)]
    facts = RunFacts(mode="launch", launched=True)
    v = judge(Evidence(steps=steps, stacks=_stacks(compute=0.9, python=0.1), facts=facts))
    assert v.kind == "compute-bound"
    assert v.as_json()["evidence"]["step_source"] == "torch-backward"
    assert v.as_json()["evidence"]["step_sources"] == {"torch-backward": 20}
    assert v.as_json()["evidence"]["input_wait_measured"] is False and "not measured" in v.headline
    assert v.as_json()["evidence"]["input_fraction"] is None  # not measured is not zero
    timed = judge(Evidence(steps=_steps(20, 0.0)))
    assert (
        timed.as_json()["evidence"]["input_wait_measured"] is True
        and "not measured" not in timed.headline
    )


@pytest.mark.parametrize(
    ("stacks", "kind"),
    [
        (None, "unknown"),
        (_stacks(compute=0.3, python=0.4, input=0.1, idle=0.2), "unknown"),
        (_stacks(input=0.6, compute=0.4), "input-bound"),
        (_stacks(compute=0.7, input=0.3), "compute-bound"),
    ],
)
def test_a_clock_blind_to_input_abstains_unless_the_stacks_tell(
    stacks: StackSummary | None, kind: str
) -> None:
    """Optimizer steps cannot see input: with no stacks, or stacks that show no dominant
    class, the verdict says what is missing and how to mark the steps instead of a guess."""
    steps = [replace(s, source="torch-optimizer") for s in _steps(20, 0.0)]
    v = judge(Evidence(steps=steps, stacks=stacks, facts=RunFacts("launch", True)))
    assert v.kind == kind, v.headline
    assert v.as_json()["evidence"]["input_fraction"] is None and "not measured" in v.headline
    if kind == "unknown":
        assert any("api.iterate" in r.text for r in v.recommendations), v.recommendations


def test_a_step_note_is_carried_into_the_evidence() -> None:
    agent = AgentInfo(0.0, 1, "3.11", (), ("keras-fit",), (), 0, (("tf-eager", "per execution"),))
    v = judge(Evidence(steps=_steps(20, 0.0), facts=RunFacts("launch", True, agent)))
    assert v.as_json()["evidence"]["step_note"] == "per execution"


@pytest.mark.parametrize(
    ("facts", "reason", "next_step"),
    [
        (RunFacts("attach", False), "attached to a running process", "sofa-top launch"),
        (RunFacts("record", False), "record mode, attached", "sofa-top launch"),
        (RunFacts("launch", True), "agent never connected", "api.iterate"),
        (
            RunFacts("launch", True, AgentInfo(0.0, 1, "3.11", (("torch", "2"),), (), ())),
            f"the loop used none of {HOOKED}",
            "api.iterate",
        ),
        (
            RunFacts(
                "launch",
                True,
                AgentInfo(0.0, 1, "3.11", (), (), (("keras-fit", "a tf.distribute strategy"),)),
            ),
            "keras-fit: a tf.distribute strategy",
            "api.iterate",
        ),
    ],
)
def test_unknown_says_why_and_a_next_step_this_mode_allows(
    facts: RunFacts, reason: str, next_step: str
) -> None:
    v = judge(Evidence(facts=facts))
    assert v.kind == "unknown"
    assert reason in v.headline and reason in str(v.as_json()["evidence"]["steps_reason"])
    assert next_step in v.recommendations[0].text


@pytest.mark.parametrize("steps", [0, MIN_STEPS - 1])
def test_a_workload_that_failed_before_a_verdict_heads_with_its_error(steps: int) -> None:
    """Whatever the stacks saw (its import machinery), the headline is the failure."""
    facts = RunFacts("record", True, None, 2, "python: can't open file 'x.py'")
    v = judge(Evidence(steps=_steps(steps, 0.0) if steps else [], facts=facts))
    assert v.kind == "unknown"
    assert (
        v.headline == "unknown: the workload failed (exit code 2): python: can't open file 'x.py'"
    )
    assert v.as_json()["evidence"]["workload_error"] == "python: can't open file 'x.py'"
    if not steps:
        assert "exited with code 2 before any step" in str(v.as_json()["evidence"]["steps_reason"])
    assert "fix the workload's error" in v.recommendations[0].text
    stopped = judge(Evidence(facts=replace(facts, exit_code=-2, stopped=True)))
    assert "failed" not in stopped.headline  # sofa-top's own SIGINT is no failure
    if facts.launched:  # never "run it under launch" when it already runs under launch
        assert "sofa-top launch" not in " ".join(r.text for r in v.recommendations)


def test_a_failure_after_some_steps_is_in_the_headline() -> None:
    facts = RunFacts("launch", True, None, 1, "IndexError: list index out of range")
    v = judge(Evidence(steps=_steps(20, 0.0), facts=facts))
    assert v.kind == "compute-bound"
    assert v.headline.endswith(
        "(then the workload failed with exit code 1: IndexError: list index out of range)"
    )
    assert v.as_json()["evidence"]["workload_error"] == "IndexError: list index out of range"


# -- physically possible numbers ------------------------------------------------------------------
CORE_COUNT = __import__("re").compile(r"(\d+(?:\.\d+)?) of (\d+) cores?\b")


def _core_counts(*texts: str) -> list[tuple[float, int]]:
    return [(float(x), int(n)) for t in texts for x, n in CORE_COUNT.findall(t)]


def test_busy_cores_never_exceed_the_stage_or_the_cores() -> None:
    # a serial stage whose waits saw 2.0 cores busy: idle OpenMP threads spinning meanwhile
    v = judge(Evidence(steps=_waited(20, 0.8, 2.0), pipeline=SERIAL_TF, cpu_count=2))
    assert (
        v.as_json()["evidence"]["input_cpu_cores"] == 1.0
        and v.as_json()["evidence"]["wait_cpu_cores"] == 2.0
    )
    assert "1.0 of 2 cores busy, serial stage" in v.headline
    # one core count for the headline and the advice, X <= N everywhere
    counts = _core_counts(v.headline, *(r.text for r in v.recommendations))
    assert counts and all(x <= n and n == 2 for x, n in counts)
    v = judge(Evidence(steps=_waited(20, 0.8, 0.03), pipeline=SERIAL_TF, cpu_count=1))
    assert "of 1 core busy" in v.headline and "past the 1 core:" in v.recommendations[0].text


# -- cpu-oversubscribed ---------------------------------------------------------------------------
def _pool(runnable: float, tree_cpu: float) -> Evidence:
    return Evidence(
        steps=_steps(20, 0.0), cpu_count=2, runnable_threads=runnable, tree_cpu=tree_cpu
    )


def test_oversubscription_on_both_sides_of_its_thresholds() -> None:
    from sofa_top.analysis.verdicts import OVERSUB_MIN_RUNNABLE, OVERSUB_MIN_WAITING

    # 2 OpenMP threads that other processes leave 0.4 of 2 cores (measured: 1.86 runnable)
    v = judge(_pool(1.86, 40.0))
    assert v.kind == "cpu-oversubscribed" and v.as_json()["evidence"]["threads_waiting"] == 1.46
    assert "0.4 of 2 cores" in v.headline
    assert v.recommendations[0].toggle == "threads"
    assert all(x <= n for x, n in _core_counts(v.headline))
    # a framework's default pool on an idle machine gets the cores its threads want
    assert judge(_pool(2.0, 200.0)).kind == "compute-bound"
    # one thread on a busy machine waits for a core, but no pool waits for it
    assert judge(_pool(1.0, 30.0)).kind == "compute-bound"
    busy = 100.0
    at = OVERSUB_MIN_WAITING + busy / 100
    assert judge(_pool(at + 0.01, busy)).kind == "cpu-oversubscribed"
    assert judge(_pool(at - 0.02, busy)).kind == "compute-bound"
    assert judge(_pool(OVERSUB_MIN_RUNNABLE - 0.01, 10.0)).kind == "compute-bound"
    assert judge(_pool(OVERSUB_MIN_RUNNABLE + 0.01, 10.0)).kind == "cpu-oversubscribed"
    # input-bound stays input-bound: the input is what the loop waits for
    both = replace(_pool(3.0, 50.0), steps=_steps(20, 0.5))
    assert judge(both).kind == "input-bound"


def test_an_injected_agent_is_never_called_missing() -> None:
    """Attached with the agent injected: the verdict says what the agent saw, as the header
    says ``agent injected`` (one agent state on a screen), and does not send the user to
    ``launch`` for what the injected agent already does."""
    agent = AgentInfo(0.0, 1, "3.11", (("torch", "2"),), (), ())
    v = judge(Evidence(facts=RunFacts("attach", False, agent)))
    assert "(no agent)" not in v.headline and "no step telemetry" not in v.headline
    assert f"the loop used none of {HOOKED}" in v.headline
    assert "sofa-top launch" not in v.recommendations[0].text
    assert RunFacts("attach", False, agent).mode_text().endswith("sofa-top's agent injected")
    assert "(no agent)" in RunFacts("attach", False, None).mode_text()


def test_beside_busy_neighbours_a_thread_cap_is_offered_unmeasured_not_ruled_out() -> None:
    """A compute-bound loop whose pools the window saw unstarved, beside neighbours that keep a
    core busy: the thread cap may win or lose with what they run, so it is offered, unmeasured,
    and the panel does not call it of no help; quiet, it stays off with its reason."""
    steps = [replace(s, source="torch-dataloader") for s in _steps(20, 0.02)]
    quiet = judge(Evidence(steps=steps, cpu_count=2))
    assert quiet.kind == "compute-bound"
    assert "threads" not in {r.toggle for r in quiet.recommendations}
    offered = [r.toggle for r in quiet.recommendations]
    assert "threads" in toggles_off("torch", quiet.kind, None, offered)
    hog = Neighbours(1.0, (Neighbour(9, "hog", 1.0),))
    busy = judge(Evidence(steps=steps, cpu_count=2, neighbours=hog))
    assert busy.kind == "compute-bound"
    caps = [r for r in busy.recommendations if r.toggle == "threads"]
    assert len(caps) == 1 and UNMEASURED in caps[0].text and "1.0 of 2 cores" in caps[0].text
    assert busy.recommendations[: len(quiet.recommendations)] == quiet.recommendations
    offered = [r.toggle for r in busy.recommendations]
    assert "threads" not in toggles_off("torch", busy.kind, None, offered)
    # a neighbour below the bar (half a core) is no reason
    light = Neighbours(0.3, (Neighbour(9, "cron", 0.3),))
    lit = judge(Evidence(steps=steps, cpu_count=2, neighbours=light))
    assert lit.recommendations == quiet.recommendations


def test_severity_none_reads_back_and_an_old_sessions_empty_string_too() -> None:
    from sofa_top.datamodel.verdict import Verdict

    plain = Verdict("compute-bound", 0.9, "compute")
    assert plain.severity is None and plain.as_json()["severity"] is None
    assert Verdict.from_json(plain.as_json()) == plain
    old = {**plain.as_json(), "severity": ""}  # what an older version stored
    assert Verdict.from_json(old).severity is None
    assert Verdict.from_json({**old, "severity": "high"}).severity == "high"


def test_a_few_host_samples_split_the_host_time_and_none_make_it_all_input() -> None:
    """A model-call step's input wait is its host time's input share: from ten host samples the
    stacks' share (a short generation loop, 79% of its host time on the output, read 54% input
    when 19 samples counted as none); below that all of it, the most it can be."""
    steps = [
        StepSample(float(i), i, float(i) - 0.1, 0.1, 0.05, "torch-model-call") for i in range(20)
    ]
    split = {"input": 0.15, "python": 0.0, "sync": 0.05, "output": 0.8}
    assert input_fraction(steps, split, MIN_HOST_SAMPLES) == pytest.approx(0.5 * 0.15)
    assert input_fraction(steps, split, MIN_HOST_SAMPLES - 1) == pytest.approx(0.5)
    assert input_fraction(steps, None, 0) == pytest.approx(0.5)
