"""The optimizer's toggles patch through the agent's ``Patches`` too: install them (prefetch,
the data check, pin_memory, bf16 on the model) on real torch, TensorFlow and Keras, use
what they patch, restore the agent's patches, and print what still differs from before.

Prints ``APPLIED=[...]`` (what the toggles changed while installed: the check below can fail)
and ``LEFT_AFTER_RESTORE=[...]`` (every attribute of the patched modules and their classes
that is not the object it was before, and a PyDataset's or model's own attribute that was not
set back). Nothing is sent anywhere: the agent has no connection.
"""

from __future__ import annotations

import importlib
import json
import os
from types import ModuleType
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sofa_top.agent import optimize
from sofa_top.agent.core import Agent
from sofa_top.agent.settings import AgentSettings
from sofa_top.agent.toggles import OptimizeSpec, PrefetchOptions


def attributes(modules: list[ModuleType]) -> dict[str, Any]:
    """Every function of ``modules`` and of the classes they define, by dotted name (their
    data, a counter a module keeps, is theirs to change)."""
    out: dict[str, Any] = {}
    for m in modules:
        for k, v in list(vars(m).items()):
            if callable(v):
                out[f"{m.__name__}.{k}"] = v
            if isinstance(v, type) and v.__module__ == m.__name__:
                for k2, v2 in list(vars(v).items()):
                    if callable(v2) or isinstance(v2, (staticmethod, classmethod, property)):
                        out[f"{m.__name__}.{k}.{k2}"] = v2
    out["torch.Tensor.to"] = torch.Tensor.to
    out["torch.Tensor.cuda"] = torch.Tensor.cuda
    # a global hook is an entry in a dict that stays the same object
    hooks = torch.nn.modules.module._global_forward_pre_hooks
    out["global forward pre-hooks"] = tuple(hooks.values())
    return out


def same(a: Any, b: Any) -> bool:
    """The very same object (tuples of hooks: the same hooks)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
    return a is b


class Items(keras.utils.PyDataset):
    def __init__(self) -> None:
        super().__init__(workers=1)

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return np.full((4, 3), i, "float32"), np.zeros((4, 1), "float32")


def main() -> None:
    spec = OptimizeSpec(
        prefetch=PrefetchOptions(workers=2), check_data=True, pin_memory=True, bf16=True
    )
    agent = Agent(AgentSettings(optimize=spec), None)
    hooks: dict[str, Any] = {}
    optimize.add_installers(agent, hooks)
    modules = [importlib.import_module(name) for name in hooks]
    before = attributes(modules)
    for module in modules:
        for _name, install in hooks[module.__name__]:
            install(agent, module)

    applied = [k for k, v in attributes(modules).items() if not same(before.get(k), v)]
    items = Items()
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    adapter = PyDatasetAdapter(items, shuffle=False)
    if items.workers != 1:
        applied.append(f"PyDataset.workers={items.workers}")
    del adapter
    loader = DataLoader(TensorDataset(torch.zeros(8, 3)), batch_size=4)
    applied.append(f"DataLoader.num_workers={loader.num_workers}")
    del loader
    model = nn.Linear(3, 1)
    model(torch.zeros(2, 3))  # the first module called: its forward under autocast
    if "forward" in vars(model):
        applied.append("model.forward")
    for _ in tf.data.Dataset.range(3).batch(2):  # through the data check's __next__
        pass
    print("APPLIED=" + json.dumps(applied), flush=True)

    problems = agent.patches.restore()
    after = attributes(modules)
    left = [k for k, v in before.items() if not same(after.get(k), v)]
    left += [k for k in after if k not in before]
    if items.workers != 1:
        left.append(f"PyDataset.workers={items.workers}")
    if "forward" in vars(model):
        left.append("model.forward")
    left += [f"not undone: {p}" for p in problems]
    print("LEFT_AFTER_RESTORE=" + json.dumps(left), flush=True)


if __name__ == "__main__":
    main()
