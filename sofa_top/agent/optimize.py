"""Optimizer toggles applied inside the workload (stdlib only at import).

The launcher passes ``settings["optimize"]``, e.g.::

    {"xla": true, "prefetch": {"parallelism": 16, "deterministic": false}, "depth_first": true}

(``"prefetch": true`` means the defaults). Nothing framework-specific runs here at import: the
agent's lazy import hooks (``post_import.PostImportHooks``) call the installers below right
after the workload imports the module they patch. Each toggle is reported through the agent's
``info`` frame as hook ``opt:<toggle>`` (applied, or skipped with the reason) and, each time it
changes something in the workload, an ``optimize`` event whose data says where (``{"toggle",
"applied", "where", "reason", ...}``). A toggle that never finds anything to change stays
skipped with a reason saying so.

xla
    TensorFlow: ``TF_XLA_FLAGS=--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit`` is set at agent
    start (before the workload can import TF; an existing value is kept) and
    ``tf.config.optimizer.set_jit("autoclustering")`` after import; Keras 3
    ``Model.compile`` is forced to ``jit_compile=True``. PyTorch: the first top-level
    ``nn.Module`` with parameters that the workload calls is compiled in place
    (``module.compile()``); the duration of its first compiled call is reported as
    ``compile_s`` in the event.
prefetch
    tf.data: ``map``/``interleave`` without ``num_parallel_calls`` get ``AUTOTUNE`` (and
    ``deterministic=False`` when asked), and a dataset iterated eagerly without a final
    ``prefetch`` is iterated as ``.prefetch(AUTOTUNE)`` with autotune and default
    optimizations re-enabled. PyTorch ``DataLoader(num_workers=0)`` gets ``num_workers`` (the
    setting, else the cores left for the loop, at least 2), ``persistent_workers=True``,
    ``prefetch_factor`` (4 unless given) and ``pin_memory`` only when CUDA is available.

    ``{"parallelism": N}`` sizes both for input that mostly waits (storage, network), where N
    may exceed the core count: tf.data ``map``/``interleave`` get ``num_parallel_calls=N``
    (also over ``AUTOTUNE`` or a smaller number: AUTOTUNE never goes past the core count) and
    the iterated dataset gets ``threading.private_threadpool_size=N`` (also when it already
    ends in a prefetch), since tf.data's default pool has one thread per core; a
    ``DataLoader`` with fewer than N workers (0 included) gets ``num_workers=N``. Each
    ``optimize`` event then carries ``parallelism`` and says N in its ``where``.
    An ``IterableDataset`` gets workers only if it shards: ``datacheck.iterable_shards`` runs
    it as workers 0 and 1 would and compares their first items; one that yields the same
    items in both keeps its loader as it was (the toggle is skipped with the reason: workers
    would feed every sample N times). A Keras ``PyDataset`` with one worker gets ``workers``
    (the setting, else the default workers) through its own enqueuer, which keeps the order;
    Keras' tf.data around it is left as Keras set it.
depth_first
    ``sofa_top.optimizers.depth_first`` on the same top-level module (loaded from its
    files, under its real module names, when ``sofa_top.optimizers`` is not importable).
    Mutually exclusive with torch.compile: with both requested, depth-first is reported
    skipped.
pin_memory (GPU)
    ``DataLoader(pin_memory=True)`` when CUDA is available, and ``tensor.to(cuda)`` /
    ``tensor.cuda()`` of a pinned CPU tensor without ``non_blocking`` gets
    ``non_blocking=True`` (host-to-device only: a device-to-host copy must stay blocking for the
    host to read it). Without CUDA it is reported skipped.
bf16 (GPU)
    The top-level module's ``forward`` runs under ``torch.autocast(<its device>,
    dtype=torch.bfloat16)`` from its second call on (the first call is already under way when
    the module is found); skipped on a GPU without bf16. It changes the numerics: compare flags
    it and checks the loss.
compile_mode (GPU)
    ``module.compile(mode=...)`` on the top-level module (``reduce-overhead``: CUDA graphs);
    with ``xla`` too, this one compile is the module's (xla is reported skipped for torch).
threads
    ``{"threads": N}``: ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/``OPENBLAS_NUM_THREADS=N`` and
    ``OMP_WAIT_POLICY=PASSIVE`` at agent start (before the workload loads its BLAS);
    ``torch.set_num_threads(N)`` once torch is imported, and a later call of the script's own
    with more threads is capped at N; TensorFlow's intra- and inter-op pools at N.
check_data
    Not a toggle: every batch the loop fetches (DataLoader, tf.data iterator) is fingerprinted
    (``datacheck``) and the counts reported as ``optimize`` events with ``data_check``.
"""

from __future__ import annotations

import os
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sofa_top.agent import datacheck
from sofa_top.agent.optimize_gpu import autocast_bf16, install_pin_memory
from sofa_top.agent.optimize_state import (
    State,
    applied,
    bind,
    check_guard,
    default_workers,
    guard,
    on_detach,
    patch,
    skipped,
)
from sofa_top.agent.toggles import (
    BF16,
    COMPILE_MODE,
    DEPTH_FIRST,
    EXCLUDED_BECAUSE,
    PIN_MEMORY,
    PREFETCH,
    THREADS,
    XLA,
    XLA_FLAGS,
    PrefetchOptions,
    Toggle,
    excluded,
    hook_name,
    row_of,
)

if TYPE_CHECKING:
    from sofa_top.agent.core import Agent, Installer

# Why a toggle has not applied yet. Until its framework is imported: the framework is missing
# (what it says if the run ends there); once an installer is in: what it still waits for.
# the toggles installed on the workload's top module (torch.nn.Module's first call)
_MODULE_TOGGLES: tuple[Toggle, ...] = (XLA, DEPTH_FIRST, BF16, COMPILE_MODE)
_FRAMEWORKS = {"tensorflow": "TF", "torch": "PyTorch"}


def _not_imported(toggle: Toggle) -> str:
    """Why ``toggle`` has not applied while none of its frameworks is imported."""
    row = row_of(toggle)
    fws = row.frameworks if row is not None else ()
    return (
        f"not a {' or '.join(_FRAMEWORKS[f] for f in fws)} job: the workload never imported "
        f"{' or '.join(fws)}"
    )


_NOTHING_YET: dict[str, str] = {
    "torch.utils.data.dataloader": "no DataLoader was created: the loop does not read its "
    "batches through torch.utils.data.DataLoader",
    "tensorflow.python.data.ops.dataset_ops": "no tf.data dataset was iterated eagerly",
    "torch.nn.modules.module": "no nn.Module with parameters was called",
}


# -- TensorFlow ---------------------------------------------------------------------------------


def _install_tf_jit(agent: Agent, tf: ModuleType) -> None:
    tf.config.optimizer.set_jit("autoclustering")
    flags = os.environ.get("TF_XLA_FLAGS", "")
    applied(XLA, f"tensorflow: auto-clustering (TF_XLA_FLAGS={flags!r}, set_jit)")


def _install_keras_jit(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "Trainer", None)
    if cls is None or not hasattr(cls, "compile"):
        raise RuntimeError("keras Trainer.compile not found")
    orig = cls.compile

    def compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("jit_compile", "auto") in ("auto", None):
            kwargs["jit_compile"] = True
        out = orig(self, *args, **kwargs)
        applied(XLA, f"keras: {type(self).__name__}.compile(jit_compile=True)")
        return out

    compile.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(cls, "compile", compile)


def _install_tf_data(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "DatasetV2", None)
    if cls is None:
        raise RuntimeError("tf.data DatasetV2 not found")
    opts = State.wanted.prefetch or PrefetchOptions()
    nondet = opts.deterministic is False
    autotune = -1  # tf.data.AUTOTUNE
    n = opts.parallelism
    extra = {} if n is None else {"parallelism": n}

    def raise_to_n(current: object) -> bool:
        """With ``parallelism``: override a missing, AUTOTUNE or smaller ``num_parallel_calls``
        (a tensor or anything else unusual is left alone)."""
        if n is None:
            return current is None
        if current is None:
            return True
        return isinstance(current, int) and not isinstance(current, bool) and current < n

    def parallel(name: str) -> None:
        orig = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                b = bind(orig, (self, *args), kwargs)
                a = b.arguments
                if raise_to_n(a.get("num_parallel_calls")) and not a.get("synchronous"):
                    a["num_parallel_calls"] = autotune if n is None else n
                    if nondet and a.get("deterministic") is None:
                        a["deterministic"] = False
                    calls = "AUTOTUNE" if n is None else str(n)
                    applied(PREFETCH, f"tf.data: {name}(num_parallel_calls={calls})", **extra)
                args, kwargs = tuple(b.args[1:]), dict(b.kwargs)
            except TypeError:
                pass  # let the original raise its own error
            return orig(self, *args, **kwargs)

        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        agent.patches.set(cls, name, wrapper)

    parallel("map")
    parallel("interleave")
    orig_iter = cls.__iter__

    def __iter__(self: Any) -> Any:
        ds = self
        try:
            from tensorflow.python.eager import context

            if context.executing_eagerly() and not _keras_py_dataset(self):
                o = module.options_lib.Options()
                if n is not None:
                    # tf.data's default pool has one thread per core: waiting calls need more
                    o.threading.private_threadpool_size = n
                if type(self).__name__ != "_PrefetchDataset":
                    o.autotune.enabled = True
                    o.experimental_optimization.apply_default_optimizations = True
                    if nondet:
                        o.deterministic = False
                    ds = self.prefetch(autotune).with_options(o)
                    pool = "" if n is None else f" with private_threadpool_size={n}"
                    applied(
                        PREFETCH,
                        f"tf.data: .prefetch(AUTOTUNE) appended at iteration{pool}",
                        **extra,
                    )
                elif n is not None:
                    ds = self.with_options(o)
                    applied(PREFETCH, f"tf.data: private_threadpool_size={n} at iteration", **extra)
        except Exception as e:
            ds = self
            skipped(PREFETCH, f"appending prefetch failed: {e!r}")
        return orig_iter(ds)

    __iter__.__wrapped__ = orig_iter  # type: ignore[attr-defined]
    agent.patches.set(cls, "__iter__", __iter__)


def _keras_py_dataset(ds: Any, depth: int = 4) -> bool:
    """Whether ``ds`` is Keras' tf.data around a PyDataset (Keras tunes its threads itself)."""
    from sofa_top.agent.hooks_tf import from_generator_source

    todo = [(ds, 0)]
    while todo:
        d, level = todo.pop()
        gen = from_generator_source(d)
        if gen is not None and getattr(getattr(gen, "__self__", None), "py_dataset", None):
            return True
        if level < depth:
            try:
                todo.extend((child, level + 1) for child in d._inputs())
            except Exception:
                continue
    return False


def _set_back(obj: Any, name: str, ours: Any, prior: Any) -> Callable[[], None]:
    """An undo step: ``obj.name`` back to ``prior`` unless someone changed it since; holds
    ``obj`` weakly (a dataset the workload dropped is not kept alive for the undo)."""

    def strong() -> Any:
        return obj

    try:
        ref: Callable[[], Any] = weakref.ref(obj)
    except TypeError:  # no weak reference to it: a strong one
        ref = strong

    def undo() -> None:
        target = ref()
        if target is not None and getattr(target, name, None) == ours:
            setattr(target, name, prior)

    return undo


def _install_py_dataset(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "PyDatasetAdapter", None)
    if cls is None:
        raise RuntimeError("keras PyDatasetAdapter not found")
    opts = State.wanted.prefetch or PrefetchOptions()
    workers = opts.parallelism or opts.workers or default_workers()
    orig = cls.__init__

    def __init__(self: Any, x: Any, *args: Any, **kwargs: Any) -> None:
        try:
            prior = getattr(x, "workers", 1)
            if int(prior or 1) < workers and not getattr(x, "use_multiprocessing", False):
                x.workers = workers  # threads: the OrderedEnqueuer keeps the batch order
                on_detach(f"{type(x).__name__}.workers", _set_back(x, "workers", workers, prior))
                applied(
                    PREFETCH,
                    f"keras: {type(x).__name__} PyDataset(workers={workers})",
                    workers=workers,
                )
        except Exception as e:
            skipped(PREFETCH, f"PyDataset workers not set: {e!r}")
        orig(self, x, *args, **kwargs)

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(cls, "__init__", __init__)


# -- PyTorch ------------------------------------------------------------------------------------


def _install_dataloader(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "DataLoader", None)
    if cls is None:
        raise RuntimeError("torch DataLoader not found")
    opts = State.wanted.prefetch or PrefetchOptions()
    n = opts.parallelism
    workers = n or opts.workers or default_workers()
    extra = {} if n is None else {"parallelism": n}
    orig = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            b = bind(orig, (self, *args), kwargs)
            a = b.arguments
            current = a.get("num_workers") or 0
            # without parallelism only a loader with no workers is changed
            if (n is None and not current) or (
                n is not None and isinstance(current, int) and current < n
            ):
                import torch

                dataset = a.get("dataset")
                if isinstance(dataset, torch.utils.data.IterableDataset):
                    shards, why = _shards(dataset, workers)
                    if not shards:
                        skipped(
                            PREFETCH,
                            f"not sharded: DataLoader over {type(dataset).__name__} keeps "
                            f"num_workers={current}: {why}",
                            blocked="unsharded-iterable",
                            dataset=type(dataset).__name__,
                        )
                        orig(self, *args, **kwargs)
                        return

                a["num_workers"] = workers
                a["persistent_workers"] = True
                pf = a.get("prefetch_factor") or opts.prefetch_factor or 4
                a["prefetch_factor"] = pf
                pin = bool(torch.cuda.is_available())
                if pin:
                    a["pin_memory"] = True
                args, kwargs = tuple(b.args[1:]), dict(b.kwargs)
                applied(
                    PREFETCH,
                    f"torch: DataLoader(num_workers={workers}, persistent_workers=True, "
                    f"prefetch_factor={pf}{', pin_memory=True' if pin else ''})",
                    workers=workers,
                    **extra,
                )
            elif current:
                asked = "" if n is None else f" (parallelism {n} asked)"
                skipped(
                    PREFETCH, f"DataLoader(num_workers={current}) already loads in workers{asked}"
                )
        except TypeError:
            pass
        orig(self, *args, **kwargs)

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(cls, "__init__", __init__)


def _shards(dataset: Any, workers: int) -> tuple[bool, str]:
    """``datacheck.iterable_shards``, once per dataset; a probe that fails means no workers."""
    key = id(dataset)
    hit = State.shards.get(key)
    if hit is not None and hit[0] is dataset:
        return hit[1], hit[2]
    try:
        shards, why = datacheck.iterable_shards(dataset, workers)
    except Exception as e:
        shards, why = False, f"probing its workers' streams failed: {e!r}"
    State.shards[key] = (dataset, shards, why)
    return shards, why


def _load_depth_first(name: str = "depth_first") -> Callable[..., Any]:
    """``sofa_top.optimizers.depth_first.<name>`` (``depth_first``, ``count_chains``)."""
    import importlib

    try:  # by name, not a static import: the agent imports nothing else from sofa_top
        mod = importlib.import_module("sofa_top.optimizers.depth_first")
    except ImportError:
        mod = _load_depth_first_by_path()
    return getattr(mod, name)  # type: ignore[no-any-return]


def _load_depth_first_by_path() -> ModuleType:
    """``depth_first`` from this copy of sofa-top's files, without ``sofa_top.optimizers``.

    The package's modules import each other and ``sofa_top.optimizers.cache`` by absolute
    name. An import of ``a.b.c`` only needs ``a.b`` in ``sys.modules`` (and a module found
    there is not imported again), so registering the package and ``cache`` under their real
    names makes those imports work without ever importing ``sofa_top.optimizers``.
    """
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "optimizers")
    package = os.path.join(folder, "depth_first")
    _exec_by_path("sofa_top.optimizers.cache", os.path.join(folder, "cache.py"))
    return _exec_by_path(
        "sofa_top.optimizers.depth_first", os.path.join(package, "__init__.py"), package
    )


def _exec_by_path(name: str, path: str, package: str | None = None) -> ModuleType:
    """Module ``name`` run from ``path`` (a package when ``package`` is its folder) and
    registered in ``sys.modules``; the registered one if it is there already."""
    import importlib.util

    existing = sys.modules.get(name)
    if existing is not None:
        return existing
    locations = None if package is None else [package]
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=locations)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name} from {path}", name=name, path=path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # before it runs: its own submodules look their parent up here
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]  # as a failed import does: no half-initialized module left
        raise
    return mod


def _time_first_compiled_call(module: Any) -> None:
    real = getattr(module, "_compiled_call_impl", None)
    if real is None:
        return
    name = type(module).__name__

    def first(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = real(*args, **kwargs)
        module._compiled_call_impl = real
        dt = time.perf_counter() - t0
        agent = State.agent
        if agent is not None:
            agent.event(
                "optimize",
                f"xla: first compiled call of {name} took {dt:.2f} s",
                {"toggle": XLA, "applied": True, "where": None, "compile_s": dt},
            )
        return out

    patch(module, "_compiled_call_impl", first)


def _compile_in_place(module: Any, **kwargs: Any) -> None:
    """``module.compile(**kwargs)`` (torch.compile in place), undone at detach."""
    prior = vars(module).get("_compiled_call_impl")
    module.compile(**kwargs)
    on_detach(
        f"{type(module).__name__}.compile()",
        lambda: setattr(module, "_compiled_call_impl", prior),
    )


def _depth_first_in_place(module: Any) -> None:
    _load_depth_first()(module)

    def undo() -> None:
        raise RuntimeError("depth_first rebuilt the model's layers in place; they stay so")

    on_detach(f"depth_first({type(module).__name__})", undo)


def _on_top_module(module: Any) -> None:
    name = type(module).__name__
    wanted = State.wanted
    compiles = wanted.xla or wanted.compile_mode is not None
    if wanted.bf16:  # before compiling: the compiled call runs the autocast forward
        autocast_bf16(module)
    if wanted.compile_mode is not None:
        mode = wanted.compile_mode
        _compile_in_place(module, mode=mode)
        _time_first_compiled_call(module)
        applied(COMPILE_MODE, f"torch: {name}.compile(mode={mode!r}) (torch.compile in place)")
        if wanted.xla:
            skipped(XLA, f"torch: compile_mode={mode!r} compiles the module instead")
    elif wanted.xla:
        _compile_in_place(module)
        _time_first_compiled_call(module)
        applied(XLA, f"torch: {name}.compile() (torch.compile in place)")
    if wanted.depth_first:
        if compiles:
            skipped(DEPTH_FIRST, EXCLUDED_BECAUSE)
        else:
            _depth_first_in_place(module)
            applied(DEPTH_FIRST, f"torch: depth_first({name}) in place")


def _install_torch_modules(agent: Agent, module: ModuleType) -> None:
    register = getattr(module, "register_module_forward_pre_hook", None)
    if register is None:
        raise RuntimeError("register_module_forward_pre_hook not found")

    def pre_hook(mod: Any, _args: Any) -> None:
        # The first module called with parameters is top-level: its pre-hook runs before any of
        # its children's. Parameterless ones (a loss) are passed over.
        if next(mod.parameters(), None) is None:
            return None
        handle = State.top_module_hook
        State.top_module_hook = None
        if handle is None:
            return None
        handle.remove()
        try:
            _on_top_module(mod)
        except Exception as e:
            for t in State.wanted.toggles():
                if t in _MODULE_TOGGLES:
                    skipped(t, f"on {type(mod).__name__}: {e!r}")
        return None

    State.top_module_hook = register(pre_hook)

    def remove() -> None:
        handle, State.top_module_hook = State.top_module_hook, None
        if handle is not None:
            handle.remove()

    agent.patches.on_detach("the top-module forward pre-hook", remove)


# -- threads ------------------------------------------------------------------------------------

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _set_thread_env(n: int) -> None:
    for name in THREAD_ENV:
        os.environ[name] = str(n)
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def _install_torch_threads(agent: Agent, torch: ModuleType) -> None:
    n = State.wanted.threads
    if n is None:
        return
    orig = torch.set_num_threads
    torch.set_num_threads(n)

    def set_num_threads(k: int) -> None:
        capped = min(int(k), n) if isinstance(k, int) and k > 0 else k
        if capped != k:
            applied(THREADS, f"torch: the script's set_num_threads({k}) capped at {n}")
        orig(capped)

    set_num_threads.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(torch, "set_num_threads", set_num_threads)
    applied(
        THREADS,
        f"torch: set_num_threads({n}), OMP_NUM_THREADS={n}, OMP_WAIT_POLICY=PASSIVE",
        threads=n,
    )


def _install_tf_threads(agent: Agent, tf: ModuleType) -> None:
    n = State.wanted.threads
    if n is None:
        return
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)
    applied(
        THREADS,
        f"tensorflow: set_intra_op_parallelism_threads({n}), set_inter_op_parallelism_threads"
        f"({n}), OMP_NUM_THREADS={n}",
        threads=n,
    )


# -- the data-stream check ----------------------------------------------------------------------


def _check() -> datacheck.DataCheck:
    check = State.check
    if check is None:

        def report(data: dict[str, Any]) -> None:
            agent = State.agent
            if agent is not None:
                agent.event(
                    "optimize",
                    f"data check: {data['batches']} batches, {data['repeats']} repeated",
                    {"toggle": None, "data_check": data},
                )

        check = State.check = datacheck.DataCheck(report)
    return check


def _install_check_torch(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "_BaseDataLoaderIter", None)
    if cls is None:
        raise RuntimeError("torch _BaseDataLoaderIter not found")
    agent.patches.set(cls, "__next__", datacheck.wrap_next(cls.__next__, _check()))


def _install_check_tf(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "OwnedIterator", None)
    if cls is None:
        raise RuntimeError("tf.data OwnedIterator not found")
    agent.patches.set(cls, "__next__", datacheck.wrap_next(cls.__next__, _check()))


# -- entry point --------------------------------------------------------------------------------


def _waiting(
    toggles: Sequence[Toggle], module: str, fn: Callable[[Agent, ModuleType], None]
) -> Callable[[Agent, ModuleType], None]:
    """``fn``, after which each of ``toggles`` still unapplied says what it now waits for
    (true if the run ends there) instead of the framework it waited for."""
    why = _NOTHING_YET.get(module)

    def install(agent: Agent, mod: ModuleType) -> None:
        fn(agent, mod)
        for toggle in toggles:
            said = any(t == toggle for t, _r in State.reported)  # a real skip stands
            if why is not None and not State.where.get(toggle) and not said:
                agent.hook_skipped(hook_name(toggle), why)

    return install


def add_installers(agent: Agent, installers: dict[str, Sequence[tuple[str, Installer]]]) -> None:
    """Register the requested toggles' installers (after the agent's own, so they wrap them)."""
    wanted = agent.settings.optimize
    State.agent = agent
    State.wanted = wanted
    State.where = {}
    State.reported = set()
    State.shards = {}
    State.check = None
    for problem in agent.settings.problems:
        if problem.startswith("optimize:"):
            agent.event("optimize", problem, {"toggle": None})
    for t in wanted.toggles():
        agent.hook_skipped(hook_name(t), _not_imported(t))
    for t in excluded(wanted.toggles()):
        agent.hook_skipped(hook_name(t), EXCLUDED_BECAUSE)
    if wanted.xla:
        os.environ.setdefault("TF_XLA_FLAGS", XLA_FLAGS)
    if wanted.threads is not None:
        _set_thread_env(wanted.threads)

    def add(
        name: str, toggle: Toggle, fn: Callable[[Agent, ModuleType], None], *also: Toggle
    ) -> None:
        installed = _waiting((toggle, *also), name, fn)
        installers[name] = [
            *installers.get(name, ()),
            (hook_name(toggle), guard(toggle, installed)),
        ]

    if wanted.xla:
        add("tensorflow", XLA, _install_tf_jit)
        add("keras.src.trainers.trainer", XLA, _install_keras_jit)
    if wanted.prefetch is not None:
        add("tensorflow.python.data.ops.dataset_ops", PREFETCH, _install_tf_data)
        add("torch.utils.data.dataloader", PREFETCH, _install_dataloader)
        add("keras.src.trainers.data_adapters.py_dataset_adapter", PREFETCH, _install_py_dataset)
    if wanted.threads is not None:
        add("torch", THREADS, _install_torch_threads)
        add("tensorflow", THREADS, _install_tf_threads)
    if wanted.check_data:
        installers["torch.utils.data.dataloader"] = [
            *installers.get("torch.utils.data.dataloader", ()),
            ("data-check", check_guard(_install_check_torch)),
        ]
        installers["tensorflow.python.data.ops.iterator_ops"] = [
            *installers.get("tensorflow.python.data.ops.iterator_ops", ()),
            ("data-check", check_guard(_install_check_tf)),
        ]
    if wanted.pin_memory:
        add("torch.utils.data.dataloader", PIN_MEMORY, install_pin_memory)
    module_toggles = [t for t in wanted.toggles() if t in _MODULE_TOGGLES]
    if module_toggles:
        add(
            "torch.nn.modules.module",
            module_toggles[0],
            _install_torch_modules,
            *module_toggles[1:],
        )
