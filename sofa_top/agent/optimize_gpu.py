"""The GPU toggles' installers (PyTorch on CUDA): ``pin_memory`` (pinned DataLoader batches,
copied with ``non_blocking=True``) and ``bf16`` (autocast around the top module's forward)."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from sofa_top.agent.optimize_state import applied as _applied
from sofa_top.agent.optimize_state import bind as _bind
from sofa_top.agent.optimize_state import patch as _patch
from sofa_top.agent.optimize_state import skipped as _skipped
from sofa_top.agent.toggles import BF16, PIN_MEMORY

if TYPE_CHECKING:
    from sofa_top.agent.core import Agent


def install_pin_memory(agent: Agent, module: ModuleType) -> None:
    """``DataLoader(pin_memory=True)`` where CUDA is available, and non-blocking copies."""
    cls = getattr(module, "DataLoader", None)
    if cls is None:
        raise RuntimeError("torch DataLoader not found")
    orig = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            import torch

            if not torch.cuda.is_available():
                _skipped(PIN_MEMORY, "no CUDA device: pinned memory only speeds up GPU copies")
            else:
                b = _bind(orig, (self, *args), kwargs)
                if not b.arguments.get("pin_memory"):
                    b.arguments["pin_memory"] = True
                    args, kwargs = tuple(b.args[1:]), dict(b.kwargs)
                    _applied(PIN_MEMORY, "torch: DataLoader(..., pin_memory=True)")
                _non_blocking_copies(torch)
        except TypeError:
            pass
        orig(self, *args, **kwargs)

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(cls, "__init__", __init__)


def _to_cuda(torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``tensor.to(*args, **kwargs)`` names a CUDA device and leaves non_blocking unsaid."""
    if "non_blocking" in kwargs or len(args) > 2:
        return False
    target = kwargs.get("device", args[0] if args else None)
    if isinstance(target, (str, int, torch.device)):
        try:
            return bool(torch.device(target).type == "cuda")
        except (RuntimeError, TypeError):
            return False
    return False


def _non_blocking_copies(torch: Any) -> None:
    """Pinned CPU tensors go to the GPU with non_blocking=True (``Tensor.to`` / ``.cuda``)."""
    if getattr(torch.Tensor.to, "_sofa_top_non_blocking", False):
        return
    orig_to, orig_cuda = torch.Tensor.to, torch.Tensor.cuda
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            not compiling()
            and self.device.type == "cpu"
            and _to_cuda(torch, args, kwargs)
            and self.is_pinned()
        ):
            kwargs["non_blocking"] = True
            _applied(PIN_MEMORY, "torch: tensor.to(cuda, non_blocking=True) for pinned batches")
        return orig_to(self, *args, **kwargs)

    def cuda(self: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            not compiling()
            and "non_blocking" not in kwargs
            and len(args) < 2
            and self.device.type == "cpu"
            and self.is_pinned()
        ):
            kwargs["non_blocking"] = True
            _applied(PIN_MEMORY, "torch: tensor.cuda(non_blocking=True) for pinned batches")
        return orig_cuda(self, *args, **kwargs)

    for fn, wrapped in ((to, orig_to), (cuda, orig_cuda)):
        fn.__wrapped__ = wrapped  # type: ignore[attr-defined]
        fn._sofa_top_non_blocking = True  # type: ignore[attr-defined]
    _patch(torch.Tensor, "to", to)
    _patch(torch.Tensor, "cuda", cuda)


def autocast_bf16(module: Any) -> None:
    """``module.forward`` under ``torch.autocast(<its device>, bfloat16)``."""
    import torch

    param = next(module.parameters(), None)
    device = param.device.type if param is not None else "cpu"
    if device == "cuda" and not torch.cuda.is_bf16_supported():
        _skipped(BF16, "this GPU has no bf16 (try float16 autocast with a GradScaler)")
        return
    forward = module.forward

    def autocast_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device, dtype=torch.bfloat16):
            return forward(*args, **kwargs)

    autocast_forward.__wrapped__ = forward  # type: ignore[attr-defined]
    _patch(module, "forward", autocast_forward)
    _applied(BF16, f"torch: {type(module).__name__}.forward under torch.autocast({device!r}, bf16)")
