"""``benchmarks/peers.py``: its command line and the pure parts (how py-spy's samples and pip's
dry run are read); the benchmark itself runs by hand (docs/accuracy.md)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import peers


def test_help() -> None:
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "peers.py"), "--help"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and "--pairs" in r.stdout and "--traceml-venv" in r.stdout


def test_pyspy_shares_count_the_loop_only() -> None:
    raw = "\n".join([
        "<module> (x.py:1);_find_and_load (<frozen>:1) 500",  # start-up: left out
        "<module> (w.py:9);timed_loop (w.py:80);__getitem__ (w.py:40);burn (w.py:30) 30",
        "<module> (w.py:9);timed_loop (w.py:80);forward (nn.py:5) 10",
        "<module> (w.py:9);warm_up (w.py:70);timed_loop (w.py:80);burn (w.py:30) 99",
    ])  # fmt: skip
    assert peers.pyspy_input_shares(raw) == {0: 0.75}
    sub = 'process 42:"python w.py";<module> (w.py:9);infer_loop (w.py:90);burn (w.py:30) 4'
    assert peers.pyspy_input_shares(sub) == {42: 1.0}
    # --subprocesses under torchrun: the root process first, then the rank's
    ranks = 'process 7:"torchrun";process 9:"python w.py";timed_loop (w.py:80);burn (w.py:30) 2'
    assert peers.pyspy_input_shares(ranks) == {9: 1.0}


def test_dry_run_torch_check() -> None:
    ok = "Would install Jinja2-3.1.6 torch-2.13.0+cpu traceml-ai-0.5.0 typing_extensions-4.16.0"
    assert peers.torches_to_install("Collecting x\n" + ok) == [("torch", "2.13.0+cpu")]
    bad = "Would install torch-2.14.1 torchvision-0.29.0 traceml-ai-0.5.0"
    assert peers.torches_to_install(bad) == [("torch", "2.14.1"), ("torchvision", "0.29.0")]


def test_labels() -> None:
    assert peers.label("INPUT_BOUND") == "input-bound" == peers.label("input-bound")
    assert peers.label("COMPUTE_BOUND") == "compute-bound"
    assert peers.label("INPUT_STRAGGLER") == "straggler"
    assert peers.truth_label("storage", 0.9) == "input-bound"
    assert peers.truth_label("compute", 0.05) == "compute-bound"
