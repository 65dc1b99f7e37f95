"""How depth_first is imported: lazily by sofa_top.optimizers, by name, and by file path.

Each case runs in a fresh interpreter, so that what it imports (or does not) is not hidden by
modules an earlier test imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run_python(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize(
    "module",
    ["sofa_top.optimizers", "sofa_top.optimizers.compare", "sofa_top.tui.optimizer_screen"],
)
def test_importing_optimizers_leaves_torch_out(module: str) -> None:
    # The TUI's optimizer screen imports sofa_top.optimizers.compare: the package's
    # __init__ must not pull torch in (it did when it imported depth_first eagerly).
    out = run_python(
        f"""
        import sys
        import {module}
        print("torch" in sys.modules, "sofa_top.optimizers.depth_first" in sys.modules)
        """
    )
    assert out.split() == ["False", "False"]


@pytest.mark.parametrize("first", ["package", "subpackage", "importlib"])
def test_depth_first_name_is_the_function(first: str) -> None:
    # Importing the subpackage binds it on sofa_top.optimizers under the function's name;
    # whichever import comes first, `from sofa_top.optimizers import depth_first` must give
    # the function.
    before = {
        "package": "from sofa_top.optimizers import depth_first_report",
        "subpackage": "from sofa_top.optimizers.depth_first import depth_first_report",
        "importlib": "importlib.import_module('sofa_top.optimizers.depth_first')",
    }[first]
    out = run_python(
        f"""
        import importlib, sys, types
        {before}
        from sofa_top.optimizers import ChunkDecision, RunReport, depth_first, depth_first_report
        import sofa_top.optimizers as opt
        pkg = sys.modules["sofa_top.optimizers.depth_first"]
        assert isinstance(pkg, types.ModuleType)
        assert depth_first is pkg.depth_first is opt.depth_first, depth_first
        assert RunReport is pkg.RunReport and ChunkDecision is pkg.ChunkDecision
        assert depth_first_report is pkg.depth_first_report
        print(depth_first.__module__)
        """
    )
    assert out.strip().startswith("sofa_top.optimizers.depth_first")


def test_agent_loads_depth_first_by_path_without_sofa_top_optimizers() -> None:
    out = run_python(
        """
        import copy, sys
        sys.modules["sofa_top.optimizers"] = None  # any import of it raises ImportError
        from sofa_top.agent import optimize
        depth_first = optimize._load_depth_first()
        import torch
        from torch import nn

        pkg = sys.modules["sofa_top.optimizers.depth_first"]
        model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
        model.eval()
        ref = copy.deepcopy(model)
        assert depth_first(model, chunk_bytes=256) is model
        x = torch.randn(4, 3, 8, 8)
        with torch.no_grad():
            assert torch.equal(model(x), ref(x))
        (run,) = pkg.depth_first_report(model)
        assert run.layers == ("1", "2", "3") and run.decisions[0].chunked, run
        assert sys.modules["sofa_top.optimizers"] is None  # never imported
        print(pkg.__file__)
        print(sys.modules["sofa_top.optimizers.depth_first.tuner"].__name__)
        """
    )
    init, tuner = out.split()
    assert init.endswith("optimizers/depth_first/__init__.py")
    assert tuner == "sofa_top.optimizers.depth_first.tuner"
