"""Bundled demo workloads: synthetic data generated in-process, no downloads, input-bound by
construction. Run as scripts (``python -m sofa_top.demos.torch_input_bound``) in a child process;
sofa-top itself never imports them (they import torch/tensorflow)."""

from pathlib import Path

DEMOS = {
    "torch": Path(__file__).with_name("torch_input_bound.py"),
    "tf": Path(__file__).with_name("tf_input_bound.py"),
}
