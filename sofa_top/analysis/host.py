"""What a loop does between its model calls: the host time's split, from the stacks.

The model-call clock (the agent's ``model_loop``) measures each step's host time: the loop
thread's time outside the model call, the backward pass and the optimizer step. The stack
samples of that thread taken outside those calls say what it was:

- ``sync``: a ``.item()``, ``.cpu()``, ``.numpy()``, ``.tolist()`` or ``synchronize()`` on the
  sampled line (the device's work is waited for; read from the source line, since the call
  itself is native and has no frame);
- ``python``: logging, ``print``, progress bars, checkpoints, metrics writers, and the loop's
  own statements (Python running in the function that calls the model: its ``for``,
  its counters; the work it calls, or native work on its lines, is preparation);
- ``output``: the work on the model's output: sampling or picking from it (``multinomial``,
  ``argmax``, ``topk``, ``softmax`` on the sampled line: the call is native, so read from the
  source line), decoding it (``batch_decode``), writing the result out (encoding an image),
  and any line of the loop's function that reads what its model call returned, or what was
  computed from it (``analysis.dataflow``: a generation loop feeding its own tokens back);
- ``setup``: building the model and loading its weights outside a model call (module
  constructors, ``load_state_dict``, Keras ``load_weights``): a loop that rebuilds its model
  per item pays it every step, where building it once before the loop would not;
- ``compute``: a loss function called outside the model (``F.cross_entropy``), a weight update
  written by hand (a line that reads ``.grad``): the model's work all the same;
- ``input``: the rest, the input path (what the loop feeds the model next, from outside it):
  decoding, resizing, tokenising, collating, reading and waiting for the next request or file
  (idle samples of the loop's thread between model calls are a wait for input), the user's
  own code building the next sample.

Imports are left out: in the windows a loop runs in they are nearly all its setup, just before
its first step; so are stacks under no code of the workload (its exit, a finalizer). Source
lines are read with ``linecache`` (the workload's files, on this machine); a line that cannot
be read leaves the frames to decide.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable

from sofa_top.analysis.classify import (
    builds_model,
    in_model_call,
    is_call_setup,
    is_host_python,
    is_importing,
    is_loss,
    model_side,
    writes_result,
)
from sofa_top.analysis.dataflow import output_lines
from sofa_top.analysis.sources import ABSOLUTE_ONLY, OUTPUT_LINE, SETUP_LINE, SYNC_LINE, Lines
from sofa_top.datamodel.samples import Frame, StackCount

HOST_CLASSES = ("input", "python", "sync", "output", "compute", "setup")
_PRINT = re.compile(r"(^|[^\w.])print\(")
_GRAD = re.compile(r"\.grad\b")
_LIBRARIES = ("/torch/", "/tensorflow/", "/keras/", "/site-packages/", "/dist-packages/", "<frozen")


_STDLIB_PATH = re.compile(r"/lib/python\d+(\.\d+)?/")


def _library(filename: str) -> bool:
    """A framework's or a package's file."""
    return any(lib in "/" + filename.replace("\\", "/") for lib in _LIBRARIES)


def _stdlib(filename: str) -> bool:
    """A standard library's file (py-spy names them from their root: ``threading.py``)."""
    path = "/" + filename.replace("\\", "/")
    top = path.split("/")[1].removesuffix(".py")
    return bool(_STDLIB_PATH.search(path)) or top in sys.stdlib_module_names


def call_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The frame of the code that calls the model in a stack inside a model call: the last
    frame outside the frameworks and the standard library before the call (a stack py-spy
    read while it changed can show ``Queue.get`` calling the model: the queue is not the loop),
    else outside the frameworks (a user's script that shares a standard module's name)."""
    user = outside = None
    for f in frames:
        if in_model_call((f,)):
            return user or outside
        if not _library(f.filename):
            outside = f
            if not _stdlib(f.filename):
                user = outside
    return None


def loop_frame(frames: tuple[Frame, ...]) -> tuple[str, str] | None:
    """(function, file) of ``call_frame``: the function that calls the model."""
    f = call_frame(frames)
    return None if f is None else (f.function, f.filename)


def _in_loop(frames: tuple[Frame, ...], loops: frozenset[tuple[str, str]]) -> Frame | None:
    """The innermost frame of ``frames`` in a function that calls the model."""
    for f in reversed(frames):
        if (f.function, f.filename) in loops:
            return f
    return None


def _outside(frames: tuple[Frame, ...], loops: frozenset[tuple[str, str]]) -> bool:
    """Whether a stack runs under no code of the workload (every frame a framework's, a
    package's or the standard library's) and under no function that calls the model: the
    interpreter shutting down (``threading._shutdown``), a finalizer (torch's
    ``_del_library``), not the loop."""
    return _in_loop(frames, loops) is None and all(
        _library(f.filename) or _stdlib(f.filename) for f in frames
    )


def _user_line(frames: tuple[Frame, ...], lines: Lines) -> str:
    """The innermost workload line of ``frames`` (outside the frameworks and packages)."""
    for f in reversed(frames):
        if not _library(f.filename) and not _stdlib(f.filename):
            return lines.line(f.filename, f.line)
    return ""


def host_class(
    frames: tuple[Frame, ...],
    klass: str = "input",
    loops: frozenset[tuple[str, str]] = frozenset(),
    lines: Lines = ABSOLUTE_ONLY,
    outputs: frozenset[tuple[str, int]] = frozenset(),
) -> str | None:
    """The host class of one stack of the loop's thread; None inside the step's compute.
    ``klass``: the stack's class; ``loops``: the functions that call the model; ``lines``:
    the session's source lines; ``outputs``: the loop's lines ((file, line)) that work on the
    model's output (``dataflow.output_lines``)."""
    if not frames:
        return None  # no Python frame to tell what the thread did: left out
    if loops and _outside(frames, loops):
        return None  # under no code of the workload's: the interpreter's exit, a finalizer
    leaf = frames[-1]
    text = lines.line(leaf.filename, leaf.line)
    cuda_sync = leaf.function.endswith("synchronize") and "/cuda/" in leaf.filename
    if SYNC_LINE.search(text) or cuda_sync:
        return "sync"
    if builds_model(frames) or (
        not in_model_call(frames) and SETUP_LINE.search(_user_line(frames, lines))
    ):
        # in the function that calls the model: per step; elsewhere: before the loop
        return "setup" if not loops or _in_loop(frames, loops) is not None else None
    if model_side(frames) or is_importing(frames):
        return None  # the step's compute; an import (mostly the loop's setup, just before it)
    if writes_result(frames) or OUTPUT_LINE.search(text):
        return "output"
    at = _in_loop(frames, loops) if outputs else None
    if at is not None and (at.filename, at.line) in outputs:
        return "output"  # the loop's line reads what the model returned
    if is_host_python(frames) or _PRINT.search(text):
        return "python"
    if is_loss(frames) or _GRAD.search(text):
        return "compute"
    if klass == "python" and (leaf.function, leaf.filename) in loops:
        return "python"  # the loop's own statements, holding the GIL
    return "input"


def host_counts(stacks: Iterable[StackCount], lines: Lines = ABSOLUTE_ONLY) -> Counter[str]:
    """Samples per host class over ``stacks`` (one thread's)."""
    stacks = list(stacks)
    calls = [f for f in (call_frame(s.frames) for s in stacks if in_model_call(s.frames)) if f]
    loops = frozenset((f.function, f.filename) for f in calls)
    host = [
        f for f in (_in_loop(s.frames, loops) for s in stacks if not in_model_call(s.frames)) if f
    ]
    outputs = output_lines(
        {(f.filename, f.line) for f in calls}, {(f.filename, f.line) for f in host}, lines
    )
    counts: Counter[str] = Counter()
    for s in stacks:
        klass = host_class(s.frames, s.klass, loops, lines, outputs)
        if klass is not None:
            counts[klass] += s.count
    return counts


def model_samples(stacks: Iterable[StackCount]) -> int:
    """Samples inside a model call."""
    return sum(s.count for s in stacks if in_model_call(s.frames))


def setup_samples(stacks: Iterable[StackCount]) -> int:
    """Samples inside a model call spent on its own setup (``classify.is_call_setup``)."""
    return sum(s.count for s in stacks if is_call_setup(s.frames))
