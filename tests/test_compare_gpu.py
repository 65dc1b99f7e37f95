"""compare's GPU configurations: their specs, the numerics-changing flag and the loss check, the
code changes that keep them, and their JSON (pure: outcomes built here, no processes)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import validate_compare_json

from sofa_top.agent.toggles import OptimizeSpec
from sofa_top.optimizers.compare import CompareResult, ConfigResult, changes_for, configs
from sofa_top.optimizers.compare.analyze import logged_loss
from sofa_top.optimizers.compare.configs import gpu_configs
from sofa_top.optimizers.compare.summary import LOSS_TOLERANCE, best_config, summarize
from sofa_top.optimizers.measures import RunOutcome


def outcome(
    rate: float, loss: float | None, applied: tuple[str, ...] = (), where: str = ""
) -> RunOutcome:
    return RunOutcome(
        "s.sofa", rate, "samples/s", None, "gpu-underutilized", applied,  # type: ignore[arg-type]
        (), (where,) if where else (), False, None, loss=loss,
    )  # fmt: skip


def config(name: str, *outs: RunOutcome) -> ConfigResult:
    """``name``'s runs: each outcome three times, 2% apart (what a clear result needs)."""
    runs = [replace(o, rate=o.rate * k) for o in outs if o.rate for k in (0.98, 1.0, 1.02)]
    return ConfigResult(name, configs()[name], runs)


BASE_RATES = [98.0, 100.0, 102.0]


def test_gpu_configurations_and_their_specs() -> None:
    assert gpu_configs() == ("pin-memory", "bf16", "compile-mode")
    assert configs()["pin-memory"] == OptimizeSpec(pin_memory=True)
    assert configs()["bf16"] == OptimizeSpec(bf16=True)
    assert configs()["compile-mode"] == OptimizeSpec(compile_mode="reduce-overhead")
    assert configs()["max-autotune"].compile_mode == "max-autotune"


def test_logged_loss_is_the_median_of_the_last_five() -> None:
    lines = [f"step {i} loss={v}" for i, v in enumerate([9, 9, 1.0, 2.0, 3.0, 4.0, 100.0])]
    assert logged_loss(lines) == 3.0
    assert logged_loss(["epoch 1 loss: 0.25", "val acc 0.9"]) == 0.25
    assert logged_loss(["loss 1e-3"]) == 1e-3
    assert logged_loss(["no numbers here"]) is None


@pytest.mark.parametrize(
    ("loss", "differs"), [(2.0 * (1 + LOSS_TOLERANCE) + 0.01, True), (2.1, False)]
)
def test_bf16_is_flagged_and_its_loss_checked(loss: float, differs: bool) -> None:
    base = config("baseline", outcome(100.0, 2.0))
    bf16 = config("bf16", outcome(300.0, loss, ("bf16",), "torch: Net.forward under autocast"))
    summarize(base, 100.0, None, 2.0, None, BASE_RATES)
    summarize(bf16, 100.0, None, 2.0, None, BASE_RATES)
    assert "numerics-changing" in bf16.flags and "numerics-changing" not in base.flags
    assert ("loss-differs" in bf16.flags) is differs
    # a faster run whose loss is off is never the one to keep
    assert bf16.effect == "faster"
    assert best_config([base, bf16]) == (None if differs else "bf16")


def test_code_changes_for_the_gpu_toggles() -> None:
    where = "torch: Sequential.compile(mode='reduce-overhead') (torch.compile in place)"
    runs = [
        config("baseline", outcome(100.0, 2.0)),
        config("compile-mode", outcome(400.0, 2.0, ("compile_mode",), where)),
        config("pin-memory", outcome(110.0, 2.0, ("pin_memory",), "torch: DataLoader(...)")),
        config("bf16", outcome(120.0, 2.0, ("bf16",), "torch: autocast")),
    ]
    for r in runs:
        summarize(r, 100.0, None, 2.0, None, BASE_RATES)
    result = CompareResult(["python", "t.py"], 1, 10, None, 2, runs, best_config(runs), [])
    result.changes = changes_for(result, result.best)
    assert result.best == "compile-mode"
    assert result.changes == ["PyTorch: `model.compile(mode='reduce-overhead')` before the loop"]
    assert "pin_memory=True" in changes_for(result, "pin-memory")[0]
    assert "bfloat16" in changes_for(result, "bf16")[0]
    payload = result.to_json()
    validate_compare_json(payload)
    assert payload["runs"][1]["optimize"] == {"compile_mode": "reduce-overhead"}
    assert payload["runs"][3]["flags"] == ["numerics-changing"]
    assert payload["runs"][0]["loss"] == 2.0
