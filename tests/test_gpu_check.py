"""benchmarks/gpu_check.py, the prepared device check, on this machine (no GPU): it skips
cleanly, and its whole pipeline runs with the tests' MODELLED GPU (``--cpu-smoke``: FakeCuda,
no hardware) where textual and perfetto cannot be imported, as on the GPU machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sofa_top.collectors.gpu import probe_gpus

CHECK = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
BLOCK = """
import sys
class _Block:
    # textual and perfetto are missing on the GPU machine until its wheels are installed;
    # prometheus_client and hypno are not in those wheels (record and compare never need them)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("textual", "perfetto", "prometheus_client", "hypno"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None
sys.meta_path.insert(0, _Block())
"""


def test_without_an_nvidia_gpu_it_says_skipped_and_exits_0(tmp_path: Path) -> None:
    if probe_gpus().status == "ok":
        pytest.skip("this machine has an NVIDIA GPU")
    out = tmp_path / "r.txt"
    p = subprocess.run(
        [sys.executable, str(CHECK), "--out", str(out)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == "no NVIDIA GPU: skipped\n"
    assert not out.exists()  # no results file claiming a run


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_pipeline_runs_without_textual_or_perfetto(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCK)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "block")}
    out = tmp_path / "results" / "gpu_check.txt"
    cmd = [sys.executable, str(CHECK), "--cpu-smoke", "--only", "tiny", "--record-s", "20",
           "--configs", "baseline,bf16", "--compare-s", "2", "--out", str(out)]  # fmt: skip
    # 20 s of record: a loaded machine takes most of 10 s to import torch before CUDA is touched
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=280, env=env)
    assert p.returncode == 0, p.stderr
    lines = out.read_text().splitlines()
    assert lines == p.stdout.splitlines()  # the file holds what was printed, as it went
    assert lines[0].startswith("no NVIDIA GPU") and "MODELLED GPU" in lines[0]
    (verdict,) = [ln for ln in lines if ln.startswith("tiny: verdict ")]
    assert any(ln.startswith("  CUDA (agent): FAKE GPU") for ln in lines)
    # a record has a fixed duration: on a loaded machine its first profiler window (3 s after
    # the first CUDA step) may not come in time, and then there is nothing to tell apart
    if any(ln.startswith("  last window: ") for ln in lines):
        assert verdict.startswith("tiny: verdict gpu-underutilized (cause launch)"), verdict
        assert "verdicts told apart: 1/1" in lines
    assert any(ln.startswith("  bf16: ") and "numerics-changing" in ln for ln in lines)
    assert lines[-1].startswith("done in ")
