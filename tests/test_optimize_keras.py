"""The xla toggle on a real Keras ``fit``: ``compile`` is forced to ``jit_compile=True``.

Keras resolves ``jit_compile="auto"`` to False on a CPU-only machine, so without the toggle the
model runs un-jitted; the workload prints what ``model.jit_compile`` ended up as.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
from conftest import log_lines

from sofa_top.agent.toggles import OptimizeSpec
from sofa_top.optimizers.compare import analyze_session, record_one

WORKLOADS = Path(__file__).parent / "workloads"


@pytest.mark.slow
@pytest.mark.parametrize("xla", [False, True])
def test_keras_fit_gets_jit_compile(tmp_path: Path, xla: bool) -> None:
    cmd = [sys.executable, str(WORKLOADS / "keras_fit_plain.py"), "--epochs", "3"]
    opt = {"xla": True} if xla else {}
    path = tmp_path / "run.sofa"
    spec, problems = OptimizeSpec.from_json(opt)
    assert not problems, problems
    record_one(cmd, spec, path, "keras-xla", None, None, 2, timeout_s=150.0)  # to its exit
    out = analyze_session(path, 2, None, spec)
    assert out.failed is None, out.failed
    logs = log_lines(out.session)
    assert f"JIT_COMPILE={xla}" in logs, logs
    losses = [float(m.group(1)) for line in logs if (m := re.search(r"loss (\S+)", line))]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    if xla:
        assert "xla" in out.applied, out.not_applied
        assert any("compile(jit_compile=True)" in w for w in out.where), out.where
    else:
        assert out.applied == () and out.where == ()
