"""Optimizer toggles applied by the in-process agent (sofa_top.agent.optimize), for real."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import log_lines

from sofa_top.agent import optimize_state
from sofa_top.agent.settings import parse_settings
from sofa_top.agent.toggles import (
    OptimizeSpec,
    PrefetchOptions,
    hook_name,
    toggle_of_hook,
)
from sofa_top.optimizers.compare import analyze_session, record_one
from sofa_top.optimizers.measures import RunOutcome

WORKLOADS = Path(__file__).parent / "workloads"
LOSS = re.compile(r"loss (\S+)")


def _run(tmp_path: Path, cmd: list[str], opt: dict[str, Any], steps: int = 8) -> RunOutcome:
    path = tmp_path / "run.sofa"
    spec, problems = OptimizeSpec.from_json(opt)
    assert not problems, problems
    record_one(cmd, spec, path, "opt-test", steps, None, 2, timeout_s=150.0)
    return analyze_session(path, 2, steps, spec)


def _losses(session: str) -> list[float]:
    return [float(m.group(1)) for line in log_lines(session) if (m := LOSS.search(line))]


def test_settings_carry_optimize() -> None:
    s = parse_settings('{"optimize": {"xla": true, "prefetch": {"workers": 3}}}')
    assert s.optimize == OptimizeSpec(xla=True, prefetch=PrefetchOptions(workers=3))
    assert s.optimize.to_json() == {"xla": True, "prefetch": {"workers": 3}}
    assert not s.problems
    assert hook_name("depth_first") == "opt:depth-first"
    assert toggle_of_hook("opt:depth-first") == "depth_first"
    assert toggle_of_hook("tf-eager") is None
    assert optimize_state.default_workers() >= 2
    s = parse_settings('{"optimize": {"prefetch": {"parallelism": 16}}}')
    assert s.optimize.parallelism == 16
    for bad in (0, -1, True, 2.5, "8"):
        spec, problems = OptimizeSpec.from_json({"prefetch": {"parallelism": bad}})
        assert spec.parallelism is None and problems, bad
    spec, problems = OptimizeSpec.from_json({"prefetch": True, "turbo": True})
    assert spec == OptimizeSpec(prefetch=PrefetchOptions()) and spec.to_json() == {"prefetch": True}
    assert problems == ("optimize: unknown toggle 'turbo' ignored",)


def test_xla_without_framework_is_reported_not_applied(tmp_path: Path) -> None:
    cmd = [sys.executable, str(WORKLOADS / "agent_plain.py"), "--steps", "12", "--input-ms", "2"]
    out = _run(tmp_path, cmd, {"xla": True, "depth_first": True}, steps=8)
    assert out.failed is None
    assert out.rate is not None and out.rate > 0
    assert out.applied == ()
    reasons = dict(out.not_applied)
    assert "never imported tensorflow or torch" in reasons["xla"]
    assert "torch.compile" in reasons["depth_first"]  # mutually exclusive, said so up front


@pytest.mark.slow
def test_tf_prefetch_and_xla_apply_and_loss_stays_finite(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "sofa_top.demos.tf_input_bound", "--batch-size", "8"]
    out = _run(tmp_path, cmd, {"prefetch": {"deterministic": False}, "xla": True}, steps=45)
    assert out.failed is None, out.failed
    assert set(out.applied) == {"prefetch", "xla"}, out.not_applied
    assert any("num_parallel_calls=AUTOTUNE" in w for w in out.where)
    assert any(".prefetch(AUTOTUNE)" in w for w in out.where)
    assert any("auto-clustering" in w for w in out.where)
    losses = _losses(out.session)
    assert losses and all(math.isfinite(v) for v in losses)
    assert not out.nonfinite_loss


@pytest.mark.slow
def test_torch_dataloader_workers_apply_and_loss_stays_finite(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "sofa_top.demos.torch_input_bound", "--batch-size", "8"]
    out = _run(tmp_path, cmd, {"prefetch": {"workers": 2}}, steps=60)
    assert out.failed is None, out.failed
    assert out.applied == ("prefetch",), out.not_applied
    assert any("num_workers=2, persistent_workers=True" in w for w in out.where)
    losses = _losses(out.session)
    assert losses and all(math.isfinite(v) for v in losses)


@pytest.mark.slow
def test_torch_depth_first_applies(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "sofa_top.demos.torch_input_bound", "--batch-size", "8"]
    out = _run(tmp_path, cmd, {"depth_first": True}, steps=60)
    assert out.failed is None, out.failed
    assert out.applied == ("depth_first",), out.not_applied
    assert any("depth_first(Sequential)" in w for w in out.where)
    losses = _losses(out.session)
    assert losses and all(math.isfinite(v) for v in losses)


@pytest.mark.slow
def test_torch_compile_applies_and_reports_compile_time(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "sofa_top.demos.torch_input_bound", "--batch-size", "8"]
    out = _run(tmp_path, cmd, {"xla": True, "depth_first": True}, steps=60)
    assert out.failed is None, out.failed
    assert out.applied == ("xla",), out.not_applied
    assert "torch.compile" in dict(out.not_applied)["depth_first"]
    assert any("Sequential.compile()" in w for w in out.where)
    assert out.compile_s is not None and out.compile_s > 0
    losses = _losses(out.session)
    assert losses and all(math.isfinite(v) for v in losses)


def test_gpu_toggles_parse_and_name() -> None:
    s = parse_settings(
        '{"optimize": {"pin_memory": true, "bf16": true, "compile_mode": "reduce-overhead"}}'
    )
    assert s.optimize == OptimizeSpec(pin_memory=True, bf16=True, compile_mode="reduce-overhead")
    assert s.optimize.toggles() == ("pin_memory", "bf16", "compile_mode")
    assert s.optimize.to_json() == {
        "pin_memory": True,
        "bf16": True,
        "compile_mode": "reduce-overhead",
    }
    assert hook_name("compile_mode") == "opt:compile-mode"
    assert toggle_of_hook("opt:pin-memory") == "pin_memory"
    spec, problems = OptimizeSpec.from_json({"compile_mode": "turbo"})
    assert spec.compile_mode is None and problems and "compile_mode" in problems[0]


TINY = [sys.executable, str(WORKLOADS / "cuda_shapes.py"), "--shape", "tiny", "--layers", "4"]


@pytest.mark.slow
def test_bf16_autocast_applies_and_the_loss_is_checked(tmp_path: Path) -> None:
    out = _run(tmp_path, [*TINY, "--seconds", "120"], {"bf16": True}, steps=40)
    assert out.failed is None, out.failed
    assert out.applied == ("bf16",), out.not_applied
    assert any("torch.autocast('cpu', bf16)" in w for w in out.where)
    assert out.loss is not None and math.isfinite(out.loss) and not out.nonfinite_loss


@pytest.mark.slow
def test_compile_mode_applies_and_pin_memory_says_why_not_on_a_cpu(tmp_path: Path) -> None:
    opt = {"compile_mode": "reduce-overhead", "pin_memory": True, "depth_first": True}
    out = _run(tmp_path, [*TINY, "--seconds", "240"], opt, steps=30)
    assert out.failed is None, out.failed
    assert out.applied == ("compile_mode",), out.not_applied
    assert any("compile(mode='reduce-overhead')" in w for w in out.where)
    reasons = dict(out.not_applied)
    assert "no CUDA device" in reasons["pin_memory"]
    assert "torch.compile" in reasons["depth_first"]
    assert out.compile_s is not None and out.compile_s > 0
