"""The SOFA case-study benchmark (``benchmarks/sofa_case_study.py``) and its workloads
(``workloads/sofa_case_{tf,torch}.py``): a smoke run of the whole pipeline (synthetic JPEGs, the
workload's own measure, ``sofa-top record`` per cell, the JSON and markdown results), the GPU
option without a GPU, bad input, and the TensorFlow and PyTorch models being the same networks.
The figures themselves are the benchmark's (its README section), not asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, WORKLOADS

pytestmark = pytest.mark.slow  # real PyTorch (and TensorFlow) workloads

BENCH = REPO / "benchmarks" / "sofa_case_study.py"


def _bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


def test_quick_run_measures_each_cell_and_records_it_under_sofa_top(tmp_path: Path) -> None:
    out = tmp_path / "study"
    r = _bench("--quick", "--out", str(out))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(out.with_suffix(".json").read_text())
    cells = {c["method"]: c for c in doc["cells"]}
    assert set(cells) == {"loop", "serial"}
    assert all(c["framework"] == "torch" and c["model"] == "alexnet" for c in cells.values())
    for c in cells.values():
        (run,) = c["runs"]
        assert run["images_per_s"] > 0 and run["steps"] > 0
        assert 0 < run["input_fraction"] < 1  # both stages take time in every step
        rec = c["record"]
        assert "error" not in rec, rec
        # the same workload under sofa-top measured itself too, and the summary was read
        assert rec["images_per_s"] > 0 and 0 < rec["input_fraction"] < 1
        assert isinstance(rec["sofa"]["verdict"], str)
        assert Path(rec["session"]).is_file()
    # the serial cell is a DataLoader: sofa-top's DataLoader clock counts its steps
    serial = cells["serial"]["record"]["sofa"]
    assert serial["steps_count"] > 0 and "torch-dataloader" in serial["sources"]
    assert cells["loop"]["next_speedup"]["n"] == 1  # serial over loop, paired
    table = out.with_suffix(".md").read_text()
    assert "| torch | alexnet | loop: Python loop of PIL + torch ops |" in table
    assert "| torch | alexnet | serial: DataLoader(num_workers=0) |" in table


def test_cuda_cells_without_a_gpu_are_skipped_with_a_reason(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the cells would run")
    r = _bench("--quick", "--no-record", "--device", "cuda", "--out", str(tmp_path / "gpu"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--device cuda: PyTorch sees no CUDA device: its cells are skipped" in r.stdout
    assert "no CUDA device here: skipped" in r.stdout
    assert not (tmp_path / "gpu.json").exists()
    # the workload says the same in one line when run by hand
    w = subprocess.run(
        [sys.executable, str(WORKLOADS / "sofa_case_torch.py"), "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert w.returncode == 2 and "Traceback" not in w.stderr
    assert w.stderr.strip().startswith("--device cuda: torch.cuda.is_available() is False")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--models", "resnet"], "unknown model resnet; choose from alexnet, vgg11, googlenet"),
        (["--reuse", "/nonexistent/study.json"], "--reuse /nonexistent/study.json: no such file"),
    ],
)
def test_bad_input_is_one_line(args: list[str], says: str) -> None:
    r = _bench(*args, timeout=60)
    assert r.returncode != 0
    assert r.stderr.strip() == f"sofa_case_study: {says}"


def test_workload_bad_images_folder_is_one_line(tmp_path: Path) -> None:
    w = subprocess.run(
        [sys.executable, str(WORKLOADS / "sofa_case_torch.py"), "--images", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert w.returncode == 2
    assert w.stderr.strip() == f"--images: no .jpg files in {tmp_path}"


_PARAMS = """
import sys
sys.path.insert(0, sys.argv[1])
import sofa_case_tf, sofa_case_torch
for name in ("alexnet", "vgg11", "googlenet"):
    tf_n = sofa_case_tf.build_model(name, 64).count_params()
    torch_n = sum(p.numel() for p in sofa_case_torch.MODELS[name](64).parameters())
    print(name, tf_n, torch_n)
"""


def test_tensorflow_and_torch_twins_are_the_same_networks() -> None:
    r = subprocess.run(
        [sys.executable, "-c", _PARAMS, str(WORKLOADS)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()]
    counts = {name: (int(tf_n), int(torch_n)) for name, tf_n, torch_n in rows}
    assert set(counts) == {"alexnet", "vgg11", "googlenet"}
    for name, (tf_n, torch_n) in counts.items():
        assert tf_n == torch_n > 100_000, name
