"""The optimizer's toggles patch through ``core.Patches``: once the agent's patches are
restored, every function the toggles replaced on real torch, TensorFlow and Keras is the object
it was before, and what they set on the workload's own objects is set back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "optimize_restored.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _value(stdout: str, key: str) -> list[str]:
    line = next(ln for ln in stdout.splitlines() if ln.startswith(key + "="))
    return list(json.loads(line.split("=", 1)[1]))


def test_the_toggles_patches_are_all_restored() -> None:
    r = subprocess.run([sys.executable, str(WORKLOAD)], capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    applied = _value(r.stdout, "APPLIED")
    # while installed, the toggles were in place: the comparison below can see them
    for patched in (
        "torch.utils.data.dataloader.DataLoader.__init__",
        "torch.utils.data.dataloader._BaseDataLoaderIter.__next__",
        "keras.src.trainers.data_adapters.py_dataset_adapter.PyDatasetAdapter.__init__",
        "tensorflow.python.data.ops.iterator_ops.OwnedIterator.__next__",
        "PyDataset.workers=2",
        "model.forward",
    ):
        assert patched in applied, applied
    assert _value(r.stdout, "LEFT_AFTER_RESTORE") == []
