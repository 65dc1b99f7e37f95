"""Everything sofa-top's agent may patch, read before an attach and after the detach.

It imports torch (with a one-process gloo group) and TensorFlow/Keras, trains a little, reads
every callable of the modules and classes the agent's hooks touch (torch.distributed's
collectives and ``Work.wait``, ``torch.autograd.backward``, ``DistributedDataParallel``, the
DataLoader iterator, tf.data's iterator and dataset, Keras' trainer and callback list,
``torch.Tensor``, ``torch``), the global module and optimizer hooks and a Keras model's own
train function, and prints ``READY``.

Once ``--attached FILE`` exists (an agent is in) it trains again, through every hook: a new
DDP model with synchronous and asynchronous collectives and ``backward``, a DataLoader, an
eager tf.data loop, a Keras ``fit`` of the old model and of a new one; it prints
``PATCHED_WHILE_ATTACHED=N`` (how many of those callables differ from before: the check below
can fail) and ``ATTACHED_DONE``. Once ``--stop FILE`` exists (the agent detached) it reads
them again and prints ``LEFT_AFTER_DETACH=[...]``: what still differs, and whether the new
Keras model's closure still holds a timed step. Nothing here knows about sofa-top.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def targets(model: Any) -> dict[str, Any]:
    import torch.autograd as autograd
    import torch.distributed.distributed_c10d as c10d
    from keras.src.backend.tensorflow import trainer
    from keras.src.callbacks import callback_list
    from tensorflow.python.data.ops import dataset_ops, iterator_ops
    from torch.nn.parallel import distributed as ddp
    from torch.utils.data import dataloader

    return {
        "c10d": c10d,
        "c10d.Work": c10d.Work,
        "torch.distributed": dist,
        "torch.autograd": autograd,
        "DistributedDataParallel": ddp.DistributedDataParallel,
        "_BaseDataLoaderIter": dataloader._BaseDataLoaderIter,
        "DataLoader": dataloader.DataLoader,
        "OwnedIterator": iterator_ops.OwnedIterator,
        "DatasetV2": dataset_ops.DatasetV2,
        "TensorFlowTrainer": trainer.TensorFlowTrainer,
        "CallbackList": callback_list.CallbackList,
        "torch.Tensor": torch.Tensor,
        "torch": torch,
        "model": model,
    }


def snapshot(model: Any) -> dict[str, Any]:
    import torch.nn.modules.module as module_mod
    import torch.optim.optimizer as optimizer_mod

    out: dict[str, Any] = {}
    for label, obj in targets(model).items():
        for name, value in vars(obj).items():
            if callable(value) or isinstance(value, staticmethod | classmethod):
                out[f"{label}.{name}"] = value
    out["global forward pre-hooks"] = tuple(module_mod._global_forward_pre_hooks)
    out["optimizer step pre-hooks"] = tuple(optimizer_mod._global_optimizer_pre_hooks)
    out["optimizer step post-hooks"] = tuple(optimizer_mod._global_optimizer_post_hooks)
    return out


def differ(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    names = sorted(set(before) | set(after))
    return [n for n in names if before.get(n) is not after.get(n)
            and before.get(n) != after.get(n)]  # fmt: skip


def keras_model() -> Any:
    m = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
    m.compile(optimizer="sgd", loss="mse")
    return m


def keras_data() -> Any:
    x = np.random.default_rng(0).random((64, 8), dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(8)


def train_torch() -> None:
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
        opt.step()
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.all_reduce(t, async_op=True).wait()  # type: ignore[union-attr]
    dist.barrier()


def train_tf(model: Any) -> Any:
    for _ in keras_data():  # an eager tf.data loop
        pass
    model.fit(keras_data(), epochs=1, verbose=0)
    fresh = keras_model()
    fresh.fit(keras_data(), epochs=1, verbose=0)
    return fresh


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.05)  # Python runs between sleeps: an injection gets its turn


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--attached", required=True)
    p.add_argument("--stop", required=True)
    a = p.parse_args()
    store = os.path.join(tempfile.mkdtemp(), "pg")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    model = keras_model()
    train_torch()
    train_tf(model)
    before = snapshot(model)
    print("READY", flush=True)
    wait_for(a.attached)
    fresh = train_tf(model)
    train_torch()
    print(f"PATCHED_WHILE_ATTACHED={len(differ(before, snapshot(model)))}", flush=True)
    print("ATTACHED_DONE", flush=True)
    wait_for(a.stop)
    left = differ(before, snapshot(model))
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer  # noqa: F401

    fn = fresh.train_function
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False))
    step = cells.get("one_step_on_data")
    if step is not None and "timed_step" in getattr(step.cell_contents, "__qualname__", ""):
        left.append("a new model's one_step_on_data: still the timed step")
    print(f"LEFT_AFTER_DETACH={left}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
