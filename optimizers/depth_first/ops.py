"""The op table: which layers are memory-bound, and how each one is called.

A run is a list of :class:`Op`. Each records how the original forward called the layer
(module call, ``F.*``/``torch.*`` function, tensor method, with :class:`Marker` standing for
tensors), so that :func:`call_original` can replay it exactly, and what it is (BatchNorm,
activation, pooling, dropout, identity, add), so that the chunked path can run it on one
chunk (:func:`activation` for activations; ``chunked.py`` for the rest).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BN_TYPES: tuple[type[nn.Module], ...] = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
# Input dims each BatchNorm accepts (batched only: a run splits dim 0 and dim 1).
BN_DIMS: dict[type[nn.Module], tuple[int, ...]] = {
    nn.BatchNorm1d: (2, 3),
    nn.BatchNorm2d: (4,),
    nn.BatchNorm3d: (5,),
}
ACT_MODULES: dict[type[nn.Module], str] = {
    nn.ReLU: "relu",
    nn.ReLU6: "relu6",
    nn.LeakyReLU: "leaky_relu",
    nn.GELU: "gelu",
    nn.SiLU: "silu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.Hardswish: "hardswish",
    nn.ELU: "elu",
}
# Spatial dims of each pooling layer (its input has two more: batch and channels).
POOL_DIMS: dict[type[nn.Module], int] = {
    nn.MaxPool1d: 1,
    nn.MaxPool2d: 2,
    nn.MaxPool3d: 3,
    nn.AvgPool1d: 1,
    nn.AvgPool2d: 2,
    nn.AvgPool3d: 3,
    nn.AdaptiveAvgPool1d: 1,
    nn.AdaptiveAvgPool2d: 2,
    nn.AdaptiveAvgPool3d: 3,
    nn.AdaptiveMaxPool1d: 1,
    nn.AdaptiveMaxPool2d: 2,
    nn.AdaptiveMaxPool3d: 3,
}
# Modules whose output is a tensor nobody else holds: an in-place layer right after one may
# start a run (the run then stops mutating that tensor, which nobody can observe).
_FRESH_TYPES: tuple[type[nn.Module], ...] = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
    nn.Linear,
    nn.Bilinear,
    nn.GroupNorm,
    nn.LayerNorm,
    *BN_TYPES,
)

# fx call_function targets: name of the activation, and whether it takes ``inplace``.
ACT_FUNCTIONS: dict[Any, tuple[str, bool]] = {
    F.relu: ("relu", False),
    torch.relu: ("relu", False),
    F.relu6: ("relu6", False),
    F.leaky_relu: ("leaky_relu", False),
    F.gelu: ("gelu", False),
    F.silu: ("silu", False),
    torch.sigmoid: ("sigmoid", False),
    F.sigmoid: ("sigmoid", False),
    torch.tanh: ("tanh", False),
    F.tanh: ("tanh", False),
    F.hardswish: ("hardswish", False),
    F.elu: ("elu", False),
    torch.relu_: ("relu", True),
    F.relu_: ("relu", True),
}
ACT_METHODS: dict[str, tuple[str, bool]] = {
    "relu": ("relu", False),
    "relu_": ("relu", True),
    "sigmoid": ("sigmoid", False),
    "sigmoid_": ("sigmoid", True),
    "tanh": ("tanh", False),
    "tanh_": ("tanh", True),
}
# Element-wise adds, and whether they are in place.
ADD_FUNCTIONS: dict[Any, bool] = {operator.add: False, torch.add: False, operator.iadd: True}
ADD_METHODS: dict[str, bool] = {"add": False, "add_": True}
# The parameters each activation takes besides its input, with their defaults.
ACT_DEFAULTS: dict[str, dict[str, Any]] = {
    "leaky_relu": {"negative_slope": 0.01},
    "elu": {"alpha": 1.0},
    "gelu": {"approximate": "none"},
}


class Marker:
    """Stands for the run's main tensor or a side input in a recorded call's arguments."""

    def __init__(self, side: int | None) -> None:
        self.side = side


MAIN = Marker(None)


@dataclass
class Op:
    """One layer of a run: what it is, and how the original forward called it."""

    kind: str  # "bn", "act", "pool", "dropout", "identity", "add"
    label: str
    module: nn.Module | None = None
    act: str | None = None
    act_params: dict[str, Any] = field(default_factory=dict)
    inplace: bool = False  # the original mutates its main input
    side: int | None = None  # add: index of the side input (None: scalar operand)
    scalar: Any = None
    # How the original calls it (fx function/method ops); markers stand for tensors.
    call: str = "module"
    target: Any = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def has_hooks(m: nn.Module) -> bool:
    """Whether ``m`` has its own hooks (they would fire once per chunk in a run)."""
    return bool(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
    )


def module_op(m: nn.Module, label: str) -> Op | None:
    """The run op for an eligible module, or None. Exact types: subclasses may override forward."""
    if has_hooks(m):
        return None
    kind = type(m)
    if kind in BN_TYPES:
        return Op("bn", label, module=m)
    if kind in ACT_MODULES:
        return Op("act", label, module=m, act=ACT_MODULES[kind], inplace=_inplace(m))
    if kind in POOL_DIMS:
        if getattr(m, "return_indices", False):
            return None
        return Op("pool", label, module=m)
    if kind is nn.Dropout:
        return Op("dropout", label, module=m, inplace=_inplace(m))
    if kind is nn.Identity:
        return Op("identity", label, module=m)
    return None


def _inplace(m: nn.Module) -> bool:
    return bool(getattr(m, "inplace", False))


def fresh_module(m: nn.Module) -> bool:
    """Whether ``m`` returns a new tensor that only its caller holds."""
    if isinstance(m, _FRESH_TYPES) or type(m) in POOL_DIMS:
        return not getattr(m, "return_indices", False)
    return type(m) in ACT_MODULES and not _inplace(m)


def real_ops(ops: list[Op]) -> int:
    """How many ops do work (Identity does not count towards a run's minimum of two)."""
    return sum(op.kind != "identity" for op in ops)


def run_name(ops: list[Op]) -> str:
    """A run's name in reports: its first and last layer's labels."""
    return ops[0].label if len(ops) == 1 else f"{ops[0].label}..{ops[-1].label}"


def activation(name: str, params: dict[str, Any], t: Tensor, inplace: bool) -> Tensor:
    """Apply the activation ``name`` to ``t`` (in place when allowed)."""
    if name == "relu":
        return torch.relu_(t) if inplace else torch.relu(t)
    if name == "relu6":
        return F.hardtanh(t, 0.0, 6.0, inplace)
    if name == "leaky_relu":
        return F.leaky_relu(t, params["negative_slope"], inplace)
    if name == "gelu":
        return F.gelu(t, approximate=params["approximate"])
    if name == "silu":
        return F.silu(t, inplace)
    if name == "sigmoid":
        return t.sigmoid_() if inplace else torch.sigmoid(t)
    if name == "tanh":
        return t.tanh_() if inplace else torch.tanh(t)
    if name == "hardswish":
        return F.hardswish(t, inplace)
    if name == "elu":
        return F.elu(t, params["alpha"], inplace)
    raise AssertionError(name)


def module_params(m: nn.Module, name: str) -> dict[str, Any]:
    """An activation module's parameters, read now."""
    # Read at call time: a user may change e.g. negative_slope after the transform.
    if name == "leaky_relu":
        return {"negative_slope": m.negative_slope}
    if name == "elu":
        return {"alpha": m.alpha}
    if name == "gelu":
        return {"approximate": m.approximate}
    return {}


def call_original(ops: list[Op], x: Any, sides: tuple[Any, ...]) -> Any:
    """The original layers, called exactly as the original forward called them."""
    t = x
    for op in ops:
        if op.call == "module":
            assert op.module is not None
            t = op.module(t)
        elif op.call == "function":
            t = op.target(*_fill(op.args, t, sides), **op.kwargs)
        else:
            args = _fill(op.args, t, sides)
            t = getattr(args[0], op.target)(*args[1:], **op.kwargs)
    return t


def _fill(value: Any, t: Tensor, sides: tuple[Any, ...]) -> Any:
    if isinstance(value, Marker):
        return t if value.side is None else sides[value.side]
    if isinstance(value, tuple):
        return tuple(_fill(v, t, sides) for v in value)
    return value
