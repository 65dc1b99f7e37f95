"""Loops that prepare their input in their own body, then call a model (the SOFA case), and
the ones no fetch marks: every shape gets steps from the model-call clock and the right
verdict, in launch and in attach mode.

Each workload (``tests/workloads/inference_shapes.py``) measures its own truth with
``perf_counter``: the time in its model call (with the loss, backward and optimizer step when
it trains) against its loop's time. The checks read what the issue names: ``steps.count``,
``steps.sources``, ``steps.input_wait_fraction`` (within 0.10 of the loop's own measure),
``verdict.kind``, ``verdict.recommendations`` (written for the framework of the *model*),
``steps.p50_s``/``p90_s``/``p99_s``, ``steps.compute_split``, ``steps.phases``. Each shape is
recorded once per module (``recordings.Recordings``) and shared by its tests.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import validate_record_json
from faults.conftest import no_traceback, running, sofa
from recordings import Recordings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

pytest.importorskip("torch")
pytest.importorskip("tensorflow")
pytest.importorskip("PIL")

SCRIPT = "inference_shapes.py"
WORKLOAD = Path(__file__).parent / "workloads" / SCRIPT
# A model-call step's input share comes from its host samples: beside busy neighbours py-spy
# buys ~10 Hz, and a 6 s loop that calls its model 15% of the time left 12 of them (0.70 read
# against its own 0.84)
SECONDS = "10"

# shape -> (its clock, the verdict's kind, the model's framework)
CASES: dict[str, tuple[str, str, str]] = {
    "tf-eager": ("keras-model-call", "input-bound", "tensorflow"),
    "pil": ("torch-model-call", "input-bound", "torch"),
    "torch-nograd": ("torch-model-call", "input-bound", "torch"),
    "keras-predict": ("keras-model-call", "input-bound", "tensorflow"),
    "keras-evaluate": ("keras-model-call", "input-bound", "tensorflow"),
    "keras-predict-ds": ("tf-eager", "input-bound", "tensorflow"),
    "train-inloop": ("torch-model-call", "input-bound", "torch"),
    "serving": ("torch-model-call", "input-bound", "torch"),
    "torch-compute": ("torch-model-call", "compute-bound", "torch"),
}
SHAPES = {
    name: (SCRIPT, ("--shape", name, "--seconds", SECONDS), 3)
    for name in [*CASES, "torch-eval", "keras-fit-val"]
}
SHAPES["train-loss-first"] = (
    SCRIPT,
    ("--shape", "train-inloop", "--seconds", SECONDS, "--loss-first"),
    3,
)
# the advice of one framework that must never reach a model of the other
TF_ONLY = re.compile(r"tf\.data|tf\.function|jit_compile|XLA|tf\.stack")
TORCH_ONLY = re.compile(r"DataLoader|torch\.|num_workers")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    return Recordings(tmp_path_factory.mktemp("inference"), SHAPES)


def check_steps(summary: dict[str, Any], source: str, own: float) -> dict[str, Any]:
    """What every shape's ``record --json`` must say of its steps."""
    validate_record_json(summary)
    steps = summary["steps"]
    assert steps["count"] > 0 and steps["reason"] is None, steps
    assert steps["sources"].get(source, 0) > 0, steps
    fraction = steps["input_wait_fraction"]
    assert fraction is not None, steps
    assert abs(fraction - own) <= 0.10, (steps, own)
    assert steps["p50_s"] <= steps["p90_s"] <= steps["p99_s"], steps
    assert steps["p50_s"] == steps["median_step_s"]
    return steps


def check_verdict(summary: dict[str, Any], kind: str, framework: str) -> None:
    """The verdict's kind, its wording, and advice for the model's own framework."""
    verdict = summary["verdict"]
    assert verdict["kind"] == kind, verdict
    recs = " | ".join(verdict["recommendations"])
    assert recs, verdict
    if framework == "torch":
        assert not TF_ONLY.search(recs), recs  # no TensorFlow advice for a torch model
        if kind == "input-bound":
            assert "DataLoader(" in recs and "num_workers=" in recs, recs
    else:
        assert not TORCH_ONLY.search(recs), recs
        if kind == "input-bound":
            assert "tf.data" in recs, recs
        if summary["steps"]["sources"].get("keras-model-call"):  # a Python loop's pipeline
            assert "num_parallel_calls" in recs, recs
    if summary["steps"]["phase"] != "train":
        assert "train" not in verdict["headline"], verdict["headline"]


def test_a_loss_seen_before_the_model_does_not_lead_its_steps(shapes: Recordings) -> None:
    """The first call the model-call clock sees is the criterion's (attached inside the
    model's forward; here a loss checked before the loop): the model, which holds weights,
    leads the steps once called, and its host time (the in-loop decoding) is the input wait,
    where the loss's (none: it follows the forward) would make it ~0."""
    run = shapes.get("train-loss-first")
    assert run.exit_code == 0, run.describe()
    steps = check_steps(run.summary, "torch-model-call", run.value("PREP_FRACTION"))
    assert steps["phase"] == "train", steps


@pytest.mark.parametrize("shape", list(CASES))
def test_launched_loop_has_steps_its_fraction_and_verdict(shapes: Recordings, shape: str) -> None:
    source, kind, framework = CASES[shape]
    run = shapes.get(shape)
    assert run.exit_code == 0, run.describe()
    no_traceback(run.stderr)
    own = run.value("PREP_FRACTION")
    steps = check_steps(run.summary, source, own)
    check_verdict(run.summary, kind, framework)
    inference = shape not in ("train-inloop",)
    assert steps["phase"] == ("inference" if inference else "train"), steps
    assert [p["phase"] for p in steps["phases"]] == [steps["phase"]], steps["phases"]
    print(f"{shape}: sofa-top {steps['input_wait_fraction']:.3f}, own {own:.3f}")


def test_in_loop_preprocessing_is_not_model_compute(shapes: Recordings) -> None:
    """TensorFlow's image ops in the loop body (outside the model's call) are preprocessing:
    the loop thread's stacks say input, and the host time's split says so too."""
    run = shapes.get("torch-nograd")
    stacks = run.summary["stacks"]
    host = run.summary["steps"]["host_split"]
    assert host is not None and host["input"] >= 0.8, host
    tf_ops = [f for f in stacks["top"] if "tensorflow/python/ops" in f["file"]]
    assert tf_ops and all(f["class"] == "input" for f in tf_ops), stacks["top"]
    # the torch model's own frames stay compute
    torch_nn = [f for f in stacks["top"] if "torch/nn/" in f["file"]]
    assert all(f["class"] == "compute" for f in torch_nn), stacks["top"]


def test_training_with_in_loop_preprocessing_splits_its_compute(shapes: Recordings) -> None:
    run = shapes.get("train-inloop")
    split = run.summary["steps"]["compute_split"]
    assert split is not None and set(split) == {"forward", "backward", "optimizer", "collective"}
    assert abs(sum(split.values()) - 1.0) < 1e-6 and split["collective"] == 0.0
    assert min(split["forward"], split["backward"], split["optimizer"]) > 0.01, split
    steps = run.steps("torch-model-call")
    assert all(s.phase_hint == "train" for s in steps[3:])
    # a step is one iteration: forward, loss, backward, optimizer step
    assert len(steps) >= int(run.value("STEPS")), run.describe()


def test_an_evaluation_pass_is_its_own_phase(shapes: Recordings) -> None:
    """``model.eval()`` + ``no_grad`` batches every 20 training steps: reported apart, each
    with its own fraction against the loop's own measure of each; the top-level numbers are
    the training steps'."""
    run = shapes.get("torch-eval")
    steps = run.summary["steps"]
    phases = {p["phase"]: p for p in steps["phases"]}
    assert set(phases) == {"train", "eval"}, steps["phases"]
    assert steps["phase"] == "train" and steps["count"] == phases["train"]["count"]
    assert steps["input_wait_fraction"] == phases["train"]["input_wait_fraction"]
    train_own, eval_own = run.value("PREP_FRACTION"), run.value("EVAL_PREP_FRACTION")
    assert abs(phases["train"]["input_wait_fraction"] - train_own) <= 0.10, (phases, train_own)
    assert abs(phases["eval"]["input_wait_fraction"] - eval_own) <= 0.10, (phases, eval_own)
    # every evaluation batch is a step of its own (the first of the run starts the clock)
    assert int(run.value("EVAL_STEPS")) - 1 <= phases["eval"]["count"], phases
    assert phases["eval"]["median_step_s"] != phases["train"]["median_step_s"]
    assert run.summary["verdict"]["evidence"]["phase"] == "train"


def test_keras_validation_is_its_own_phase(shapes: Recordings) -> None:
    """``fit`` with ``validation_data``, then ``evaluate``: each evaluation batch is a step of
    the eval phase (from Keras' callbacks: its wait, fetched in the compiled test function,
    is not seen, so its fraction is null, not zero); training's numbers are fit's alone."""
    run = shapes.get("keras-fit-val")
    assert run.exit_code == 0, run.describe()
    steps = run.summary["steps"]
    phases = {p["phase"]: p for p in steps["phases"]}
    assert set(phases) == {"train", "eval"}, steps
    assert steps["phase"] == "train" and steps["count"] == phases["train"]["count"] == 120
    # 2 validations of 20 batches and an evaluation of 30, each one's first batch starting it
    assert phases["eval"]["count"] == 19 + 19 + 29, phases
    assert phases["eval"]["input_wait_fraction"] is None
    assert steps["sources"] == {"keras-fit": 120, "keras-evaluate": 67}, steps


def test_a_serving_loop_reads_tails_and_is_told_to_batch(shapes: Recordings) -> None:
    run = shapes.get("serving")
    steps = run.summary["steps"]
    assert steps["count"] >= 100 and steps["p99_s"] >= steps["p50_s"], steps
    recs = run.summary["verdict"]["recommendations"]
    assert any("batch the inputs" in r for r in recs), recs
    assert all(s.batch_size == 1 for s in run.steps("torch-model-call")[1:])


def test_an_inference_loop_with_autograd_on_is_told_about_inference_mode(
    shapes: Recordings,
) -> None:
    """``pil`` runs its model in ``eval()`` mode with autograd on: the advice says
    ``torch.inference_mode()``; ``torch-nograd`` already runs under ``no_grad``."""
    on = shapes.get("pil").summary["verdict"]["recommendations"]
    off = shapes.get("torch-nograd").summary["verdict"]["recommendations"]
    assert any("torch.inference_mode()" in r for r in on), on
    assert not any("inference_mode" in r for r in off), off


# -- attach mode --------------------------------------------------------------------------


ATTACHED = ["tf-eager", "pil", "torch-nograd", "keras-evaluate", "train-inloop", "serving"]


@pytest.mark.parametrize("shape", ATTACHED)
def test_attached_loop_has_steps_its_fraction_and_verdict(tmp_path: Path, shape: str) -> None:
    """The agent injected into the running loop: the same steps, fraction (over the steps the
    loop ran while recorded) and verdict; the loop runs on after the detach."""
    source, kind, framework = CASES[shape]
    window, stop = tmp_path / "window", tmp_path / "stop"
    argv = [
        sys.executable, str(WORKLOAD), "--shape", shape, "--seconds", "300",
        "--window", str(window), "--stop", str(stop),
    ]  # fmt: skip
    out = tmp_path / "a.sofa"
    with running(argv, stderr=-1) as proc:
        window.touch()
        rec = sofa(
            "record", "--pid", str(proc.pid), "--duration", "8", "--inject-timeout", "60",
            "--json", "-o", str(out), timeout=240,
        )  # fmt: skip
        window.unlink()
        stop.touch()
        assert proc.wait(timeout=120) == 0
        assert proc.stdout is not None
        output = proc.stdout.read().decode()
    assert rec.returncode == 0, rec.stderr
    no_traceback(rec.stderr)
    summary = json.loads(rec.stdout)
    assert summary["injected"] is True, rec.stderr
    own = float(re.findall(r"^PREP_FRACTION=(\S+)$", output, re.MULTILINE)[-1])
    steps = check_steps(summary, source, own)
    check_verdict(summary, kind, framework)
    print(f"{shape} attached: sofa-top {steps['input_wait_fraction']:.3f}, own {own:.3f}")


def test_attached_from_outside_the_stacks_see_preprocessing(tmp_path: Path) -> None:
    """No agent (``--no-inject``): the verdict comes from the stacks alone, classified in the
    model-call context (TensorFlow's image ops in the loop body are input, the torch model's
    calls compute), and its advice is for the torch model."""
    stop = tmp_path / "stop"
    argv = [
        sys.executable, str(WORKLOAD), "--shape", "torch-nograd", "--seconds", "300",
        "--stop", str(stop),
    ]  # fmt: skip
    with running(argv, stderr=-1) as proc:
        # 20 s: py-spy's CPU budget buys 3-6 Hz of this many-threaded process on a busy machine
        rec = sofa(
            "record", "--pid", str(proc.pid), "--no-inject", "--duration", "20", "--json",
            "-o", str(tmp_path / "o.sofa"), timeout=240,
        )  # fmt: skip
        stop.touch()
        assert proc.wait(timeout=120) == 0
    assert rec.returncode == 0, rec.stderr
    no_traceback(rec.stderr)
    summary = json.loads(rec.stdout)
    validate_record_json(summary)
    assert summary["injected"] is False and summary["steps"]["count"] == 0
    verdict = summary["verdict"]
    assert verdict["kind"] == "input-bound", verdict
    assert verdict["evidence"]["source"] == "stacks"
    recs = " | ".join(verdict["recommendations"])
    assert not TF_ONLY.search(recs), recs
