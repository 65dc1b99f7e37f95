"""What the workload's model and thread pools are: one ``agent-model`` event per framework
(stdlib only at import; frameworks are touched only after the workload imported them).

torch
    A global forward pre-hook waits for the first module with parameters that the workload
    calls (the top-level model: its pre-hook runs before any of its children's), removes itself
    and reports the model's class, its parameter count, the chains ``depth_first`` would take
    (``count_chains``: a shallow fx trace per user-defined module, nothing rewritten, at most
    ``CHAIN_BUDGET_S``; it runs once, inside that first call), ``torch.get_num_threads()``, the
    libraries that drive it (Hugging Face ``Trainer``, Lightning, Keras) and the OpenMP/BLAS
    environment. The advice reads it to suggest depth-first and ``torch.compile`` only where
    they apply, and thread counts that fit the cores. Then it times the model's next
    ``CALLS_TIMED`` calls (told by the model-call hook, outermost calls only) and reports the median
    per call (``call_s``): a model called per token or per letter does so little per call that
    a compiler's guards and launches cost more than it saves.
tensorflow
    Right after import: the intra-op pool size and the same environment.
"""

from __future__ import annotations

import os
import sys
import threading
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sofa_top.agent.core import Agent

CHAIN_BUDGET_S = 0.5
CALLS_TIMED = 32  # calls of the model timed after its first (which is probed, and compiles)
ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class _State:
    handle: Any = None


def _env() -> list[list[str]]:
    return [[k, os.environ[k]] for k in ENV if k in os.environ]


def _libraries(module_path: str) -> list[str]:
    libs: list[str] = []
    if "transformers.trainer" in sys.modules:
        libs.append("transformers-trainer")
    if "lightning" in sys.modules or "pytorch_lightning" in sys.modules:
        libs.append("lightning")
    if module_path.startswith("keras"):
        libs.append("keras")
    return libs


def _threads_in_torch() -> int:
    """Other threads whose stacks are in torch's Python code right now."""
    me = threading.get_ident()
    busy = 0
    for ident, frame in sys._current_frames().items():
        f: FrameType | None = frame
        depth = 0
        while ident != me and f is not None and depth < 100:
            if "/torch/" in f.f_code.co_filename.replace("\\", "/"):
                busy += 1
                break
            f = f.f_back
            depth += 1
    return busy


def torch_report(module: Any) -> dict[str, Any]:
    """The ``agent-model`` data for a torch model (``ModelReport.as_json``'s shape)."""
    import torch

    from sofa_top.agent.optimize import _load_depth_first

    path = type(module).__module__
    chains: int | None = None
    reason = ""
    busy = _threads_in_torch()
    try:
        if busy:
            # fx patches nn.Module.__call__ for every thread while it traces: a model called
            # from another thread then would return fx proxies to it
            reason = (
                f"not counted: {busy} other thread(s) run torch code (an fx trace would reach them)"
            )
        else:
            # and no thread that starts now gets the GIL back before the trace is done
            interval = sys.getswitchinterval()
            sys.setswitchinterval(max(interval, 4 * CHAIN_BUDGET_S))
            try:
                count = _load_depth_first("count_chains")(module, CHAIN_BUDGET_S)
            finally:
                sys.setswitchinterval(interval)
            chains = int(count.chains)
            if not count.complete:
                reason = f"counted in the first {count.modules} modules ({CHAIN_BUDGET_S} s budget)"
    except Exception as e:  # a model fx cannot read, or sofa-top's optimizers missing
        reason = f"{type(e).__name__}: {e}"[:200]
    return {
        "framework": "torch",
        "module": type(module).__name__,
        "module_path": path,
        "parameters": sum(int(p.numel()) for p in module.parameters()),
        "depth_first_chains": chains,
        "chain_reason": reason,
        "intra_op_threads": int(torch.get_num_threads()),
        "libraries": _libraries(path),
        "env": _env(),
    }


def install_torch_model(agent: Agent, module: ModuleType) -> None:
    """Report the first top-level model the workload runs (torch.nn.modules.module)."""
    register = getattr(module, "register_module_forward_pre_hook", None)
    if register is None:
        return  # no report: the advice then offers no depth-first, as it cannot count chains

    def pre_hook(mod: Any, _args: Any) -> None:
        if next(mod.parameters(), None) is None:
            return None  # a loss or an activation called on its own
        handle = _State.handle
        _State.handle = None
        if handle is None:
            return None
        handle.remove()
        if not agent.enabled:
            return None
        try:
            data = torch_report(mod)
            chains = data["depth_first_chains"]
            agent.event(
                "agent-model",
                f"model {data['module']}: {data['parameters']} parameters, "
                f"{'?' if chains is None else chains} depth-first chains",
                data,
            )
            _time_calls(agent, mod, data)
        except Exception as e:
            agent.fail("the model probe", e)
        return None

    _State.handle = register(pre_hook)

    def remove() -> None:  # detached before the first model ran
        handle, _State.handle = _State.handle, None
        if handle is not None:
            handle.remove()

    agent.patches.on_detach("the model probe's forward pre-hook", remove)


def _time_calls(agent: Agent, mod: Any, data: dict[str, Any]) -> None:
    """Time the next ``CALLS_TIMED`` outermost calls of ``mod`` (the model-call clock's hook
    tells of each: torch module hooks would put a frame more on each nested call, and a
    recursive model would then raise RecursionError), then report their median (``call_s``)
    in another ``agent-model`` event."""
    from sofa_top.agent import model_loop

    loop = model_loop.loops(agent)[0]
    took: list[float] = []
    lead: list[object] = []  # the outermost model of the probed call (mod, or what calls it)

    def timer(model: object, seconds: float) -> None:
        if not lead:
            lead.append(model)  # the call being probed (its time is the probe's): not timed
            return
        if model is not lead[0]:
            return
        took.append(seconds)
        if len(took) < CALLS_TIMED:
            return
        loop.call_timer = None
        call_s = sorted(took)[len(took) // 2]
        if agent.enabled:
            agent.event(
                "agent-model",
                f"model {data['module']}: {call_s * 1e3:.2f} ms per call",
                {**data, "call_s": call_s},
            )

    loop.call_timer = timer
    agent.patches.on_detach(
        "the model probe's call timer", lambda: setattr(loop, "call_timer", None)
    )


def install_tf(agent: Agent, tf: ModuleType) -> None:
    """Report TensorFlow's intra-op pool; 0 is its default, one thread per core it may run on
    (TF sizes it from the affinity mask, so ``taskset -c 0`` gives a pool of one)."""
    try:
        n = int(tf.config.threading.get_intra_op_parallelism_threads())
    except Exception:
        n = 0
    if n <= 0:
        n = _schedulable_cores()
    agent.event(
        "agent-model",
        "tensorflow thread pools",
        {
            "framework": "tensorflow",
            "intra_op_threads": n or None,
            "libraries": [],
            "env": _env(),
        },
    )


def _schedulable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0
