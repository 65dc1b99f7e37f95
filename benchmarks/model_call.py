"""What the model-call hook costs a module call: ``nn.Module.__call__`` with the agent's
``torch-model-call`` hook installed (an agent switched on, its queue not drained) against
torch's own, on models with many submodules.

Two models: ``deep`` (2000 modules that each return their input: nothing but call overhead;
one outermost call per forward, 1999 nested) and ``cnn`` (a ResNet-shaped stack of 60
convolution, norm and activation modules on a 1x3x32x32 input: a real small forward). Each
forward is timed in rounds that alternate hooked and plain (the hook installed and removed
through ``core.Patches`` between rounds), so drift of a busy machine cancels in the ratio.

    python benchmarks/model_call.py [--rounds 10] [--model deep|cnn] [--hook|--plain N]

``--hook N`` / ``--plain N`` run N forwards on one side and exit (a whole-process comparison
of the two commands, paired by a timing harness); without them it prints per-round ratios,
their median and the spread, and the hook's cost per module call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def models() -> dict[str, tuple[Any, Any, int]]:
    """name -> (model, input, module calls per forward)."""
    import torch
    from torch import nn

    class Same(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    deep = nn.Sequential(*[nn.Sequential(*[Same() for _ in range(19)]) for _ in range(100)])

    def block(c: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())

    cnn = nn.Sequential(*[block(16) for _ in range(19)]).eval()
    cnn = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), cnn, nn.AdaptiveAvgPool2d(1))
    n_deep = sum(1 for _ in deep.modules())
    n_cnn = sum(1 for _ in cnn.modules())
    return {
        "deep": (deep, torch.zeros(1), n_deep),
        "cnn": (cnn, torch.zeros(1, 3, 32, 32), n_cnn),
    }


def hook() -> Any:
    """An agent switched on (no connection: its queue fills and drops) with the model-call
    hook installed on ``nn.Module``; returns it (``agent.patches.restore()`` removes it)."""
    import torch.nn.modules.module as module

    from sofa_top.agent.core import Agent
    from sofa_top.agent.hooks_model import install_torch_module
    from sofa_top.agent.settings import AgentSettings

    agent = Agent(AgentSettings(queue_max=1000), None)
    agent.enabled = True  # as if connected; the queue is never drained
    install_torch_module(agent, module)
    return agent


def per_forward(model: Any, x: Any, seconds: float) -> float:
    """Seconds per forward over about ``seconds``."""
    import torch

    n = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        while True:
            model(x)
            n += 1
            if n % 10 == 0 and time.perf_counter() - t0 >= seconds:
                return (time.perf_counter() - t0) / n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--seconds", type=float, default=0.5, help="per round and side")
    p.add_argument("--model", choices=("deep", "cnn"), default="deep")
    side = p.add_mutually_exclusive_group()
    side.add_argument("--hook", type=int, metavar="N", help="N hooked forwards, then exit")
    side.add_argument("--plain", type=int, metavar="N", help="N plain forwards, then exit")
    a = p.parse_args()
    import torch

    torch.set_num_threads(1)
    model, x, calls = models()[a.model]
    if a.hook or a.plain:
        if a.hook:
            hook()
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(a.hook or a.plain):
                model(x)
        s = (time.perf_counter() - t0) / (a.hook or a.plain)
        print(f"{a.model} {'hooked' if a.hook else 'plain'}: {s * 1e6:.1f} us per forward")
        return
    per_forward(model, x, a.seconds)  # warm up
    ratios, extra = [], []
    for _ in range(a.rounds):
        plain = per_forward(model, x, a.seconds)
        agent = hook()
        hooked = per_forward(model, x, a.seconds)
        agent.patches.restore()
        ratios.append(hooked / plain)
        extra.append((hooked - plain) / calls)
    print(f"{a.model}: {calls} module calls per forward, {a.rounds} rounds")
    print(
        f"hooked/plain per forward: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    )
    print(
        f"hook's cost per module call: median {statistics.median(extra) * 1e9:.0f} ns "
        f"(min {min(extra) * 1e9:.0f}, max {max(extra) * 1e9:.0f})"
    )


if __name__ == "__main__":
    main()
