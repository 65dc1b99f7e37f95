"""Keras sessions' phases (issue 34): a ``predict`` pass is its own ``inference`` phase with its
own input share, and the headline speaks for the phase that took the most time; the compute
split is null unless each step's spans were timed in that step (Keras fit's tape and optimizer
fire once, while its train function is traced); a preview fetch before ``fit`` (``take(1)``,
``next(iter(ds))``, a ``for`` that breaks) is no training step.

The fast tests judge steps as the agent sends them; the slow ones record the real workloads
(``tests/workloads/keras_fit_predict_sequence.py``, ``keras_fit_preview.py``), which measure
their own truth and print it as a JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, log_lines, run_cli, validate_record_json

from sofa_top.agent.protocol import PHASE_EVAL, PHASE_INFER, PHASE_TRAIN
from sofa_top.analysis import steps as step_facts
from sofa_top.collectors.agent_frames import convert_frame
from sofa_top.datamodel.samples import PhaseHint, StepSample


def _steps(
    source: str,
    n: int,
    each_s: float,
    start: float,
    wait_s: float = 0.0,
    hint: PhaseHint = "",
    split: tuple[float, float, float] | None = None,
) -> list[StepSample]:
    f, b, o = split if split is not None else (None, None, None)
    return [
        StepSample(
            start + (i + 1) * each_s,
            i,
            start + i * each_s,
            each_s,
            wait_s,
            source,  # type: ignore[arg-type]
            forward_s=f,
            backward_s=b,
            optimizer_s=o,
            phase_hint=hint,
        )
        for i in range(n)
    ]


def _frame(flags: int) -> dict[str, Any]:
    return {
        "type": "steps",
        "source": "tf-eager",
        "data": [0, 1_000_000, 1_030_000, 12_000, 16, None],
        "compute": [None, None, None, flags],
    }


def test_a_predict_step_is_an_inference_step_and_evaluate_stays_eval() -> None:
    (predict,) = convert_frame(_frame(PHASE_EVAL | PHASE_INFER), 1)
    (evaluate,) = convert_frame(_frame(PHASE_EVAL), 1)
    (train,) = convert_frame(_frame(PHASE_TRAIN | PHASE_EVAL | PHASE_INFER), 1)
    assert isinstance(predict, StepSample) and predict.phase_hint == "inference"
    assert isinstance(evaluate, StepSample) and evaluate.phase_hint == "eval"
    assert isinstance(train, StepSample) and train.phase_hint == "train"


def test_predict_after_fit_is_its_own_phase_and_leads_the_headline() -> None:
    fit = _steps("keras-fit", 20, 0.01, 0.0, wait_s=0.0005, hint="train")
    val = _steps("keras-evaluate", 10, 0.005, 0.2, hint="eval")
    pred = _steps("tf-eager", 150, 0.03, 0.3, wait_s=0.012, hint="inference")
    phases = step_facts.by_phase(fit + val + pred)
    assert {p: len(s) for p, s in phases.items()} == {"train": 20, "eval": 10, "inference": 150}
    share = step_facts.input_fraction(phases["inference"])
    assert share is not None and abs(share - 0.4) < 1e-6
    assert step_facts.main_phase(phases) == "inference"
    # a fit that takes the most time keeps the headline (its traced first step is no measure)
    long_fit = _steps("keras-fit", 200, 0.03, 0.0, hint="train")
    slow = replace_duration(long_fit[0], 30.0)
    phases = step_facts.by_phase([slow, *long_fit[1:], *pred])
    assert step_facts.main_phase(phases) == "train"
    # and the trace alone does not make a short fit the longest phase
    short = [replace_duration(fit[0], 30.0), *fit[1:]]
    assert step_facts.main_phase(step_facts.by_phase(short + pred)) == "inference"


def replace_duration(step: StepSample, duration_s: float) -> StepSample:
    from dataclasses import replace

    return replace(step, duration_s=duration_s, start=step.ts - duration_s)


def test_compute_split_is_null_unless_each_step_was_split() -> None:
    # Keras fit: the tape and optimizer hooks fired once, in the step that traced the graph
    traced = _steps("keras-fit", 1, 2.0, 0.0, hint="train", split=(0.0, 0.2, 0.9))
    fit = traced + _steps("keras-fit", 40, 0.01, 2.0, hint="train")
    assert step_facts.compute_split(fit) is None
    # an eager loop whose every step is split keeps its split
    eager = _steps("tf-eager", 40, 0.01, 0.0, hint="train", split=(0.004, 0.004, 0.002))
    split = step_facts.compute_split(eager)
    assert split is not None and abs(split["forward"] - 0.4) < 1e-6, split


def test_preview_fetches_before_fit_are_no_training_steps() -> None:
    preview = _steps("tf-eager", 3, 0.2, 0.0)  # take(1), a for that breaks: no evidence
    fit = _steps("keras-fit", 80, 0.015, 1.0, wait_s=0.001, hint="train")
    phases = step_facts.by_phase(preview + fit)
    assert {p: len(s) for p, s in phases.items()} == {"train": 80}
    assert step_facts.main_source(phases["train"]) == "keras-fit"
    # a tf.function loop over tf.data: only its first step (the trace) says it trains; the
    # steps after it are the loop's
    loop = _steps("tf-eager", 1, 0.5, 1.0, hint="train") + _steps("tf-eager", 50, 0.01, 1.5)
    assert len(step_facts.by_phase(preview + loop)["train"]) == 51
    # an eager loop whose every step trains loses only the preview before it
    eager = _steps("tf-eager", 30, 0.02, 1.0, hint="train")
    assert len(step_facts.by_phase(preview + eager)["train"]) == 30
    # the same of a DataLoader's `for ... break` before its training loop
    peek = _steps("torch-dataloader", 2, 0.1, 0.0)
    torch_loop = _steps("torch-dataloader", 40, 0.02, 1.0, hint="train")
    assert len(step_facts.by_phase(peek + torch_loop)["train"]) == 40
    # a window of a tf.function loop that retraced (a last, smaller batch) in its middle
    window = _steps("tf-eager", 20, 0.01, 5.0) + _steps("tf-eager", 1, 0.3, 5.2, hint="train")
    window += _steps("tf-eager", 20, 0.01, 5.5)
    assert len(step_facts.by_phase(window, training=True)["train"]) == 41


def _record(tmp_path: Path, script: str, *args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``record --json`` of a workload, and the truth it printed."""
    session = tmp_path / "s.sofa"
    cmd = [sys.executable, str(WORKLOADS / script), *args]
    proc = run_cli("record", "--json", "-o", str(session), "--", *cmd, timeout=280)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    validate_record_json(summary)
    found = [line for line in log_lines(session) if line.startswith('{"truth"')]
    assert found, log_lines(session)[-20:]
    truth: dict[str, Any] = json.loads(found[-1])["truth"]
    return summary, truth


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fit_then_predict_over_a_sequence_reads_the_predicts_input_share(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorflow")
    summary, truth = _record(tmp_path, "keras_fit_predict_sequence.py")
    steps = summary["steps"]
    phases = {p["phase"]: p for p in steps["phases"]}
    assert set(phases) == {"train", "inference"}, steps
    assert phases["train"]["count"] == steps["sources"]["keras-fit"] == 20, steps
    share = phases["inference"]["input_wait_fraction"]
    own = truth["input_wait_fraction"]
    assert own >= 0.15 and share is not None and share >= 0.10, (steps, truth)
    # the wait on the loop's thread is part of what removing the decoding saves (the rest:
    # the loop's own Python held up by the generator thread's hold on the GIL)
    assert share <= own + 0.10, (steps, truth)
    assert steps["phase"] == "inference" and summary["verdict"]["evidence"]["phase"] == "inference"
    assert steps["compute_split"] is None, steps


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_keras_fit_after_previews_has_only_its_steps_and_no_compute_split(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorflow")
    summary, truth = _record(tmp_path, "keras_fit_preview.py")
    steps = summary["steps"]
    assert [p["phase"] for p in steps["phases"]] == ["train"], steps
    assert steps["phase"] == "train" and steps["count"] == truth["fit_steps"], (steps, truth)
    assert steps["sources"].get("tf-eager", 0) >= 1, steps  # the previews: kept, in no phase
    assert steps["compute_split"] is None, steps
