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
  source line), decoding it (``batch_decode``), writing the result out (encoding an image);
- ``compute``: a loss function called outside the model (``F.cross_entropy``), a weight update
  written by hand (a line that reads ``.grad``): the model's work all the same;
- ``input``: the rest: decoding, resizing, tokenising, collating, reading and waiting for the
  next request or file (idle samples of the loop's thread between model calls are a wait for
  input), the user's own code building the next sample.

Imports are left out: in the windows a loop runs in they are nearly all its setup, just
before its first step. Source lines are read with ``linecache`` (the workload's files, on
this machine); a line that cannot be read leaves the frames to decide.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable

from sofa_top.analysis.classify import (
    in_model_call,
    is_call_setup,
    is_host_python,
    is_importing,
    is_loss,
    model_side,
    writes_result,
)
from sofa_top.analysis.sources import ABSOLUTE_ONLY, OUTPUT_LINE, SYNC_LINE, Lines
from sofa_top.datamodel.samples import Frame, StackCount

HOST_CLASSES = ("input", "python", "sync", "output", "compute")
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


def loop_frame(frames: tuple[Frame, ...]) -> tuple[str, str] | None:
    """(function, file) of the code that calls the model in a stack inside a model call: the
    last frame outside the frameworks and the standard library before the call (a stack py-spy
    read while it changed can show ``Queue.get`` calling the model: the queue is not the loop),
    else outside the frameworks (a user's script that shares a standard module's name)."""
    user = outside = None
    for f in frames:
        if in_model_call((f,)):
            return user or outside
        if not _library(f.filename):
            outside = (f.function, f.filename)
            if not _stdlib(f.filename):
                user = outside
    return None


def host_class(
    frames: tuple[Frame, ...],
    klass: str = "input",
    loops: frozenset[tuple[str, str]] = frozenset(),
    lines: Lines = ABSOLUTE_ONLY,
) -> str | None:
    """The host class of one stack of the loop's thread; None inside the step's compute.
    ``klass``: the stack's class; ``loops``: the functions that call the model; ``lines``:
    the session's source lines."""
    if not frames:
        return None  # no Python frame to tell what the thread did: left out
    leaf = frames[-1]
    text = lines.line(leaf.filename, leaf.line)
    cuda_sync = leaf.function.endswith("synchronize") and "/cuda/" in leaf.filename
    if SYNC_LINE.search(text) or cuda_sync:
        return "sync"
    if model_side(frames) or is_importing(frames):
        return None  # the step's compute; an import (mostly the loop's setup, just before it)
    if writes_result(frames) or OUTPUT_LINE.search(text):
        return "output"
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
    loops = frozenset(
        f for f in (loop_frame(s.frames) for s in stacks if in_model_call(s.frames)) if f
    )
    counts: Counter[str] = Counter()
    for s in stacks:
        klass = host_class(s.frames, s.klass, loops, lines)
        if klass is not None:
            counts[klass] += s.count
    return counts


def model_samples(stacks: Iterable[StackCount]) -> int:
    """Samples inside a model call."""
    return sum(s.count for s in stacks if in_model_call(s.frames))


def setup_samples(stacks: Iterable[StackCount]) -> int:
    """Samples inside a model call spent on its own setup (``classify.is_call_setup``)."""
    return sum(s.count for s in stacks if is_call_setup(s.frames))
