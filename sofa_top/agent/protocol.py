"""Wire format between the agent and sofa-top (stdlib only; shared by both ends).

A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8 JSON
holding one object with a string ``"type"`` field. Frame types (agent to server only):

``hello``     ``{v, pid, ppid, t, python, argv, settings, mode?, token?, refused?, rank?}`` --
              first frame of a connection; ``mode`` "attach" (absent: "launch") carries the
              attach ``token`` sofa-top gave the injected bootstrap; ``refused`` (then the last
              frame): the target already runs an agent; ``rank`` (optional): the process's place
              in a distributed job, from its environment (``rankenv.rank_from_env``: rank,
              world_size, local_rank, ...)
``info``      ``{pid, t, python, frameworks: [[name, version]], hooks_applied: [hook],
              hooks_skipped: [[hook, reason]], dropped, optimize: {},
              step_notes: [[source, note]]}`` -- ``step_notes`` (optional): how the steps of
              a source are measured, when that is not one fetch per step
``steps``     ``{pid, source, data: [step, start_us, end_us, wait_us, batch_size|null,
              wait_cpu_us|null, ...]}`` -- flat rows of ``STEP_FIELDS`` (integers; times in
              microseconds since the Unix epoch, ``end_us - start_us`` is the step time,
              ``wait_us`` the input wait, ``wait_cpu_us`` the process's CPU time during it);
              flat integer rows because encoding them is what the agent pays per step;
              ``collective_us`` (optional, one integer or null per row): the time each step
              was blocked in torch.distributed collectives (``hooks_dist``).
              Optional ``gpu: [gpu_span_us|null, gpu_busy_us|null, busy_source, ...]``: one
              row of ``GPU_STEP_FIELDS`` per step row (CUDA loops only; ``busy_source`` 0
              unknown, 1 profiler, 2 estimate); a server that predates it ignores it.
              Optional ``sched_us: [run_us|null, queue_us|null, ...]``: per step row, the loop
              thread's own time on a CPU and runnable but waiting for one during the input
              wait (its ``schedstat``; null: not read)
              Optional ``compute: [forward_us|null, backward_us|null, optimizer_us|null,
              flags, ...]``: one row of ``COMPUTE_STEP_FIELDS`` per step row, the step's
              compute spans (null: not measured) and its phase evidence (``PHASE_*`` bits;
              the agent's ``spans`` module)
``cuda``      ``{pid, t, device, device_name, bf16_supported, capability, mem_allocated,
              mem_reserved, mem_total, mem_free, alloc_retries, ooms, error,
              window: {CudaWindow's fields} | null}`` -- CUDA readings (PyTorch on a GPU)
``pipeline``  ``{pid, t, framework, note, stages: [{name, kind, parallelism, buffer,
              self_time_s, is_bottleneck}]}``
``workers``   ``{pid, t, framework, workers: [pid]}`` -- e.g. DataLoader worker processes
``event``     ``{pid, t, kind, message, data: {}}``
``bye``       ``{pid, t, dropped, error?}`` -- last frame of an interpreter exit (``atexit``);
              ``error`` (optional): the uncaught exception that ended it, as one line

Optional fields are additions: a sofa-top that does not know one ignores it.
"""

from __future__ import annotations

import json
import struct
from typing import Any

PROTOCOL_VERSION = 2
MAX_FRAME = 1 << 20  # bytes of JSON per frame; larger frames are a protocol error
HEADER = struct.Struct(">I")

FRAME_TYPES = ("hello", "info", "steps", "pipeline", "workers", "event", "bye", "cuda")
STEP_FIELDS = ("step", "start_us", "end_us", "wait_us", "batch_size", "wait_cpu_us")
GPU_STEP_FIELDS = ("gpu_span_us", "gpu_busy_us", "busy_source")
COMPUTE_STEP_FIELDS = ("forward_us", "backward_us", "optimizer_us", "flags")
# bits of a compute row's flags: training evidence, evaluation evidence (a model call that
# cannot train), a torch model call ran with autograd on, a torch model call ran at all
PHASE_TRAIN, PHASE_EVAL, PHASE_AUTOGRAD, PHASE_TORCH = 1, 2, 16, 32
BUSY_SOURCES = (None, "profiler", "estimate")  # busy_source codes 0, 1, 2


class FrameError(ValueError):
    """A frame that breaks the protocol (the peer is dropped)."""


def encode(obj: dict[str, Any]) -> bytes:
    """Serialize one frame; raises FrameError if it would exceed MAX_FRAME."""
    body = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise FrameError(f"frame of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    return HEADER.pack(len(body)) + body


def _reject_constant(name: str) -> Any:
    raise FrameError(f"non-finite number {name} in frame")


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse a frame body into its JSON object; raises FrameError on anything else."""
    try:
        obj = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as e:
        raise FrameError(f"frame is not UTF-8: {e.reason}") from None
    except json.JSONDecodeError as e:
        raise FrameError(f"frame is not JSON: {e.msg} at byte {e.pos}") from None
    except RecursionError:
        raise FrameError("frame JSON nests too deeply") from None
    if not isinstance(obj, dict):
        raise FrameError(f"frame is a JSON {type(obj).__name__}, not an object")
    if b"\\u" in body and b"\\ud" in body.lower():
        # A \udXXX escape may decode to a lone surrogate: valid JSON, but no text (SQLite,
        # the terminal and every exporter refuse it). Pairs (astral characters) pass.
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise FrameError("frame has a string with a lone surrogate (not text)") from None
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise FrameError('frame has no string "type" field')
    return obj


class FrameReader:
    """Incremental frame splitter with a bounded buffer (at most one frame plus one read)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> None:
        """Add received bytes (at most one frame plus one read are ever buffered)."""
        self._buf += data

    def next_frame(self) -> dict[str, Any] | None:
        """The next complete frame, None if more bytes are needed; raises FrameError."""
        if len(self._buf) < HEADER.size:
            return None
        (length,) = HEADER.unpack_from(self._buf)
        if length > self._max:
            raise FrameError(f"oversized frame: {length} bytes > {self._max}")
        end = HEADER.size + length
        if len(self._buf) < end:
            return None
        body = bytes(self._buf[HEADER.size : end])
        del self._buf[:end]
        return decode_body(body)

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held in the buffer."""
        return len(self._buf)
