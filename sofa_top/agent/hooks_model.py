"""Model-call hooks: the outermost model calls of a thread, for ``model_loop`` (stdlib only).

torch-model-call
    ``nn.Module.__call__``. A module call is frequent (one per layer), so the nested check is
    one thread-local read, and the replacement *is* torch's ``_wrapped_call_impl`` (it calls
    ``_compiled_call_impl`` or ``_call_impl`` as that does) rather than a wrapper around it:
    no frame more per call (a recursive model reaches the same depth), no call more (measured
    cheaper than torch's own; ``benchmarks/model_call.py``). Where ``__call__`` is not that
    function (another torch), it wraps whatever is there. torchvision/torchaudio transforms
    are modules too: called in a loop body they are preprocessing, and count as no model.

keras-model-call
    Keras ``Model.__call__`` (``training=True``: a training step), and the trainer's
    ``predict``/``evaluate``/``predict_on_batch``/``test_on_batch`` (inference) and
    ``train_on_batch`` (a training step whose compute is not split); ``fit`` only marks its
    calls as nested (``keras-fit`` times its steps).

tf-function-call
    ``tf.function`` calls (opaque compute: forward, backward and update in one graph); ignored
    on a thread that calls torch modules (TensorFlow preprocessing for a torch model).

keras-evaluate
    A step per evaluation batch (``evaluate``, ``fit``'s validation), from Keras' callbacks:
    the evaluation phase apart from training; its input wait is not seen (the batch is fetched
    inside the compiled test function).

The compute split of TensorFlow's eager training loops: ``GradientTape.gradient`` is a backward
span, a Keras optimizer's ``apply_gradients`` an optimizer span.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sofa_top.agent import clocks, hooks_torch, model_loop
from sofa_top.agent.core import Agent, HookSkipped
from sofa_top.agent.spans import AUTOGRAD, BACKWARD, EVAL, FORWARD, OPTIMIZER, TORCH, TRAIN

OPAQUE_KIND = 3  # spans.ComputeSpans: compute that is not split
# modules of these packages transform inputs (torchvision.transforms.v2 are nn.Modules)
_PREPROCESSING = ("torchvision.transforms", "torchaudio.transforms", "kornia.augmentation")
_KERAS_CALLS = {
    "predict": (EVAL, FORWARD),
    "evaluate": (EVAL, FORWARD),
    "predict_on_batch": (EVAL, FORWARD),
    "test_on_batch": (EVAL, FORWARD),
    "train_on_batch": (TRAIN, OPAQUE_KIND),
}


def _torch_flags(module: Any) -> int:
    """EVAL when the call cannot train (no grad, inference mode, the module in eval()),
    AUTOGRAD when autograd records it."""
    torch = sys.modules.get("torch")
    check = getattr(torch, "is_grad_enabled", None)
    grad = bool(check()) if check is not None else True
    flags = TORCH | (AUTOGRAD if grad else 0)
    return flags | EVAL if not grad or not getattr(module, "training", True) else flags


def _counted(
    agent: Agent,
    source: str,
    call: Callable[..., Any],
    flags_of: Callable[[Any, dict[str, Any]], tuple[int, int] | None],
) -> Callable[..., Any]:
    """The outermost-call path: enter, call, leave; ``flags_of(self, kwargs)`` gives (flags,
    span kind), or None for a call that is no model (a transform)."""
    tls = agent.tls
    loop = model_loop.loops(agent)[0]
    where = f"the {source} hook"
    perf = time.perf_counter

    def outer(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        t0 = perf()
        tls.depth = 1
        token = None
        try:
            kinds = flags_of(self, kwargs)
            if kinds is not None:
                token = loop.enter(self, source, kinds[1], kinds[0], args, t0)
        except Exception as e:
            agent.fail(where, e)
        try:
            return call(self, *args, **kwargs)
        finally:
            tls.depth = 0
            timer = loop.call_timer
            if timer is not None:
                try:
                    timer(self, perf() - t0)
                except Exception as e:
                    agent.fail(where, e)
            if token is not None:
                try:
                    loop.leave(token)
                except Exception as e:
                    agent.fail(where, e)

    return outer


def _plain_call(cls: type) -> bool:
    """Whether ``cls.__call__`` is torch's ``_wrapped_call_impl`` as this hook knows it."""
    fn = cls.__dict__.get("__call__")
    code = getattr(fn, "__code__", None)
    return (
        fn is not None
        and fn is cls.__dict__.get("_wrapped_call_impl")
        and code is not None
        and set(code.co_names) == {"_compiled_call_impl", "_call_impl"}
    )


def install_torch_module(agent: Agent, module: ModuleType) -> None:
    """Replace ``torch.nn.Module.__call__`` (torch.nn.modules.module)."""
    cls = getattr(module, "Module", None)
    if not isinstance(cls, type) or "__call__" not in vars(cls):
        raise HookSkipped("torch.nn.Module not found")
    orig: Callable[..., Any] = vars(cls)["__call__"]
    tls = agent.tls
    models: dict[type, bool] = {}

    def flags_of(mod: Any, _kwargs: dict[str, Any]) -> tuple[int, int] | None:
        kind = type(mod)
        is_model = models.get(kind)
        if is_model is None:
            is_model = models[kind] = not str(kind.__module__).startswith(_PREPROCESSING)
        return (_torch_flags(mod), FORWARD) if is_model else None

    if _plain_call(cls):

        def impl(self: Any, *args: Any, **kwargs: Any) -> Any:
            compiled = self._compiled_call_impl
            if compiled is not None:
                return compiled(*args, **kwargs)
            return self._call_impl(*args, **kwargs)

        outer = _counted(agent, clocks.TORCH_MODEL_CALL, impl, flags_of)

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            if tls.depth or not agent.enabled:
                compiled = self._compiled_call_impl
                if compiled is not None:
                    return compiled(*args, **kwargs)
                return self._call_impl(*args, **kwargs)
            return outer(self, args, kwargs)

    else:
        wrapped = orig
        outer = _counted(agent, clocks.TORCH_MODEL_CALL, wrapped, flags_of)

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            if tls.depth or not agent.enabled:
                return wrapped(self, *args, **kwargs)
            return outer(self, args, kwargs)

    __call__.__wrapped__ = orig  # type: ignore[attr-defined]
    __call__.__qualname__ = getattr(orig, "__qualname__", "Module.__call__")
    agent.patches.set(cls, "__call__", __call__)
    if callable(getattr(cls, "zero_grad", None)):
        hooks_torch.time_zero_grad(agent, cls)  # model.zero_grad(): optimizer work
    agent.hook_applied(clocks.TORCH_MODEL_CALL)


def _wrap_call(
    agent: Agent,
    owner: type,
    name: str,
    source: str,
    flags_of: Callable[[Any, dict[str, Any]], tuple[int, int] | None],
) -> None:
    """Patch ``owner.name`` so that its outermost call is a model call of ``source``."""
    orig: Callable[..., Any] = getattr(owner, name)
    tls = agent.tls
    outer = _counted(agent, source, orig, flags_of)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if tls.depth or not agent.enabled:
            return orig(self, *args, **kwargs)
        return outer(self, args, kwargs)

    call.__wrapped__ = orig  # type: ignore[attr-defined]
    call.__qualname__ = getattr(orig, "__qualname__", name)
    agent.patches.set(owner, name, call)


def _nesting(agent: Agent, owner: type, name: str) -> None:
    """Patch ``owner.name`` so that model calls inside it are nested (no steps of their own)."""
    orig: Callable[..., Any] = getattr(owner, name)
    tls = agent.tls

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if tls.depth or not agent.enabled:
            return orig(self, *args, **kwargs)
        tls.depth = 1
        try:
            return orig(self, *args, **kwargs)
        finally:
            tls.depth = 0

    call.__wrapped__ = orig  # type: ignore[attr-defined]
    call.__qualname__ = getattr(orig, "__qualname__", name)
    agent.patches.set(owner, name, call)


def install_keras_model(agent: Agent, module: ModuleType) -> None:
    """Wrap Keras ``Model.__call__`` (keras.src.models.model)."""
    cls = getattr(module, "Model", None)
    if not isinstance(cls, type):
        raise HookSkipped("keras Model not found")

    def flags_of(_model: Any, kwargs: dict[str, Any]) -> tuple[int, int]:
        return (TRAIN if kwargs.get("training") is True else EVAL), FORWARD

    _wrap_call(agent, cls, "__call__", clocks.KERAS_MODEL_CALL, flags_of)
    agent.hook_applied(clocks.KERAS_MODEL_CALL)


def _constant(
    kinds: tuple[int, int],
) -> Callable[[Any, dict[str, Any]], tuple[int, int] | None]:
    def flags_of(_model: Any, _kwargs: dict[str, Any]) -> tuple[int, int]:
        return kinds

    return flags_of


def install_keras_trainer(agent: Agent, module: ModuleType) -> None:
    """Wrap the Keras trainer's inference and batch calls, nest ``fit``'s (keras trainer)."""
    cls = getattr(module, "TensorFlowTrainer", None)
    if not isinstance(cls, type):
        raise HookSkipped("keras TensorFlowTrainer not found")
    for name, kinds in _KERAS_CALLS.items():
        if callable(getattr(cls, name, None)):
            _wrap_call(agent, cls, name, clocks.KERAS_MODEL_CALL, _constant(kinds))
    if callable(getattr(cls, "fit", None)):
        _nesting(agent, cls, "fit")


def install_tf_function(agent: Agent, module: ModuleType) -> None:
    """Wrap ``tf.function`` calls (tensorflow...polymorphic_function.polymorphic_function)."""
    cls = getattr(module, "Function", None)
    if not isinstance(cls, type) or "__call__" not in vars(cls):
        raise HookSkipped("tf.function's Function class not found")
    _wrap_call(agent, cls, "__call__", clocks.TF_FUNCTION_CALL, _constant((0, OPAQUE_KIND)))
    agent.hook_applied(clocks.TF_FUNCTION_CALL)


def _span(agent: Agent, owner: type, name: str, kind: int) -> None:
    """Time ``owner.name``'s outermost calls as a compute span of ``kind`` (a training one)."""
    orig: Callable[..., Any] = getattr(owner, name)
    spans = agent.spans
    depth = [0]

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if depth[0] or not agent.enabled:
            return orig(self, *args, **kwargs)
        depth[0] = 1
        start = spans.start(agent.collective_s)
        try:
            return orig(self, *args, **kwargs)
        finally:
            depth[0] = 0
            spans.end(kind, start, agent.collective_s, TRAIN)

    call.__wrapped__ = orig  # type: ignore[attr-defined]
    call.__qualname__ = getattr(orig, "__qualname__", name)
    agent.patches.set(owner, name, call)


def install_tf_tape(agent: Agent, module: ModuleType) -> None:
    """Time ``GradientTape.gradient`` as backward (tensorflow.python.eager.backprop)."""
    cls = getattr(module, "GradientTape", None)
    if isinstance(cls, type) and callable(getattr(cls, "gradient", None)):
        _span(agent, cls, "gradient", BACKWARD)


def install_keras_optimizer(agent: Agent, module: ModuleType) -> None:
    """Time a Keras optimizer's ``apply_gradients`` (keras.src.optimizers.base_optimizer)."""
    cls = getattr(module, "BaseOptimizer", None)
    if isinstance(cls, type) and callable(getattr(cls, "apply_gradients", None)):
        _span(agent, cls, "apply_gradients", OPTIMIZER)


def install_keras_test_batches(agent: Agent, module: ModuleType) -> None:
    """keras-evaluate: a step per batch of a Keras evaluation (``evaluate``, and ``fit``'s
    validation), from its callbacks' batch ends (keras.src.callbacks.callback_list). The batch
    is fetched inside the compiled test function, so the wait is not seen: the steps say the
    evaluation's phase and step times, not its input wait."""
    cls = getattr(module, "CallbackList", None)
    begin = getattr(cls, "on_test_begin", None)
    batch_end = getattr(cls, "on_test_batch_end", None)
    if not isinstance(cls, type) or begin is None or batch_end is None:
        return
    clock = agent.clock(clocks.KERAS_EVALUATE)
    clock.feeds = False  # it sees no input: the model-call clock keeps a loop it marks
    spans = agent.spans
    perf = time.perf_counter

    def on_test_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        if agent.enabled:
            clock.reset()
        return begin(self, *args, **kwargs)

    def on_test_batch_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        if agent.enabled:
            try:
                spans.flags |= EVAL
                clock.tick(perf())
            except Exception as e:
                agent.fail("the keras-evaluate hook", e)
        return batch_end(self, *args, **kwargs)

    on_test_begin.__wrapped__ = begin  # type: ignore[attr-defined]
    on_test_batch_end.__wrapped__ = batch_end  # type: ignore[attr-defined]
    agent.patches.set(cls, "on_test_begin", on_test_begin)
    agent.patches.set(cls, "on_test_batch_end", on_test_batch_end)
    agent.hook_applied(clocks.KERAS_EVALUATE)
