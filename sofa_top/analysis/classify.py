"""Classify a Python stack (frames outermost first): ``input``, ``compute``, ``python`` or ``idle``.

Rules, first match wins:

1. ``idle``: a data-pipeline *worker* (torch DataLoader worker loop, pin-memory thread, a thread
   pool's worker) whose innermost frame is a blocking wait: the pipeline has spare capacity.
2. ``input``: any frame of a data pipeline's consumer side or producer: tf.data iterators
   (``OwnedIterator.__next__``/``_next_internal``/``get_next*``, ``gen_dataset_ops``), torch
   ``torch/utils/data`` (``_BaseDataLoaderIter.__next__``/``_next_data``/``_get_data``, fetchers,
   collate, workers), Keras epoch iterators and data adapters, ``tf.py_function`` bodies. This wins
   over everything else, so a main thread blocked in ``DataLoader.__next__`` waiting for workers
   (or in ``iterator_get_next`` waiting for tf.data's threads) is ``input``, not idle.
   A stack writing a result out (PIL's ``Image.save``, imageio's writers: encoding, not
   decoding) is ``python``: the host's work after the model, not its input.
   So is a Keras ``predict``/``evaluate`` call building its data adapter and iterator (once
   per call, for the arrays it was given): the call's overhead, not the loop's input.
3. ``python`` while importing (a frame of ``<frozen importlib...>``): module bodies of a framework
   being imported are not compute.
4. ``compute``: any frame of framework execution: torch ``nn`` modules/functional, autograd
   (``_engine_run_backward``), ``torch/optim``, ``Tensor.backward``, dynamo/inductor,
   ``torch/distributed``; TensorFlow eager execution (``eager/execute.py`` ``quick_execute``,
   ``polymorphic_function``, ``backprop``), op wrappers under ``tensorflow/python/ops`` and
   ``framework``; Keras ``train_step``/``test_step``/``predict_step``/layer and optimizer calls.
   With the *model-call context* (the thread calls a model: some of its stacks are inside a
   model call), framework ops called outside any model call and outside the training ops
   (backward, optimizer, collectives) are ``input``: a ``tf.image.resize`` in the loop body,
   ``torch`` ops in a collate function are preprocessing, not the model's compute.
5. ``idle``: innermost frame is a known blocking call (``threading`` waits/joins, ``queue`` get,
   ``selectors`` select, ``socket``/``ssl`` receives, ``multiprocessing`` connection waits,
   ``subprocess`` waits).
6. ``python``: anything else.

How idle is detected, and why: py-spy's raw output does not say whether a sample was idle, even
with ``--idle``. Running *without* ``--idle`` drops OS-idle samples, and measured on
``tests/workloads/tf_input_bound.py`` that loses the very samples that matter: the main thread
waits (futex) inside ``iterator_get_next`` while tf.data's C++ threads run the map, so py-spy kept
only 5 of ~60 samples per 3 s; the rest vanished instead of counting as ``input``. So the collector
runs py-spy *with* ``--idle`` and detects idle in two ways. By frames (rule 5), which alone misses
builtins: ``time.sleep`` has no Python frame of its own, so a sleeping thread shows only its
caller's line, and ``tests/workloads/sleeper.py`` looks like a busy loop to the frames. And by the
OS: the collector reads each thread's runnable time (``/proc/PID/task/TID/schedstat``: on a CPU
plus waiting for one, so a busy thread starved by other processes is not mistaken for idle) at
the window edges, and :func:`reconcile_activity` turns the ``python`` samples a thread cannot have
been running (beyond its runnable share of the window) into ``idle``. ``input`` and ``compute``
samples keep their class whatever the OS says: waiting for the pipeline is input, and a main
thread waiting for intra-op threads is compute.

How compute called from user code is told from Python, and why: a user ``forward`` that calls
``torch.mm`` (on weight tensors, without ``nn.Module``), a NumPy ``dot``, a hand-written SGD
update: py-spy sees only the user's frame, the native call has no Python frame, so rule 6 would
call it ``python`` (measured: 43% of a ``torch.mm`` loop's samples). What tells them apart is the
GIL: the interpreter holds it while it runs Python; torch, TensorFlow and NumPy release it
inside their kernels. The collector runs a second, cheap py-spy with ``--gil`` (it reads only
the GIL holder's stack, no per-thread /proc reads) alongside each window, and
:func:`reconcile_gil` turns the ``python`` samples of a thread beyond its GIL-holding share into
``compute`` (after :func:`reconcile_activity` took out those it cannot have been running at
all). py-spy's raw output has no per-sample GIL or activity flag (checked: py-spy 0.4 writes
only ``thread (TID): NAME`` and the frames), hence the share per thread and window; ``--native``
would show the kernels' frames but cannot run ``--nonblocking`` (it pauses the target at every
sample): see ``benchmarks/stack_classes.py`` for what each costs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from sofa_top.analysis.sources import ABSOLUTE_ONLY, OUTPUT_LINE, SYNC_LINE, Lines
from sofa_top.datamodel.samples import Frame, StackClass, StackCount

# (path fragment, function names or None for any function in that file/folder).
# Paths are matched against "/" + filename, so py-spy's short names (torch/nn/...) and full
# paths (/venv/lib/.../torch/nn/...) both match.
_Rule = tuple[str, frozenset[str] | None]


def _rules(*rules: tuple[str, tuple[str, ...] | None]) -> tuple[_Rule, ...]:
    return tuple((path, frozenset(names) if names is not None else None) for path, names in rules)


INPUT_RULES: tuple[_Rule, ...] = _rules(
    ("/tensorflow/python/data/", None),
    ("/tensorflow/python/ops/gen_dataset_ops.py", None),
    ("/tensorflow/python/ops/gen_experimental_dataset_ops.py", None),
    ("/tensorflow/python/ops/script_ops.py", None),  # tf.py_function bodies: nearly always a map
    ("/tensorflow/python/distribute/input_lib.py", None),
    ("/torch/utils/data/", None),
    ("/keras/src/trainers/epoch_iterator.py", None),
    ("/keras/src/trainers/data_adapters/", None),
    ("/keras/engine/data_adapter.py", None),
    ("/tf_keras/src/engine/data_adapter.py", None),
    ("/keras/src/engine/data_adapter.py", None),
    ("/datasets/arrow_dataset.py", ("__getitem__", "_getitem", "__iter__", "iter")),
    ("/webdataset/", None),
    # decoding, resizing and tokenising libraries: preprocessing wherever they run
    ("/PIL/", None),
    ("/cv2/", None),
    ("/imageio/", None),
    ("/skimage/", None),
    ("/torchvision/transforms/", None),
    ("/torchvision/io/", None),
    ("/torchaudio/transforms/", None),
    ("/tokenizers/", None),
    ("/transformers/tokenization_utils", None),
    ("/transformers/image_processing_utils", None),
    ("/transformers/feature_extraction_utils", None),
)

# The model's own call: a frame of one of these puts a stack inside a model call.
MODEL_CALL_RULES: tuple[_Rule, ...] = _rules(
    ("/torch/nn/modules/module.py", ("_call_impl", "_wrapped_call_impl")),
    ("/torch/_dynamo/eval_frame.py", None),
    ("/keras/src/layers/layer.py", ("__call__",)),
    (
        "/keras/src/backend/tensorflow/trainer.py",
        (
            "predict",
            "evaluate",
            "predict_on_batch",
            "test_on_batch",
            "train_on_batch",
            "fit",
            "train_step",
            "test_step",
            "predict_step",
        ),
    ),
    ("/tensorflow/python/eager/polymorphic_function/", None),
    ("/tensorflow/python/eager/def_function.py", None),
    ("/sofa_top/agent/hooks_model.py", None),
)

# Training and distributed work outside the model's call: compute wherever it runs.
TRAINING_RULES: tuple[_Rule, ...] = _rules(
    (
        "/torch/nn/modules/module.py",
        ("zero_grad", "parameters", "named_parameters", "_named_members", "train", "eval"),
    ),
    ("/torch/autograd/", None),
    ("/torch/optim/", None),
    ("/torch/_tensor.py", ("backward",)),
    ("/torch/_dynamo/", None),
    ("/torch/_inductor/", None),
    ("/torch/amp/", None),
    ("/torch/distributed/", None),
    ("/torch/cuda/", ("synchronize",)),
    ("/tensorflow/python/eager/backprop.py", None),
    ("/tensorflow/python/eager/imperative_grad.py", None),
    ("/tensorflow/python/eager/forwardprop.py", None),
    ("/tensorflow/python/training/", None),
    ("/keras/src/optimizers/", None),
    ("/keras/optimizers/", None),
    ("/jax/_src/", None),
)

COMPUTE_RULES: tuple[_Rule, ...] = _rules(
    ("/torch/nn/", None),
    ("/torch/autograd/", None),
    ("/torch/optim/", None),
    ("/torch/_tensor.py", ("backward",)),
    ("/torch/functional.py", None),
    ("/torch/_ops.py", None),
    ("/torch/_dynamo/", None),
    ("/torch/_inductor/", None),
    ("/torch/_functorch/", None),
    ("/torch/amp/", None),
    ("/torch/distributed/", None),
    ("/torch/cuda/", ("synchronize",)),
    ("/tensorflow/python/eager/execute.py", None),
    ("/tensorflow/python/eager/polymorphic_function/", None),
    ("/tensorflow/python/eager/def_function.py", None),
    ("/tensorflow/python/eager/function.py", None),
    ("/tensorflow/python/eager/backprop.py", None),
    ("/tensorflow/python/eager/imperative_grad.py", None),
    ("/tensorflow/python/eager/forwardprop.py", None),
    ("/tensorflow/python/ops/", None),
    ("/tensorflow/python/framework/", None),
    ("/tensorflow/python/training/", None),
    ("/tensorflow/python/keras/", None),
    ("/keras/src/optimizers/", None),
    ("/keras/optimizers/", None),
    ("/keras/src/layers/", None),
    ("/keras/src/ops/", None),
    (
        "/keras/",
        (
            "train_step",
            "test_step",
            "predict_step",
            "train_function",
            "test_function",
            "predict_function",
            "one_step_on_data",
            "one_step_on_iterator",
            "multi_step_on_iterator",
            "__call__",
            "apply_gradients",
        ),
    ),
    ("/jax/_src/", None),
)

IDLE_LEAF_RULES: tuple[_Rule, ...] = _rules(
    (
        "/threading.py",
        ("wait", "join", "_wait_for_tstate_lock", "acquire", "wait_for", "_acquire_restore"),
    ),
    ("/queue.py", ("get", "put", "join")),
    ("/selectors.py", ("select",)),
    ("/socket.py", ("accept", "recv_into", "readinto", "recv", "recvfrom")),
    ("/ssl.py", ("read", "recv", "recv_into")),
    ("/socketserver.py", ("serve_forever",)),
    (
        "/multiprocessing/connection.py",
        ("wait", "poll", "_poll", "recv", "recv_bytes", "_recv", "_recv_bytes", "accept"),
    ),
    ("/multiprocessing/queues.py", ("get", "_feed")),
    ("/multiprocessing/popen_fork.py", ("poll", "wait")),
    ("/multiprocessing/pool.py", ("wait", "get", "next", "worker")),
    ("/multiprocessing/synchronize.py", ("wait", "acquire", "__enter__")),
    ("/concurrent/futures/thread.py", ("_worker",)),
    ("/concurrent/futures/_base.py", ("result", "wait", "as_completed")),
    ("/subprocess.py", ("wait", "_wait", "_try_wait", "communicate", "_communicate")),
    ("/asyncio/base_events.py", ("_run_once",)),
    ("zmq/", ("poll", "recv", "wait")),
    ("gevent/", ("poll", "wait", "switch")),
    ("tornado/", ("poll", "start")),
)

# Host work of a loop that is not its input: logging, printing, progress bars, checkpoints
# (``analysis.host``).
HOST_PYTHON_RULES: tuple[_Rule, ...] = _rules(
    ("/logging/", None),
    ("/tqdm/", None),
    ("/rich/", None),
    ("/torch/serialization.py", ("save",)),
    ("/torch/utils/tensorboard/", None),
    ("/tensorboard/", None),
    ("/wandb/", None),
    ("/mlflow/", None),
    ("/keras/src/callbacks/", None),
    ("/keras/src/utils/progbar.py", None),
    ("/keras/src/saving/", None),
    ("/tensorflow/python/checkpoint/", None),
)

# Writing a result out (encoding an image, a video frame): the host's work after the model,
# not its input, though the same libraries decode (``analysis.host``: ``output``)
OUTPUT_RULES: tuple[_Rule, ...] = _rules(
    ("/PIL/Image.py", ("save",)),
    ("/PIL/ImageFile.py", ("_save", "_encode_tile")),
    ("/imageio/", ("imwrite", "imsave", "mimwrite", "mimsave", "volwrite", "write")),
    ("/skimage/io/", ("imsave",)),
    ("/torchvision/utils.py", ("save_image",)),
    ("/torchvision/io/", ("write_png", "write_jpeg", "write_file", "write_video")),
)

# What a Keras ``predict``/``evaluate``/``fit`` call builds before its first batch: a data
# adapter and a tf.data iterator over the arrays it was given. Inside the call, once per call:
# the call's own overhead (``python``), not the loop's input; a loop that calls ``predict`` on
# one sample pays it every step (``call_setup_share``).
CALL_SETUP_RULES: tuple[_Rule, ...] = _rules(
    ("/keras/src/trainers/data_adapters/", ("__init__", "get_data_adapter", "get_tf_dataset")),
    ("/keras/src/trainers/epoch_iterator.py", ("__init__", "_get_iterator", "reset")),
    ("/tensorflow/python/data/ops/iterator_ops.py", ("__init__", "_create_iterator")),
    ("/tensorflow/python/ops/gen_dataset_ops.py", ("make_iterator", "anonymous_iterator_v3")),
)

# Loss functions called outside the model: the step's compute, not its input
LOSS_RULES: tuple[_Rule, ...] = _rules(
    (
        "/torch/nn/functional.py",
        (
            "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy",
            "binary_cross_entropy_with_logits", "kl_div", "smooth_l1_loss", "huber_loss",
        ),
    ),
    ("/keras/src/losses/", None),
    ("/tensorflow/python/ops/nn_impl.py", None),
    ("/tensorflow/python/ops/losses/", None),
)  # fmt: skip

# Worker loops of a pipeline: their blocking waits mean "no work to do", not "waiting for input".
WORKER_LOOP_RULES: tuple[_Rule, ...] = _rules(
    ("/torch/utils/data/_utils/worker.py", ("_worker_loop",)),
    ("/torch/utils/data/_utils/pin_memory.py", ("_pin_memory_loop",)),
    ("/concurrent/futures/thread.py", ("_worker",)),
    ("/concurrent/futures/process.py", ("_process_worker",)),
    ("/multiprocessing/pool.py", ("worker",)),
)


def _short_name(function: str) -> str:
    # py-spy reports qualified names on 3.11+ ("Condition.wait"), bare names before.
    return function.rsplit(".", 1)[-1]


def _matches(frame: Frame, rules: Sequence[_Rule]) -> bool:
    path = "/" + frame.filename.replace("\\", "/")
    name: str | None = None
    for fragment, names in rules:
        if fragment in path:
            if names is None:
                return True
            if name is None:
                name = _short_name(frame.function)
            if name in names:
                return True
    return False


_INPUT, _COMPUTE, _IDLE_LEAF, _WORKER, _IMPORT, _MODEL, _TRAIN, _HOST_PY, _LOSS, _OUTPUT = (
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
)  # fmt: skip
_SETUP = 1024
_KEEP_PYTHON = _OUTPUT | _SETUP
_FLAG_RULES = (
    (_INPUT, INPUT_RULES),
    (_COMPUTE, COMPUTE_RULES),
    (_IDLE_LEAF, IDLE_LEAF_RULES),
    (_WORKER, WORKER_LOOP_RULES),
    (_MODEL, MODEL_CALL_RULES),
    (_TRAIN, TRAINING_RULES),
    (_HOST_PY, HOST_PYTHON_RULES),
    (_LOSS, LOSS_RULES),
    (_OUTPUT, OUTPUT_RULES),
    (_SETUP, CALL_SETUP_RULES),
)


@functools.lru_cache(maxsize=1 << 16)
def _flags(frame: Frame) -> int:
    """The frame's rule matches as bit flags; cached, since the same frames recur every window."""
    flags = _IMPORT if frame.filename.startswith("<frozen importlib") else 0
    for flag, rules in _FLAG_RULES:
        if _matches(frame, rules):
            flags |= flag
    return flags


def is_input_frame(frame: Frame) -> bool:
    """True for a frame of a data pipeline (tf.data, torch DataLoader, Keras adapters...)."""
    return bool(_flags(frame) & _INPUT)


def is_worker_loop_frame(frame: Frame) -> bool:
    """True for the main loop of a pipeline worker (DataLoader worker, pin-memory, pool worker)."""
    return bool(_flags(frame) & _WORKER)


def in_model_call(frames: Sequence[Frame]) -> bool:
    """Whether a stack is inside a model call (the model's own compute)."""
    return bool(_seen(tuple(frames)) & _MODEL)


def writes_output(function: str, filename: str) -> bool:
    """Whether a function writes a result out (an image encoder: ``OUTPUT_RULES``)."""
    return bool(_flags(Frame(function, filename, 0)) & _OUTPUT)


def is_call_setup(frames: Sequence[Frame]) -> bool:
    """Whether a stack is a model call's own setup (a Keras ``predict`` building its data
    adapter and iterator for the arrays it was given)."""
    seen = _seen(tuple(frames))
    return bool(seen & _SETUP and seen & _MODEL)


def is_host_python(frames: Sequence[Frame]) -> bool:
    """Whether a stack logs, prints progress or saves a checkpoint (``analysis.host``)."""
    return bool(_seen(tuple(frames)) & _HOST_PY)


def writes_result(frames: Sequence[Frame]) -> bool:
    """Whether a stack writes a result out (encodes an image: ``OUTPUT_RULES``)."""
    return bool(_seen(tuple(frames)) & _OUTPUT)


def is_importing(frames: Sequence[Frame]) -> bool:
    """Whether a stack is importing a module (a framework's lazy import in the loop)."""
    return bool(_seen(tuple(frames)) & _IMPORT)


def is_loss(frames: Sequence[Frame]) -> bool:
    """Whether a stack is in a loss function (called outside the model or in it)."""
    return bool(_seen(tuple(frames)) & _LOSS)


def model_side(frames: Sequence[Frame]) -> bool:
    """Whether a stack is the step's compute: inside a model call, or training ops (backward,
    optimizer, collectives) outside it."""
    return bool(_seen(tuple(frames)) & (_MODEL | _TRAIN))


@functools.lru_cache(maxsize=1 << 14)
def _seen(frames: tuple[Frame, ...]) -> int:
    seen = 0
    for f in frames:
        seen |= _flags(f)
    return seen


def classify_stack(frames: Sequence[Frame], model_context: bool = False) -> StackClass:
    """Classify one stack (outermost frame first); an empty stack is ``idle``.

    ``model_context``: the thread calls a model (some of its stacks are inside a model call),
    so framework ops outside the model and the training ops are preprocessing (``input``)."""
    return _classify(tuple(frames), model_context)


@functools.lru_cache(maxsize=1 << 14)
def _classify(frames: tuple[Frame, ...], model_context: bool = False) -> StackClass:
    if not frames:
        # A thread with no Python frame is native code outside Python; nothing to attribute.
        return "idle"
    seen = _seen(frames)
    leaf_idle = bool(_flags(frames[-1]) & _IDLE_LEAF)
    if leaf_idle and seen & _WORKER:
        return "idle"
    if seen & _OUTPUT and not seen & _MODEL:
        return "python"  # encoding a result: the host's work, neither input nor the model's
    if seen & _SETUP and seen & _MODEL:
        return "python"  # a Keras call building its data adapter: the call's overhead
    if seen & _INPUT:
        return "input"
    if seen & _IMPORT:
        # Importing a framework runs its module bodies (tensorflow/python/ops/...): not compute.
        return "python"
    if seen & _COMPUTE:
        if model_context and not seen & (_MODEL | _TRAIN | _LOSS):
            return "input"  # framework ops in the loop body, outside the model: preprocessing
        return "compute"
    if leaf_idle:
        return "idle"
    return "python"


def _reclass(
    stacks: Sequence[StackCount],
    klass: StackClass | Callable[[StackCount], StackClass],
    moved: int,
) -> list[StackCount]:
    """Move ``moved`` samples of ``stacks`` (largest remainders first) to ``klass`` (or to
    ``klass(stack)``, per stack)."""
    total = sum(s.count for s in stacks)
    if total <= 0 or moved <= 0:
        return list(stacks)
    moved = min(moved, total)
    shares = [s.count * moved / total for s in stacks]
    take = [math.floor(x) for x in shares]
    left = moved - sum(take)
    order = sorted(range(len(stacks)), key=lambda i: (take[i] - shares[i], -stacks[i].count))
    for i in order[:left]:
        take[i] += 1
    out: list[StackCount] = []
    for s, n in zip(stacks, take, strict=True):
        if n < s.count:
            out.append(replace(s, count=s.count - n))
        if n > 0:
            out.append(replace(s, count=n, klass=klass if isinstance(klass, str) else klass(s)))
    return out


def _pipeline_worker(stack: StackCount) -> bool:
    return any(_flags(f) & _WORKER for f in stack.frames)


def reconcile_activity(
    stacks: Sequence[StackCount], active_fraction: float | None
) -> tuple[StackCount, ...]:
    """Turn samples of one thread that the OS says it was not running into ``idle``.

    ``stacks`` are one thread's counts for one window, ``active_fraction`` its runnable time over
    the window's wall time (None when unknown: nothing changes). At most that share of the thread's
    samples can have been running Python; ``python`` samples beyond it (and those of pipeline
    workers' ``input`` stacks, whose waits for work are idle) become ``idle``, spread over the
    stacks in proportion to their counts.
    """
    if active_fraction is None or not stacks:
        return tuple(stacks)
    total = sum(s.count for s in stacks)
    running = round(max(0.0, min(1.0, active_fraction)) * total)
    movable: list[StackCount] = []
    fixed: list[StackCount] = []
    for s in stacks:
        is_movable = s.klass == "python" or (s.klass == "input" and _pipeline_worker(s))
        (movable if is_movable else fixed).append(s)
    excess = sum(s.count for s in movable) - running
    if excess <= 0:
        return tuple(stacks)
    return tuple(fixed + _reclass(movable, "idle", excess))


def reconcile_gil(
    stacks: Sequence[StackCount],
    gil_fraction: float | None,
    model_context: bool = False,
    lines: Lines = ABSOLUTE_ONLY,
) -> tuple[StackCount, ...]:
    """Turn ``python`` samples of one thread that cannot have been running Python into
    ``compute``: native code (a framework's kernel) that user code called.

    ``stacks`` are one thread's counts for one window (after :func:`reconcile_activity`),
    ``gil_fraction`` the share of the window's sampling instants at which the thread held the
    GIL (None when unknown: nothing changes). Python runs only under the GIL, so at most that
    share of the thread's samples are ``python``; the rest ran without it, inside a call.
    With the model-call context, native calls outside the model's call (NumPy, OpenCV, a
    tensor built from a sample) are preprocessing: ``input``; on a line that samples from the
    model's output or copies it out (``sources.OUTPUT_LINE``, ``SYNC_LINE``) they are the
    host's work: ``python``.
    """
    if gil_fraction is None or not stacks:
        return tuple(stacks)
    total = sum(s.count for s in stacks)
    holding = round(max(0.0, min(1.0, gil_fraction)) * total)
    # (a result being encoded, a Keras call's setup: native code, still host or call overhead)
    python = [s for s in stacks if s.klass == "python" and not _seen(s.frames) & _KEEP_PYTHON]
    excess = sum(s.count for s in python) - holding
    if excess <= 0:
        return tuple(stacks)
    others = [s for s in stacks if s.klass != "python" or _seen(s.frames) & _KEEP_PYTHON]
    if not model_context:
        return tuple(others + _reclass(python, "compute", excess))
    return tuple(others + _reclass(python, lambda s: _native_class(s, lines), excess))


def _native_class(stack: StackCount, lines: Lines) -> StackClass:
    if model_side(stack.frames):
        return "compute"
    leaf = stack.frames[-1] if stack.frames else None
    line = lines.line(leaf.filename, leaf.line) if leaf is not None else ""
    if OUTPUT_LINE.search(line) or SYNC_LINE.search(line):
        return "python"  # sampling from the output, copying it out: host work, not input
    return "input"


def in_model_context(stack: StackCount, lines: Lines = ABSOLUTE_ONLY) -> StackCount:
    """``stack`` as classified in its thread's model-call context: for a window sampled before
    the thread's first model call was seen (its warm-up batches, or a model call too short for
    a slow sampler to catch yet), framework ops and native calls outside the model are input."""
    if stack.klass != "compute":
        return stack
    by_frames = _classify(stack.frames) == "compute"  # else native work the GIL showed
    klass = _classify(stack.frames, True) if by_frames else _native_class(stack, lines)
    return stack if klass == "compute" else replace(stack, klass=klass)
