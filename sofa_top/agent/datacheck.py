"""Does a toggle change what the model sees? Cheap fingerprints of batches and samples (stdlib
only at import; tensors are read through their own methods).

``fingerprint``
    A CRC32 of a batch's structure (types, shapes, dtypes) and of at most ``SAMPLED`` values
    taken at a stride through each of its first ``LEAVES`` tensors or arrays. Two different
    batches get the same print only if they agree at every sampled position; a repeated batch
    always does. CPU tensors are read through numpy views. Cost per batch: see
    ``benchmarks/datacheck.py`` (benchmarks/README.md has the numbers).

``IterableShards``: before the ``prefetch`` toggle gives a DataLoader over an
``IterableDataset`` workers, it runs the dataset as worker 0 and worker 1 would (their
``get_worker_info()``, and ``random``/``torch``/``numpy`` seeded as the DataLoader seeds its
workers; every RNG state is restored afterwards) for a few items each and compares their prints.
A dataset that does not shard yields the same items in both, and would feed every sample
``num_workers`` times: it gets no workers. Decided by behaviour, not by reading its source: a
dataset may call ``get_worker_info()`` and still not shard.

``DataCheck``: under ``compare`` every run (the baseline too) prints each batch the loop
fetches, keeps the first ``SEQUENCE`` prints in order and counts repeats and batches per epoch;
the agent reports them as ``optimize`` events (``data_check``, with the prints added since the
last report), and compare compares a configuration's stream with the baseline's over the
batches both fed (``optimizers.compare.datastream``), flagging one that differs
(``data-changed``) instead of reporting its speedup.
"""

from __future__ import annotations

import contextlib
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

SAMPLED = 64  # values read per tensor
LEAVES = 4  # tensors (or arrays, numbers, strings) read per batch
PROBE_ITEMS = 16  # items read per simulated worker
PROBE_BUDGET_S = 1.5  # per simulated worker: a slow source is judged on what it gave by then
PROBE_SEED = 0x5EED
TRACKED = 8192  # distinct prints remembered per run (bounded memory)
SEQUENCE = 4096  # prints kept in order (and reported): what compare compares
REPORT_AT = (8, 32, 128)  # batch counts at which a data check is reported, then every 256


def _leaves(value: Any, out: list[Any], depth: int = 0) -> None:
    if len(out) >= LEAVES or depth > 4:
        return
    if isinstance(value, dict):
        for k in sorted(value, key=str)[:LEAVES]:
            _leaves(value[k], out, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value[:LEAVES]:
            _leaves(v, out, depth + 1)
    else:
        out.append(value)


def _torch_bytes(t: Any) -> bytes:
    """A CPU tensor through numpy (a view: ~2 us); others (CUDA, bfloat16) through torch."""
    try:
        return _array_bytes(t.numpy())
    except Exception:
        flat = t.reshape(-1)
        step = max(1, int(flat.numel()) // SAMPLED)
        head = f"{tuple(t.shape)}{t.dtype}".encode()
        return head + repr(flat[::step][:SAMPLED].tolist()).encode()


def _array_bytes(a: Any) -> bytes:
    flat = a.reshape(-1)  # a view for the contiguous arrays batches nearly always are
    step = max(1, int(flat.size) // SAMPLED)
    head = f"{a.shape}{a.dtype}".encode()
    return head + bytes(flat[::step][:SAMPLED].tobytes())


def _leaf_bytes(leaf: Any) -> bytes:
    numpy = getattr(leaf, "numpy", None)
    detach = getattr(leaf, "detach", None)
    if detach is not None:  # a torch tensor
        return _torch_bytes(detach())
    if numpy is not None and not isinstance(leaf, type):  # a tf EagerTensor
        try:
            leaf = numpy()
        except Exception:
            return repr(type(leaf)).encode()
    if hasattr(leaf, "reshape") and hasattr(leaf, "tobytes"):  # a numpy array
        return _array_bytes(leaf)
    if isinstance(leaf, bytes | str | int | float | bool) or leaf is None:
        return repr(leaf).encode()
    return type(leaf).__name__.encode()


def fingerprint(batch: Any) -> int:
    """A CRC32 print of ``batch`` (see the module docstring)."""
    leaves: list[Any] = []
    _leaves(batch, leaves)
    crc = zlib.crc32(type(batch).__name__.encode())
    for leaf in leaves:
        crc = zlib.crc32(_leaf_bytes(leaf), crc)
    return crc


class DataCheck:
    """Prints of the batches one process fetched: how many repeated, and per-epoch counts."""

    def __init__(self, report: Callable[[dict[str, Any]], None]) -> None:
        self._report = report
        self.batches = 0
        self.repeats = 0
        self.epochs: list[int] = []  # batches per finished epoch (iterator exhausted)
        # (batches, repeats) when the first epoch ended: a repeat inside one epoch is a
        # duplicate, one in a later epoch is just the next epoch
        self.first_epoch: tuple[int, int] | None = None
        self._seen: set[int] = set()
        self._current: dict[int, int] = {}  # id(iterator) -> batches fetched from it
        self._next_report = REPORT_AT[0]
        self.prints: list[int] = []  # the first SEQUENCE prints, in the order fetched
        self._sent = 0  # prints already reported

    def fetched(self, it: object, batch: Any) -> None:
        """One batch from ``it``."""
        fp = fingerprint(batch)
        self.batches += 1
        if len(self.prints) < SEQUENCE:
            self.prints.append(fp)
        key = id(it)
        self._current[key] = self._current.get(key, 0) + 1
        if fp in self._seen:
            self.repeats += 1
            if self.repeats == 1:
                self.report()  # the first repeat is news: say it at once
        elif len(self._seen) < TRACKED:
            self._seen.add(fp)
        if self.batches >= self._next_report:
            self.report()
            later = [n for n in REPORT_AT if n > self.batches]
            self._next_report = later[0] if later else self.batches + 256

    def exhausted(self, it: object) -> None:
        """``it`` ran out: one epoch of its batches."""
        n = self._current.pop(id(it), 0)
        if n and self.first_epoch is None:
            self.first_epoch = (self.batches, self.repeats)
        if n and len(self.epochs) < 64:
            self.epochs.append(n)
            self.report()

    def as_json(self) -> dict[str, Any]:
        """The ``data_check`` of an ``optimize`` event: the counts so far, and the prints since
        the last report (``prints_from``: the index of the first of them)."""
        return {
            "batches": self.batches,
            "repeats": self.repeats,
            "epoch_batches": list(self.epochs),
            "first_epoch": None if self.first_epoch is None else list(self.first_epoch),
            "distinct_tracked": len(self._seen),
            "prints_from": self._sent,
            "prints": self.prints[self._sent :],
        }

    def report(self) -> None:
        """Send the counts so far."""
        data = self.as_json()
        self._sent = len(self.prints)
        self._report(data)


def wrap_next(orig: Callable[[Any], Any], check: DataCheck) -> Callable[[Any], Any]:
    """A ``__next__`` that prints every batch ``orig`` returns (and counts epochs)."""

    def __next__(self: Any) -> Any:
        try:
            value = orig(self)
        except StopIteration:
            with contextlib.suppress(Exception):  # a check must never break the loop
                check.exhausted(self)
            raise
        with contextlib.suppress(Exception):
            check.fetched(self, value)
        return value

    __next__.__wrapped__ = orig  # type: ignore[attr-defined]
    __next__.__qualname__ = getattr(orig, "__qualname__", "__next__")
    return __next__


# -- IterableDataset sharding --------------------------------------------------------------------


def _stream(dataset: Any) -> list[int]:
    """Prints of the first items ``iter(dataset)`` yields (within the probe's budget)."""
    out: list[int] = []
    deadline = time.perf_counter() + PROBE_BUDGET_S
    it = iter(dataset)
    try:
        for item in it:
            out.append(fingerprint(item))
            if len(out) >= PROBE_ITEMS or time.perf_counter() > deadline:
                break
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()  # a generator's finally blocks run now, not at some later collection
    return out


def iterable_shards(dataset: Any, workers: int) -> tuple[bool, str]:
    """(whether workers 0 and 1 of ``workers`` would yield different items, why not)."""
    import random

    import torch
    from torch.utils.data._utils import worker as worker_mod

    a, b = iter(dataset), iter(dataset)
    shared = a is b
    for it in (a, b):
        close = getattr(it, "close", None)
        if close is not None:
            close()
    if shared:
        return False, "its __iter__ returns one shared iterator: each worker would replay it"
    numpy = sys.modules.get("numpy")
    states: tuple[Any, ...] = (random.getstate(), torch.get_rng_state())
    np_state = numpy.random.get_state() if numpy is not None else None
    streams: list[list[int]] = []
    try:
        for wid in (0, 1):
            seed = PROBE_SEED + wid
            random.seed(seed)
            torch.manual_seed(seed)
            if numpy is not None:
                numpy.random.seed(worker_mod._generate_state(PROBE_SEED, wid))  # type: ignore[no-untyped-call]
            worker_mod._worker_info = worker_mod.WorkerInfo(
                id=wid, num_workers=workers, seed=seed, dataset=dataset
            )
            streams.append(_stream(dataset))
    finally:
        worker_mod._worker_info = None
        random.setstate(states[0])
        torch.set_rng_state(states[1])
        if numpy is not None and np_state is not None:
            numpy.random.set_state(np_state)
    first, second = streams
    same = set(first) & set(second)
    if same:
        return False, (
            f"workers 0 and 1 of {workers} yield the same samples ({len(same)} of the first "
            f"{min(len(first), len(second))}): it does not shard by get_worker_info()"
        )
    return True, ""
