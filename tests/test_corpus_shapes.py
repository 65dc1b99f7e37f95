"""The shapes where the public inference scripts (``benchmarks/corpus``, findings F22-F28)
caught sofa-top out, small and timed (``tests/workloads/corpus_shapes.py``), under the real
``sofa-top record --json``:

- token-by-token generation at module level: sampling from the output on the host is not
  the loop's input (F27), and the steps come from the model calls (F22);
- one request, one model call, then a PNG encoded: no loop to time, said as such, and the
  encoding is the host's work, not compute or input (F22, F25);
- Keras ``predict`` per sample: its per-call setup is not the loop's input, and the advice is
  ``predict_on_batch`` (F26);
- a ``DataLoader`` with ``persistent_workers``, several calls of the model per batch: each
  epoch's first fetch is in a step, the model calls make no steps of their own (F28).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import validate_record_json
from faults.conftest import no_traceback
from recordings import Recording, Recordings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

pytest.importorskip("torch")

SCRIPT = "corpus_shapes.py"
SHAPES = {
    name: (SCRIPT, ("--shape", name, "--seconds", "8"), 0)
    for name in ("generate", "request", "keras-predict-loop", "persistent")
}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    return Recordings(tmp_path_factory.mktemp("corpus-shapes"), SHAPES)


def recorded(shapes: Recordings, name: str) -> tuple[Recording, dict[str, Any]]:
    """The shape's recording, checked to have run cleanly, and its ``record --json``."""
    run = shapes.get(name)
    assert run.exit_code == 0, run.describe()
    no_traceback(run.stderr)
    validate_record_json(run.summary)
    return run, run.summary


def test_sampling_the_output_at_module_level_is_not_input(shapes: Recordings) -> None:
    run, summary = recorded(shapes, "generate")
    steps = summary["steps"]
    assert steps["sources"].get("torch-model-call", 0) > 100, steps
    own, host = run.value("PREP_FRACTION"), run.value("HOST_FRACTION")
    assert host > 0.2, host  # the loop spends its host time sampling, not preparing input
    assert abs(steps["input_wait_fraction"] - own) <= 0.10, (steps, own)
    split = steps["host_split"]
    assert split["output"] > split["input"], split
    # the advice names that host work before the model's compiler, which does not touch it
    recs = summary["verdict"]["recommendations"]
    assert any("work on the model's output" in r for r in recs[:1]), recs
    # the module-level loop's native sampling calls are not input in the stacks either
    module = [f for f in summary["stacks"]["top"] if f["function"] == "<module>"]
    assert all(f["class"] != "input" or f["own_pct"] < 5 for f in module), module


def test_one_request_has_no_loop_and_its_encoding_is_host_work(shapes: Recordings) -> None:
    _run, summary = recorded(shapes, "request")
    steps = summary["steps"]
    assert steps["count"] == 0 and "called once" in steps["reason"], steps
    assert "cuda" not in steps["reason"].lower(), steps
    encoder = [f for f in summary["stacks"]["top"] if f["file"].endswith("PIL/ImageFile.py")]
    assert encoder and all(f["class"] == "python" for f in encoder), summary["stacks"]["top"]
    recs = " | ".join(summary["verdict"]["recommendations"])
    assert "torch.compile" not in recs and "writing results" in recs, summary["verdict"]


def test_keras_predict_per_sample_is_told_predict_on_batch(shapes: Recordings) -> None:
    pytest.importorskip("tensorflow")
    run, summary = recorded(shapes, "keras-predict-loop")
    steps = summary["steps"]
    assert set(steps["sources"]) == {"keras-model-call"} and steps["count"] >= 10, steps
    own = run.value("PREP_FRACTION")
    assert abs(steps["input_wait_fraction"] - own) <= 0.10, (steps, own)
    # predict's data adapter and iterator for one sample: the call's own, not input
    top = summary["stacks"]["top"]
    assert all(f["class"] != "input" for f in top if f["function"] == "make_iterator"), top
    verdict = summary["verdict"]
    assert verdict["evidence"]["call_setup_share"] >= 0.3, verdict["evidence"]
    recs = " | ".join(verdict["recommendations"])
    assert "predict_on_batch" in recs and "jit_compile" not in recs, recs


def test_persistent_workers_keep_each_epochs_first_fetch(shapes: Recordings) -> None:
    run, summary = recorded(shapes, "persistent")
    steps = summary["steps"]
    # the DataLoader's clock: the model's 20 calls per batch are no steps (but in the first
    # batch, before a second fetch shows the pattern)
    assert steps["sources"].get("torch-model-call", 0) <= 20, steps
    assert steps["sources"]["torch-dataloader"] > 40, steps
    own = run.value("PREP_FRACTION")
    assert abs(steps["input_wait_fraction"] - own) <= 0.10, (steps, own)
    # every batch is a step but the very first (it starts the clock), epoch after epoch
    batches = int(run.value("STEPS"))
    loader = steps["sources"]["torch-dataloader"]
    assert batches - 1 <= loader <= batches + 4, (loader, batches)
    assert not any(
        re.search(r"torch\.compile|jit_compile", r) for r in summary["verdict"]["recommendations"]
    ), summary["verdict"]
