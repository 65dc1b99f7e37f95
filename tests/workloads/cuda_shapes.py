"""Three PyTorch training loops of the shapes a GPU verdict must tell apart (``--shape``):

- ``input``: a ``DataLoader`` (no workers, no ``pin_memory``) whose ``__getitem__`` sleeps on
  simulated storage, into a small conv net: the GPU idles waiting for the next batch;
- ``matmul``: a stack of large ``Linear`` layers on data made on the device: GPU compute-bound;
- ``tiny``: a hundred tiny ``Linear``/``ReLU`` layers on batches of 16 (a ``DataLoader`` over
  in-memory tensors, copied with a blocking ``.to(device)``): many small kernels per step, the
  GPU waiting for Python to launch each one (launch-bound).

``--device cuda`` is the real thing (``benchmarks/gpu_check.py``); on a machine without a GPU
``--device cpu`` runs the same loops (a smoke test), and ``--fake SHAPE`` adds
``fake_cuda.FakeCuda`` so that sofa-top's agent sees a MODELLED GPU (tests: no hardware).
Runs until ``--seconds`` pass (or it is stopped); prints ``step N loss=X`` now and then.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

SIZES = {"cuda": 4096, "cpu": 256}


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", choices=("input", "matmul", "tiny"), required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--storage-ms", type=float, default=3.0, help="input: sleep per sample")
    p.add_argument("--fake", help="a fake_cuda shape (no GPU: the agent sees a modelled one)")
    p.add_argument("--fail-after", type=int, help="with --fake: the GPU is lost at event N")
    p.add_argument("--size", type=int, help="matmul: layer width (default: 4096 cuda, 256 cpu)")
    p.add_argument("--layers", type=int, default=100, help="tiny: Linear+ReLU pairs")
    p.add_argument("--fail-at-step", type=int, help="raise --fail-with at this step")
    p.add_argument("--fail-with", choices=("oom", "cuda-error"), default="oom")
    return p.parse_args()


def _fail(torch: Any, kind: str) -> None:
    """The workload's own failure, as PyTorch raises it on a GPU."""
    if kind == "oom":
        raise torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "139.81 GiB of which 1.02 GiB is free."
        )
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def main() -> int:
    args = _args()
    fake = None
    if args.fake:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from fake_cuda import FakeCuda

        fake = FakeCuda(args.fake, fail_after=args.fail_after)
        try:
            from sofa_top.agent import hooks_cuda
        except ImportError:  # not under sofa-top: nothing to fake for
            pass
        else:
            hooks_cuda.use_backend(fake)
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    torch.manual_seed(0)
    device = torch.device(args.device)
    if device.type == "cpu":
        # small ops: intra-op threads only spin against each other (and the machine's others)
        torch.set_num_threads(1)
    if device.type == "cuda":
        torch.cuda.init()
    deadline = time.monotonic() + args.seconds

    if args.shape == "input":

        class Storage(Dataset[tuple[torch.Tensor, torch.Tensor]]):
            def __len__(self) -> int:
                return 1_000_000

            def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
                time.sleep(args.storage_ms / 1000.0)  # a read from slow storage
                return torch.rand(3, 32, 32), torch.tensor(i % 10)

        loader: DataLoader[tuple[torch.Tensor, torch.Tensor]] = DataLoader(
            Storage(), batch_size=16, num_workers=0
        )
        model: nn.Module = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(16, 10),
        )  # fmt: skip
    elif args.shape == "tiny":
        data = TensorDataset(torch.randn(100_000, 32), torch.randint(0, 10, (100_000,)))
        loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=0)
        layers: list[nn.Module] = []
        for _ in range(args.layers):
            layers += [nn.Linear(32, 32), nn.ReLU()]
        model = nn.Sequential(*layers, nn.Linear(32, 10))
    else:
        loader = None  # type: ignore[assignment]
        n = args.size or SIZES.get(device.type, 256)
        model = nn.Sequential(*(nn.Linear(n, n) for _ in range(8)), nn.Linear(n, 10))
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    step = 0

    def train(x: torch.Tensor, y: torch.Tensor) -> float:
        if step == args.fail_at_step:
            _fail(torch, args.fail_with)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        if fake is not None:
            # the modelled GPU's part of the step (before optimizer.step, which may be the
            # step's boundary: the GPU started at the last boundary and ran alongside the host)
            fake.sync()
        opt.step()
        return float(loss.item())  # a sync per step, as most loops have

    while time.monotonic() < deadline:
        if loader is None:
            n = args.size or SIZES.get(device.type, 256)
            x = torch.randn(n, n, device=device)
            y = torch.randint(0, 10, (n,), device=device)
            loss = train(x, y)
            step += 1
            if step % 10 == 0:
                print(f"step {step} loss={loss:.4f}", flush=True)
            continue
        for x, y in loader:
            loss = train(x.to(device), y.to(device))
            step += 1
            if step % 10 == 0:
                print(f"step {step} loss={loss:.4f}", flush=True)
            if time.monotonic() >= deadline:
                break
    print(f"done after {step} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
