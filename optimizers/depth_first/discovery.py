"""Discovery: where the runs of memory-bound layers are in a module.

How runs are found
    Every user-defined module (and every ``nn.Sequential``) is traced with ``torch.fx`` one
    level deep (its children stay opaque calls). In its graph a run is a maximal chain of
    eligible nodes (``ops.py``) in which every intermediate value has exactly one user:
    BatchNorm, activations (modules, ``F.*``/``torch.*`` calls and tensor methods), pooling,
    Dropout, Identity and element-wise adds (a residual ``out + identity`` adds a *side
    input* to the run). When a forward cannot be traced, or ``use_fx=False``, an
    ``nn.Sequential`` is still split into runs of consecutive eligible children. Runs need at
    least two layers other than Identity. Layers with hooks are never part of a run (their
    hooks would fire once per chunk). An in-place layer only starts a run when its input is a
    fresh tensor, since the chunked run does not mutate its input.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch.fx as fx
from torch import nn

from sofa_top.optimizers.depth_first.ops import (
    ACT_DEFAULTS,
    ACT_FUNCTIONS,
    ACT_METHODS,
    ADD_FUNCTIONS,
    ADD_METHODS,
    MAIN,
    Marker,
    Op,
    fresh_module,
    module_op,
    real_ops,
)

# Attribute names of collapsed runs in a rewritten module (and in its fx graph).
RUN_PREFIX = "_depth_first_run_"


@dataclass
class Chain:
    """A run found in an fx graph: its input node, its nodes, their ops and side inputs."""

    input: fx.Node
    nodes: list[fx.Node]
    ops: list[Op]
    sides: list[fx.Node]


# --------------------------------------------------------------------------- fx tracing


class _ShallowTracer(fx.Tracer):
    """Traces one module's own forward; every child stays an opaque call."""

    def __init__(self, root: nn.Module) -> None:
        super().__init__()
        self._root = root

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return m is not self._root


def trace(module: nn.Module) -> fx.GraphModule | None:
    """Shallow fx trace, or None when the forward cannot be traced or depends on the mode."""
    was_training = module.training
    codes: list[str] = []
    gm: fx.GraphModule | None = None
    try:
        for training in (False, True):
            module.training = training
            graph = _ShallowTracer(module).trace(module)
            gm = fx.GraphModule(module, graph)
            codes.append(gm.code)
    except Exception:
        return None
    finally:
        module.training = was_training
    # A forward that branches on self.training would be frozen in one mode by fx.
    if codes[0] != codes[1]:
        return None
    return gm


# --------------------------------------------------------------------------- chains in a graph


def find_chains(graph: fx.Graph, root: nn.Module, prefix: str) -> list[Chain]:
    """The maximal chains of eligible nodes in ``graph`` with at least two real ops."""
    tails: dict[fx.Node, Chain] = {}  # open chains, by their last node
    chains: list[Chain] = []
    for node in graph.nodes:
        found = _node_op(node, root, prefix)
        if found is None:
            continue
        op, mains = found
        chain = None
        main = mains[0]
        for candidate in mains:
            open_chain = tails.get(candidate)
            if open_chain is not None and len(candidate.users) == 1:
                chain, main = open_chain, candidate
                del tails[candidate]
                break
        if chain is None:
            if op.inplace and not _fresh_node(main, root):
                continue  # would mutate a tensor someone else may still read
            chain = Chain(main, [], [], [])
            chains.append(chain)
        chain.nodes.append(node)
        chain.ops.append(_recorded(op, node, main, chain))
        tails[node] = chain
    return [c for c in chains if real_ops(c.ops) >= 2]


def _node_op(node: fx.Node, root: nn.Module, prefix: str) -> tuple[Op, list[fx.Node]] | None:
    """(op, nodes that may be its main input) for an eligible node, or None."""
    if node.op == "call_module":
        return _module_node_op(node, root, prefix)
    if node.op not in ("call_function", "call_method"):
        return None
    args, kwargs = node.args, dict(node.kwargs)
    if not args or any(isinstance(v, fx.Node) for v in kwargs.values()):
        return None
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
    label = f"{prefix}<{name}>"
    is_method = node.op == "call_method" and isinstance(target, str)
    if (node.op == "call_function" and target in ACT_FUNCTIONS) or (
        is_method and target in ACT_METHODS
    ):
        return _activation_node_op(node, label)
    if (node.op == "call_function" and target in ADD_FUNCTIONS) or (
        is_method and target in ADD_METHODS
    ):
        return _add_node_op(node, label)
    return None


def _module_node_op(node: fx.Node, root: nn.Module, prefix: str) -> tuple[Op, list[fx.Node]] | None:
    assert isinstance(node.target, str)
    if node.target.startswith(RUN_PREFIX):
        return None
    op = module_op(root.get_submodule(node.target), prefix + node.target)
    if op is None or len(node.args) != 1 or node.kwargs:
        return None
    if not isinstance(node.args[0], fx.Node):
        return None
    return op, [node.args[0]]


def _activation_node_op(node: fx.Node, label: str) -> tuple[Op, list[fx.Node]] | None:
    """An activation function or tensor method call whose arguments we can replay."""
    args, kwargs = node.args, dict(node.kwargs)
    main = args[0]
    if not isinstance(main, fx.Node):
        return None
    if node.op == "call_method":
        assert isinstance(node.target, str)
        act, inplace = ACT_METHODS[node.target]
        if len(args) != 1 or kwargs:
            return None
        op = Op("act", label, act=act, inplace=inplace)
    else:
        act, inplace = ACT_FUNCTIONS[node.target]
        bound = _bind_activation(node.target, act, args, kwargs)
        if bound is None:
            return None
        params, bound_inplace = bound
        op = Op("act", label, act=act, act_params=params, inplace=inplace or bound_inplace)
    return _with_call(op, node), [main]


def _add_node_op(node: fx.Node, label: str) -> tuple[Op, list[fx.Node]] | None:
    """An element-wise add of two tensors or of a tensor and a number."""
    target, args = node.target, node.args
    inplace = ADD_METHODS[target] if isinstance(target, str) else ADD_FUNCTIONS[target]
    if len(args) != 2 or node.kwargs:
        return None
    a, b = args
    if a is b:
        return None
    nodes = [v for v in (a, b) if isinstance(v, fx.Node)]
    if not nodes or any(not isinstance(v, fx.Node | int | float) for v in (a, b)):
        return None
    if node.op == "call_method" or inplace:
        # Methods and in-place adds run on args[0]: only it can carry the run.
        if not isinstance(a, fx.Node):
            return None
        nodes = [a]
    return _with_call(Op("add", label, inplace=inplace), node), nodes


def _with_call(op: Op, node: fx.Node) -> Op:
    op.call = "function" if node.op == "call_function" else "method"
    op.target = node.target
    op.kwargs = dict(node.kwargs)
    return op


def _bind_activation(
    target: Any, act: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], bool] | None:
    """(parameters, inplace) of an activation call, or None when it passes anything else."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # C builtins (torch.relu, F.gelu)
        if len(args) != 1 or set(kwargs) - ({"approximate"} if act == "gelu" else set()):
            return None
        params = dict(ACT_DEFAULTS.get(act, {}))
        params.update(kwargs)
        return params, False
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    values = dict(bound.arguments)
    values.pop(next(iter(signature.parameters)))
    inplace = bool(values.pop("inplace", False))
    if any(isinstance(v, fx.Node) for v in values.values()):
        return None
    params = {k: v for k, v in values.items() if k in ACT_DEFAULTS.get(act, {})}
    if set(values) - set(params):
        return None
    return params, inplace


def _fresh_node(node: fx.Node, root: nn.Module) -> bool:
    if len(node.users) != 1 or node.op != "call_module":
        return False
    assert isinstance(node.target, str)
    return fresh_module(root.get_submodule(node.target))


def _recorded(op: Op, node: fx.Node, main: fx.Node, chain: Chain) -> Op:
    """Fill in the op's arguments with markers, adding tensor operands as side inputs."""
    if op.call == "module":
        return op
    args: list[Any] = []
    for value in node.args:
        if value is main:
            args.append(MAIN)
        elif isinstance(value, fx.Node):
            op.side = len(chain.sides)
            chain.sides.append(value)
            args.append(Marker(op.side))
        else:
            args.append(value)
            if op.kind == "add":
                op.scalar = value
    op.args = tuple(args)
    return op


# --------------------------------------------------------------------------- Sequential


def sequential_segments(seq: nn.Sequential, prefix: str) -> list[nn.Module | list[Op]]:
    """``seq``'s children in order, each consecutive group that forms a run as its ops."""
    segments: list[nn.Module | list[Op]] = []
    pending: list[tuple[Op, nn.Module]] = []

    def flush() -> None:
        ops = [op for op, _ in pending]
        if real_ops(ops) >= 2:
            segments.append(ops)
        else:
            segments.extend(m for _, m in pending)
        pending.clear()

    previous_fresh = False  # the Sequential's input belongs to the caller
    for name, child in seq.named_children():
        op = module_op(child, prefix + name)
        if op is not None and (pending or not op.inplace or previous_fresh):
            pending.append((op, child))
        else:
            flush()
            segments.append(child)
        previous_fresh = fresh_module(child)
    flush()
    return segments
