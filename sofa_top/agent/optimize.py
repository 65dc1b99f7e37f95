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
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sofa_top.agent.toggles import XLA_FLAGS, OptimizeSpec, PrefetchOptions, Toggle, hook_name

if TYPE_CHECKING:
    from sofa_top.agent.core import Agent, Installer

_WAITING = "requested, but the workload never imported tensorflow or torch"


def default_workers() -> int:
    """DataLoader workers: the cores this process may use, less one for the loop, at least 2."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    return max(2, cores - 1)


class _State:
    """What the installers share; one process has one agent."""

    agent: Agent | None = None
    wanted: OptimizeSpec = OptimizeSpec()
    where: dict[str, list[str]] = {}
    top_module_hook: Any = None
    reported: set[tuple[str, str]] = set()  # (toggle, reason) skips already reported


def _applied(toggle: Toggle, where: str, **data: Any) -> None:
    """Report that ``toggle`` changed something (``where``), once per distinct place."""
    agent = _State.agent
    places = _State.where.setdefault(toggle, [])
    if agent is None or where in places:
        return
    places.append(where)
    agent.hook_applied(hook_name(toggle))
    agent.event(
        "optimize",
        f"{toggle}: {where}",
        {"toggle": toggle, "applied": True, "where": where, "reason": None, **data},
    )


def _skipped(toggle: Toggle, reason: str) -> None:
    agent = _State.agent
    if agent is None or _State.where.get(toggle) or (toggle, reason) in _State.reported:
        return  # applied somewhere already (a miss elsewhere does not undo it), or said
    _State.reported.add((toggle, reason))
    agent.hook_skipped(hook_name(toggle), reason)
    agent.event(
        "optimize",
        f"{toggle} not applied: {reason}",
        {"toggle": toggle, "applied": False, "where": None, "reason": reason},
    )


def _guard(toggle: Toggle, fn: Callable[[Agent, ModuleType], None]) -> Installer:
    def install(agent: Agent, module: ModuleType) -> None:
        try:
            fn(agent, module)
        except Exception as e:  # never fail the workload for an optimization
            _skipped(toggle, f"install failed: {e!r}")

    return install


# -- TensorFlow ---------------------------------------------------------------------------------


def _install_tf_jit(agent: Agent, tf: ModuleType) -> None:
    tf.config.optimizer.set_jit("autoclustering")
    flags = os.environ.get("TF_XLA_FLAGS", "")
    _applied("xla", f"tensorflow: auto-clustering (TF_XLA_FLAGS={flags!r}, set_jit)")


def _install_keras_jit(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "Trainer", None)
    if cls is None or not hasattr(cls, "compile"):
        raise RuntimeError("keras Trainer.compile not found")
    orig = cls.compile

    def compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("jit_compile", "auto") in ("auto", None):
            kwargs["jit_compile"] = True
        out = orig(self, *args, **kwargs)
        _applied("xla", f"keras: {type(self).__name__}.compile(jit_compile=True)")
        return out

    compile.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(cls, "compile", compile)


def _bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import inspect

    return inspect.signature(fn).bind(*args, **kwargs)


def _install_tf_data(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "DatasetV2", None)
    if cls is None:
        raise RuntimeError("tf.data DatasetV2 not found")
    opts = _State.wanted.prefetch or PrefetchOptions()
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
                b = _bind(orig, (self, *args), kwargs)
                a = b.arguments
                if raise_to_n(a.get("num_parallel_calls")) and not a.get("synchronous"):
                    a["num_parallel_calls"] = autotune if n is None else n
                    if nondet and a.get("deterministic") is None:
                        a["deterministic"] = False
                    calls = "AUTOTUNE" if n is None else str(n)
                    _applied("prefetch", f"tf.data: {name}(num_parallel_calls={calls})", **extra)
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

            if context.executing_eagerly():
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
                    _applied(
                        "prefetch",
                        f"tf.data: .prefetch(AUTOTUNE) appended at iteration{pool}",
                        **extra,
                    )
                elif n is not None:
                    ds = self.with_options(o)
                    _applied(
                        "prefetch", f"tf.data: private_threadpool_size={n} at iteration", **extra
                    )
        except Exception as e:
            ds = self
            _skipped("prefetch", f"appending prefetch failed: {e!r}")
        return orig_iter(ds)

    __iter__.__wrapped__ = orig_iter  # type: ignore[attr-defined]
    agent.patches.set(cls, "__iter__", __iter__)


# -- PyTorch ------------------------------------------------------------------------------------


def _install_dataloader(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "DataLoader", None)
    if cls is None:
        raise RuntimeError("torch DataLoader not found")
    opts = _State.wanted.prefetch or PrefetchOptions()
    n = opts.parallelism
    workers = n or opts.workers or default_workers()
    extra = {} if n is None else {"parallelism": n}
    orig = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            b = _bind(orig, (self, *args), kwargs)
            a = b.arguments
            current = a.get("num_workers") or 0
            # without parallelism only a loader with no workers is changed
            if (n is None and not current) or (
                n is not None and isinstance(current, int) and current < n
            ):
                import torch

                a["num_workers"] = workers
                a["persistent_workers"] = True
                pf = a.get("prefetch_factor") or opts.prefetch_factor or 4
                a["prefetch_factor"] = pf
                pin = bool(torch.cuda.is_available())
                if pin:
                    a["pin_memory"] = True
                args, kwargs = tuple(b.args[1:]), dict(b.kwargs)
                _applied(
                    "prefetch",
                    f"torch: DataLoader(num_workers={workers}, persistent_workers=True, "
                    f"prefetch_factor={pf}{', pin_memory=True' if pin else ''})",
                    workers=workers,
                    **extra,
                )
        except TypeError:
            pass
        orig(self, *args, **kwargs)

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(cls, "__init__", __init__)


def _install_pin_memory(agent: Agent, module: ModuleType) -> None:
    cls = getattr(module, "DataLoader", None)
    if cls is None:
        raise RuntimeError("torch DataLoader not found")
    orig = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            import torch

            if not torch.cuda.is_available():
                _skipped("pin_memory", "no CUDA device: pinned memory only speeds up GPU copies")
            else:
                b = _bind(orig, (self, *args), kwargs)
                if not b.arguments.get("pin_memory"):
                    b.arguments["pin_memory"] = True
                    args, kwargs = tuple(b.args[1:]), dict(b.kwargs)
                    _applied("pin_memory", "torch: DataLoader(..., pin_memory=True)")
                _non_blocking_copies(torch)
        except TypeError:
            pass
        orig(self, *args, **kwargs)

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.__init__ = __init__


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
            _applied("pin_memory", "torch: tensor.to(cuda, non_blocking=True) for pinned batches")
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
            _applied("pin_memory", "torch: tensor.cuda(non_blocking=True) for pinned batches")
        return orig_cuda(self, *args, **kwargs)

    for fn, wrapped in ((to, orig_to), (cuda, orig_cuda)):
        fn.__wrapped__ = wrapped  # type: ignore[attr-defined]
        fn._sofa_top_non_blocking = True  # type: ignore[attr-defined]
    torch.Tensor.to = to
    torch.Tensor.cuda = cuda


def _autocast_bf16(module: Any) -> None:
    import torch

    param = next(module.parameters(), None)
    device = param.device.type if param is not None else "cpu"
    if device == "cuda" and not torch.cuda.is_bf16_supported():
        _skipped("bf16", "this GPU has no bf16 (try float16 autocast with a GradScaler)")
        return
    forward = module.forward

    def autocast_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device, dtype=torch.bfloat16):
            return forward(*args, **kwargs)

    autocast_forward.__wrapped__ = forward  # type: ignore[attr-defined]
    module.forward = autocast_forward
    _applied(
        "bf16", f"torch: {type(module).__name__}.forward under torch.autocast({device!r}, bf16)"
    )


def _load_depth_first() -> Callable[[Any], Any]:
    import importlib

    try:  # by name, not a static import: the agent imports nothing else from sofa_top
        return importlib.import_module("sofa_top.optimizers.depth_first").depth_first  # type: ignore[no-any-return]
    except ImportError:
        return _load_depth_first_by_path()


def _load_depth_first_by_path() -> Callable[[Any], Any]:
    """``depth_first`` from this copy of sofa-top's files, without ``sofa_top.optimizers``.

    The package's modules import each other and ``sofa_top.optimizers.cache`` by absolute
    name. An import of ``a.b.c`` only needs ``a.b`` in ``sys.modules`` (and a module found
    there is not imported again), so registering the package and ``cache`` under their real
    names makes those imports work without ever importing ``sofa_top.optimizers``.
    """
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "optimizers")
    package = os.path.join(folder, "depth_first")
    _exec_by_path("sofa_top.optimizers.cache", os.path.join(folder, "cache.py"))
    mod = _exec_by_path(
        "sofa_top.optimizers.depth_first", os.path.join(package, "__init__.py"), package
    )
    return mod.depth_first  # type: ignore[no-any-return]


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
        agent = _State.agent
        if agent is not None:
            agent.event(
                "optimize",
                f"xla: first compiled call of {name} took {dt:.2f} s",
                {"toggle": "xla", "applied": True, "where": None, "compile_s": dt},
            )
        return out

    module._compiled_call_impl = first


def _on_top_module(module: Any) -> None:
    name = type(module).__name__
    wanted = _State.wanted
    compiles = wanted.xla or wanted.compile_mode is not None
    if wanted.bf16:  # before compiling: the compiled call runs the autocast forward
        _autocast_bf16(module)
    if wanted.compile_mode is not None:
        mode = wanted.compile_mode
        module.compile(mode=mode)
        _time_first_compiled_call(module)
        _applied("compile_mode", f"torch: {name}.compile(mode={mode!r}) (torch.compile in place)")
        if wanted.xla:
            _skipped("xla", f"torch: compile_mode={mode!r} compiles the module instead")
    elif wanted.xla:
        module.compile()
        _time_first_compiled_call(module)
        _applied("xla", f"torch: {name}.compile() (torch.compile in place)")
    if wanted.depth_first:
        if compiles:
            _skipped("depth_first", "mutually exclusive with torch.compile (xla requested)")
        else:
            _load_depth_first()(module)
            _applied("depth_first", f"torch: depth_first({name}) in place")


def _install_torch_modules(agent: Agent, module: ModuleType) -> None:
    register = getattr(module, "register_module_forward_pre_hook", None)
    if register is None:
        raise RuntimeError("register_module_forward_pre_hook not found")

    def pre_hook(mod: Any, _args: Any) -> None:
        # The first module called with parameters is top-level: its pre-hook runs before any of
        # its children's. Parameterless ones (a loss) are passed over.
        if next(mod.parameters(), None) is None:
            return None
        handle = _State.top_module_hook
        _State.top_module_hook = None
        if handle is None:
            return None
        handle.remove()
        try:
            _on_top_module(mod)
        except Exception as e:
            for t in _State.wanted.toggles():
                if t not in ("prefetch", "pin_memory"):
                    _skipped(t, f"on {type(mod).__name__}: {e!r}")
        return None

    _State.top_module_hook = register(pre_hook)


# -- entry point --------------------------------------------------------------------------------


def add_installers(agent: Agent, installers: dict[str, Sequence[tuple[str, Installer]]]) -> None:
    """Register the requested toggles' installers (after the agent's own, so they wrap them)."""
    wanted = agent.settings.optimize
    _State.agent = agent
    _State.wanted = wanted
    _State.where = {}
    _State.reported = set()
    for problem in agent.settings.problems:
        if problem.startswith("optimize:"):
            agent.event("optimize", problem, {"toggle": None})
    for t in wanted.toggles():
        agent.hook_skipped(hook_name(t), _WAITING)
    if (wanted.xla or wanted.compile_mode) and wanted.depth_first:
        agent.hook_skipped(
            hook_name("depth_first"), "mutually exclusive with torch.compile (xla requested)"
        )
    if wanted.xla:
        os.environ.setdefault("TF_XLA_FLAGS", XLA_FLAGS)

    def add(name: str, toggle: Toggle, fn: Callable[[Agent, ModuleType], None]) -> None:
        installers[name] = [*installers.get(name, ()), (hook_name(toggle), _guard(toggle, fn))]

    if wanted.xla:
        add("tensorflow", "xla", _install_tf_jit)
        add("keras.src.trainers.trainer", "xla", _install_keras_jit)
    if wanted.prefetch is not None:
        add("tensorflow.python.data.ops.dataset_ops", "prefetch", _install_tf_data)
        add("torch.utils.data.dataloader", "prefetch", _install_dataloader)
    if wanted.pin_memory:
        add("torch.utils.data.dataloader", "pin_memory", _install_pin_memory)
    module_toggles = [
        t for t in wanted.toggles() if t in ("xla", "depth_first", "bf16", "compile_mode")
    ]
    if module_toggles:
        add("torch.nn.modules.module", module_toggles[0], _install_torch_modules)
