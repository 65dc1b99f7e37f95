"""TensorFlow hooks (stdlib only at import; TensorFlow is only touched once the workload loaded it).

tf-eager
    ``OwnedIterator.__next__`` is wrapped: the time inside it is input wait, and consecutive
    returns are step boundaries (see ``core.StepClock``). Covers ``for x in ds`` and ``next(it)``.

keras-fit
    See ``hooks_keras`` (it builds on this module's iterator hook).

tf-data-pipeline
    ``DatasetV2.__iter__`` is wrapped to walk the dataset graph once per dataset (stages as
    declared, with num_parallel_calls and buffer sizes, a serial map with no prefetch after it
    flagged), and every ``pipeline_interval_s`` the runtime view from
    ``tf.data.experimental.get_model_proto`` (stages after tf.data's rewrites, per-element self
    time, the bottleneck being the stage with the most time per output element per unit of
    parallelism) is read on the workload's thread, between steps (about 1 ms each time).
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sofa_top.agent import clocks
from sofa_top.agent.core import Agent, HookSkipped, timed_next

_MAX_STAGES = 64
_MAX_TRACKED = 4096


if TYPE_CHECKING:
    # a weakref to the dataset, its stages, batch size and note
    _Declared = tuple[Callable[[], object] | None, list[dict[str, Any]], int | None, str]


class _State:
    """What the TF hooks share (one process has one agent)."""

    owned_cls: type | None = None
    orig_next: Callable[[Any], Any] | None = None
    batch_sizes: dict[int, int | None] = {}  # id(iterator) -> batch size of its dataset
    declared: dict[int, _Declared] = {}  # id(dataset) -> what walking it found
    stats_it: Callable[[], object] | None = None  # weakref to the iterator to read stats from
    stats_due = float("inf")
    stats_declared: list[dict[str, Any]] | None = None  # the declared stages of stats_it's dataset


def _resolve_bs(it: object) -> int | None:
    return _State.batch_sizes.get(id(it))


def resolve_batch_size(it: object) -> int | None:
    """The batch size of the dataset ``it`` iterates, when the pipeline hook saw it."""
    return _resolve_bs(it)


def orig_next() -> Callable[[Any], Any] | None:
    """``OwnedIterator.__next__`` as it was before the eager hook wrapped it."""
    return _State.orig_next


def owned_cls() -> type | None:
    """tf.data's ``OwnedIterator`` class, once the eager hook found it."""
    return _State.owned_cls


def stats_due() -> float:
    """When (perf_counter) the tf.data runtime view is next due."""
    return _State.stats_due


def maybe_pull_stats(agent: Agent, it: object, now: float) -> None:
    """Send the tf.data runtime view of ``it`` if it is due."""
    _maybe_pull_stats(agent, it, now)


def _maybe_pull_stats(agent: Agent, it: object, now: float) -> None:
    if now < _State.stats_due:
        return
    ref = _State.stats_it
    if ref is None or ref() is not it:
        _State.stats_due = float("inf")
        return
    _State.stats_due = now + agent.settings.pipeline_interval_s
    try:
        stages, note = runtime_stages(it, _State.stats_declared)
    except Exception as e:
        # e.g. autotune disabled: no model to read; keep the declared view
        _State.stats_due = float("inf")
        agent.event("agent-pipeline", f"tf.data runtime stats unavailable: {e}")
        return
    if stages:
        agent.send_frame(
            {"type": "pipeline", "framework": "tf.data", "note": note, "stages": stages}
        )


def install_eager(agent: Agent, module: ModuleType) -> None:
    """Wrap ``OwnedIterator.__next__`` (tensorflow.python.data.ops.iterator_ops)."""
    cls = getattr(module, "OwnedIterator", None)
    if cls is None or not hasattr(cls, "__next__"):
        raise HookSkipped("tf.data OwnedIterator not found in this TensorFlow")
    orig: Callable[[Any], Any] = cls.__next__
    clock = agent.clock(clocks.TF_EAGER)
    clock.resolve_batch_size = _resolve_bs

    def after_fetch(it: Any, _new: bool, t1: float) -> None:
        if t1 >= _State.stats_due:
            _maybe_pull_stats(agent, it, t1)

    agent.patches.set(cls, "__next__", timed_next(agent, clocks.TF_EAGER, orig, clock, after_fetch))
    _State.owned_cls = cls
    _State.orig_next = orig
    agent.hook_applied(clocks.TF_EAGER)


# -- pipeline ----------------------------------------------------------------------------------
#
# Stage kinds name what the user wrote, because that is what the advice changes: a
# ``from_generator`` source is tf.data's ``flat_map`` over a one-element dataset, whose function
# builds a ``Generator`` dataset; it is reported as one ``generator`` stage named after the
# user's generator (a Keras ``PyDataset``/``Sequence`` adapter's generator as ``py_dataset``, with
# its ``workers`` as parallelism), never as a serial map. A generator inside a parallel
# ``interleave`` (the tf.data guide's fix) takes the interleave's parallelism.


def _kind(name: str, has_inputs: bool) -> str:
    low = name.lower()
    if "interleave" in low:
        return "interleave"
    if "flatmap" in low:
        return "flat_map"
    if "map" in low:
        return "map"
    if "batch" in low:
        return "batch"
    if "prefetch" in low:
        return "prefetch"
    if "cache" in low:
        return "cache"
    if low == "generator":
        return "generator"
    if not has_inputs:
        return "source"
    return "other"


def _closure_values(fn: object) -> list[object]:
    cells = getattr(fn, "__closure__", None) or ()
    out: list[object] = []
    for c in cells:
        try:
            out.append(c.cell_contents)
        except ValueError:  # an empty cell
            continue
    return out


def from_generator_source(dataset: object) -> object | None:
    """The callable a ``from_generator`` dataset runs (its generator function), or None when
    ``dataset`` is not the flat_map that ``from_generator`` builds."""
    wrapper = getattr(dataset, "_map_func", None)
    fn = getattr(wrapper, "_func", None)
    if fn is None or not getattr(fn, "__qualname__", "").startswith("_from_generator."):
        return None
    # flat_map_fn -> its helper functions -> the _GeneratorState holding the generator
    for helper in _closure_values(fn):
        for value in _closure_values(helper):
            gen: object = getattr(value, "_generator", None)
            if gen is not None and type(value).__name__ == "_GeneratorState":
                return gen
    return None


def generator_stage(gen: object) -> dict[str, Any]:
    """The stage a ``from_generator`` source is: a Keras PyDataset, or a Python generator."""
    owner = getattr(gen, "__self__", None)
    py_dataset = getattr(owner, "py_dataset", None)
    if py_dataset is not None:
        workers = _int_attr(py_dataset, "workers")
        return {
            "name": f"PyDataset {type(py_dataset).__name__}",
            "kind": "py_dataset",
            "parallelism": max(1, workers or 1),
            "buffer": _int_attr(py_dataset, "max_queue_size"),
        }
    qual = str(getattr(gen, "__qualname__", "") or type(gen).__name__).split(".<locals>.")[-1]
    if qual.startswith("GeneratorDataAdapter."):
        qual = "the Python generator given to fit"
    return {"name": qual, "kind": "generator", "parallelism": 1, "buffer": None}


def _int_attr(obj: object, name: str) -> int | None:
    value = getattr(obj, name, None)
    if value is None:
        return None
    numpy = getattr(value, "numpy", None)
    try:
        return int(numpy() if numpy is not None else value)
    except Exception:  # a symbolic tensor, or anything unexpected: unknown
        return None


def _stage(name: str, kind: str, par: int | None, buf: int | None) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        # AUTOTUNE (-1) is not a number of threads: say "unknown"
        "parallelism": par if par is not None and par > 0 else None,
        "buffer": buf if buf is not None and buf >= 0 else None,
        "self_time_s": None,
        "is_bottleneck": False,
    }


def declared_stages(dataset: Any) -> tuple[list[dict[str, Any]], int | None, str]:
    """Walk a dataset's graph (outermost first): stages, batch size, note."""
    stages: list[dict[str, Any]] = []
    batch_size: int | None = None
    todo = [dataset]
    prefetch_above: list[bool] = [False]
    serial_maps: list[int] = []
    generators: list[int] = []
    while todo and len(stages) < _MAX_STAGES:
        d = todo.pop()
        above = prefetch_above.pop()
        name = type(d).__name__.lstrip("_")
        try:
            inputs = list(d._inputs())
        except Exception:
            inputs = []
        gen = from_generator_source(d) if "FlatMap" in name else None
        if gen is not None:
            g = generator_stage(gen)
            if g["kind"] == "generator" or (g["parallelism"] or 1) <= 1:
                generators.append(len(stages))
            stages.append({**_stage(g["name"], g["kind"], g["parallelism"], g["buffer"])})
            continue  # its one-element input dataset is tf.data's own, not the user's
        kind = _kind(name, bool(inputs))
        par = _int_attr(d, "_num_parallel_calls")
        if kind == "map" and par is None and "Parallel" not in name:
            par = 1  # Dataset.map without num_parallel_calls runs one element at a time
        if kind == "batch" and batch_size is None:
            batch_size = _int_attr(d, "_batch_size")
        if kind == "map" and par == 1 and not above:
            serial_maps.append(len(stages))
        stages.append(_stage(name, kind, par, _int_attr(d, "_buffer_size")))
        for child in reversed(inputs):
            todo.append(child)
            prefetch_above.append(above or kind == "prefetch")
    note = "declared pipeline"
    if serial_maps:
        stages[serial_maps[-1]]["is_bottleneck"] = True
        note += "; likely bottleneck: a serial map with no prefetch after it"
        note += " (tf.data's default optimizations may still parallelize it)"
    elif any(s["kind"] == "py_dataset" for s in stages):
        note += "; a Keras PyDataset feeds it (its workers= threads or processes prefetch)"
        if generators:
            stages[generators[-1]]["is_bottleneck"] = True
    elif generators and not any(s["kind"] == "map" for s in stages):
        stages[generators[-1]]["is_bottleneck"] = True
        note += "; likely bottleneck: a Python source that yields one element at a time"
    elif not any(s["kind"] == "prefetch" for s in stages):
        note += "; no prefetch: input and compute cannot overlap"
    return stages, batch_size, note


def _runtime_order(nodes: dict[int, Any], output: int) -> list[tuple[int, int]]:
    """(node id, parallelism of the nearest parallel interleave above it), outermost first.

    A ``from_generator`` source is its FlatMap node alone (the Generator and FromTensor below it
    are folded into it); an interleave's instances of the same sub-pipeline count once."""
    order: list[tuple[int, int]] = []
    seen: set[int] = set()
    todo: list[tuple[int, int]] = [(output, 1)]
    while todo and len(order) < _MAX_STAGES:
        nid, par = todo.pop()
        if nid in seen or nid not in nodes:
            continue
        seen.add(nid)
        order.append((nid, par))
        n = nodes[nid]
        inputs = [int(i) for i in n.inputs if int(i) in nodes]
        if str(n.name) == "FlatMap" and any(str(nodes[i].name) == "Generator" for i in inputs):
            continue
        below = par
        if _kind(str(n.name), True) == "interleave":
            below = max(par, _param(n, "parallelism") or 1)
        first: dict[str, int] = {}
        for i in inputs:
            first.setdefault(str(nodes[i].name), i)  # one instance per sub-pipeline
        todo.extend((i, below) for i in reversed(list(first.values())))
    return order


def _param(node: Any, name: str) -> int | None:
    for p in node.parameters:
        if p.name == name:
            return int(p.state_value or p.value)
    return None


def _busy(nodes: dict[int, Any], nid: int) -> tuple[float, int]:
    """(processing seconds, elements) of a node; a from_generator FlatMap adds its Generator."""
    n = nodes[nid]
    busy, elements = float(n.processing_time) / 1e9, int(n.num_elements)
    if str(n.name) == "FlatMap":
        for i in (int(x) for x in n.inputs):
            if i in nodes and str(nodes[i].name) == "Generator":
                busy += float(nodes[i].processing_time) / 1e9
                elements = max(elements, int(nodes[i].num_elements))
    return busy, elements


def runtime_stages(
    iterator: Any, declared: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], str]:
    """The live pipeline from tf.data's autotune model (after its rewrites), outermost first.

    ``declared``: the stages ``declared_stages`` found, which name a from_generator source (the
    model only knows it as ``FlatMap`` over ``Generator``)."""
    tf = sys.modules["tensorflow"]
    proto = tf.data.experimental.get_model_proto(iterator)
    nodes = {int(k): v for k, v in proto.nodes.items()}
    root = nodes.get(int(proto.output))
    if root is None:
        return [], "no tf.data model"
    produced = max(int(root.num_elements), 1)
    sources = [s for s in declared or () if s["kind"] in ("generator", "py_dataset")]
    stages: list[dict[str, Any]] = []
    cost: list[float] = []
    for nid, outer in _runtime_order(nodes, int(proto.output)):
        n = nodes[nid]
        if n.name == "Root":
            continue
        name = str(n.name)
        kind = _kind(name, bool(n.inputs))
        par, buf = _param(n, "parallelism"), _param(n, "buffer_size")
        if name == "Map" and par is None:
            # the model's plain Map node (Dataset.map without num_parallel_calls, not fused
            # with its batch) has no parallelism parameter: it runs one element at a time, on
            # the thread that asks for it (per interleave cycle above it). A fused MapAndBatch
            # runs ahead on threads of its own and stays "unknown".
            par = max(outer, 1)
        if name == "FlatMap" and any(
            int(i) in nodes and nodes[int(i)].name == "Generator" for i in n.inputs
        ):
            src = sources.pop(0) if sources else None
            name = src["name"] if src else "from_generator"
            kind = src["kind"] if src else "generator"
            par = outer if kind == "generator" else (src or {}).get("parallelism") or outer
        busy, elements = _busy(nodes, nid)
        stages.append(
            {
                "name": name,
                "kind": kind,
                "parallelism": par,
                "buffer": buf,
                "self_time_s": busy / elements if elements else None,
                "is_bottleneck": False,
            }
        )
        # a prefetch stage only hands over what others made: never the bottleneck
        width = max(par or 1, outer, 1) if kind != "generator" else max(par or 1, 1)
        cost.append(0.0 if kind == "prefetch" else busy / produced / width)
    note = f"runtime (tf.data model, {produced} elements produced)"
    if cost and max(cost) > 0:
        worst = cost.index(max(cost))
        stages[worst]["is_bottleneck"] = True
        # its time per element is in the stage's own row: the ranking's cost (that time over
        # the elements produced and the stage's parallelism) would be a second "per element"
        note += f"; slowest stage: {stages[worst]['name']} (the most time per element produced)"
    return stages, note


def _executing_eagerly() -> bool:
    tf = sys.modules.get("tensorflow")
    check = getattr(tf, "executing_eagerly", None)
    return bool(check()) if check is not None else True


def install_pipeline(agent: Agent, module: ModuleType) -> None:
    """Wrap ``DatasetV2.__iter__`` (tensorflow.python.data.ops.dataset_ops)."""
    cls = getattr(module, "DatasetV2", None)
    if cls is None or not hasattr(cls, "__iter__"):
        raise HookSkipped("tf.data DatasetV2 not found in this TensorFlow")
    orig: Callable[[Any], Any] = cls.__iter__

    def __iter__(self: Any) -> Any:
        it = orig(self)
        # inside a tf.function there is nothing to walk or time from Python
        if agent.enabled and _executing_eagerly():
            try:
                _new_iterator(agent, self, it)
            except Exception as e:
                agent.fail("the tf.data pipeline hook", e)
        return it

    __iter__.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(cls, "__iter__", __iter__)
    agent.hook_applied("tf-data-pipeline")


def _declared(dataset: Any) -> tuple[list[dict[str, Any]], int | None, str, bool]:
    """``declared_stages`` cached per live dataset (a loop may create an iterator per epoch,
    or even per step); the last item says whether this dataset is new."""
    cache = _State.declared
    hit = cache.get(id(dataset))
    if hit is not None and hit[0] is not None and hit[0]() is dataset:
        return hit[1], hit[2], hit[3], False
    if len(cache) > _MAX_TRACKED:
        cache.clear()
    stages, batch_size, note = declared_stages(dataset)
    try:
        ref: Callable[[], object] | None = weakref.ref(dataset)
    except TypeError:
        ref = None
    cache[id(dataset)] = (ref, stages, batch_size, note)
    return stages, batch_size, note, True


def _new_iterator(agent: Agent, dataset: Any, it: Any) -> None:
    sizes = _State.batch_sizes
    if len(sizes) > _MAX_TRACKED:
        sizes.clear()
    stages, batch_size, note, new = _declared(dataset)
    sizes[id(it)] = batch_size
    if new:
        agent.send_frame(
            {"type": "pipeline", "framework": "tf.data", "note": note, "stages": stages}
        )
    _State.stats_declared = stages
    try:
        _State.stats_it = weakref.ref(it)
        # first runtime view once the pipeline has run a little
        _State.stats_due = time.perf_counter() + 1.0
    except TypeError:
        _State.stats_it = None
