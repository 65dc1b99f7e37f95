"""The instrumented copies' own measure of input wait (the "truth" sofa-top is judged against).

Three ways in, all ending in one line at exit: ``SELF_INPUT_FRACTION 0.4213`` (plus a
``SELF_INPUT_DETAIL`` JSON line with the raw numbers), the time the script's training loop
spent fetching its next batch over that loop's wall time.

Each loop belongs to a phase (``phase=`` of every call below: ``"train"`` by default, or
``"eval"`` / ``"inference"``), as sofa-top's ``steps.phases`` does: the phases are tallied apart,
each printed as ``SELF_PHASE <phase> <fraction>``, and ``SELF_INPUT_FRACTION`` is the phase
named by ``CORPUS_TRUTH_PHASE`` (the manifest's ``phase``), else ``train``, else the only one.
``compute_begin()`` / ``compute_end()`` around a model call add the time outside the model
(``host_fraction`` in the detail: input, postprocessing, logging), for loops whose host work is
not a fetch (a generation loop that samples each next token from the last output).

- ``iter(iterable)``: wraps the iterable a script's own loop runs over (``for batch in
  corpus_probe.iter(loader)``). Each ``next()`` is a fetch; the loop's wall time runs from the
  first ``next()`` to the last one (the one that ends the loop, or the last batch's fetch when
  the loop breaks). Every wrapped loop adds to the same totals.
- ``fetch_begin()`` / ``fetch_end()``: around a hand-written fetch (``get_batch(...)``); the
  wall time runs from the first ``fetch_begin`` (or ``mark()``, a step boundary without a
  fetch) to the last.
- ``watch_dataloaders()``: for loops the script does not write (Lightning, HF ``Trainer``):
  patches ``torch.utils.data`` iterators' ``__next__`` and keeps per-DataLoader totals; the
  one with the most batches (the training loader) is reported, the others are in the detail.
- ``watch_keras_fit()``: Keras ``fit`` pulls batches inside its compiled train function, where
  no Python timer can split fetch from compute. So this is an ablation: a callback times the
  training batches of every ``fit`` (after the first execution of each epoch, which traces),
  then, at the end of that ``fit``, the same model trains on one batch of the same input
  repeated from memory (``tf.data.Dataset.from_tensors(b).repeat()``, the compute-only rate)
  for at least 60 batches, 3 executions and ~2 s. Input wait = real time - compute-only
  time. This is what the TF input-pipeline analyzer approximates; it moves the weights a
  little further, after the script's own fit.
"""

from __future__ import annotations

import atexit
import builtins
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

_detail: dict[str, Any] = {}
_loaders: dict[tuple[int, int], dict[str, Any]] = {}
_keras: list[dict[str, Any]] = []


@dataclass
class _Phase:
    """One phase's tally: fetch time, compute time and the loop's wall time."""

    wait: float = 0.0
    wall: float = 0.0  # closed spans of wrapped iterables
    fetches: int = 0
    compute: float = 0.0
    computes: int = 0
    first_begin: float | None = None  # markers: the first and last step boundary
    last_begin: float | None = None
    open_fetch: float | None = None
    open_compute: float | None = None

    def total_wall(self) -> float:
        marked = 0.0
        if self.first_begin is not None and self.last_begin is not None:
            marked = self.last_begin - self.first_begin
        return self.wall + marked


_phases: dict[str, _Phase] = {}


def _phase(name: str) -> _Phase:
    return _phases.setdefault(name, _Phase())


def iter(iterable: Iterable[Any], phase: str = "train") -> Iterator[Any]:
    ph = _phase(phase)
    it = builtins.iter(iterable)
    first: float | None = None
    last = 0.0
    try:
        while True:
            t0 = time.perf_counter()
            if first is None:
                first = t0
            last = t0
            try:
                item = next(it)
            except StopIteration:
                return
            ph.wait += time.perf_counter() - t0
            ph.fetches += 1
            yield item
    finally:
        if first is not None:
            ph.wall += last - first


def mark(phase: str = "train") -> float:
    """A step boundary of a hand-written loop: extends the measured wall time to now."""
    ph = _phase(phase)
    t = time.perf_counter()
    if ph.first_begin is None:
        ph.first_begin = t
    ph.last_begin = t
    return t


def fetch_begin(phase: str = "train") -> None:
    _phase(phase).open_fetch = mark(phase)


def fetch_end(phase: str = "train") -> None:
    ph = _phase(phase)
    if ph.open_fetch is not None:
        ph.wait += time.perf_counter() - ph.open_fetch
        ph.fetches += 1
        ph.open_fetch = None


def compute_begin(phase: str = "train") -> None:
    """The model call starts (also a step boundary when nothing else marks one)."""
    ph = _phase(phase)
    t = time.perf_counter()
    if ph.first_begin is None:
        ph.first_begin = t
    ph.open_compute = t


def compute_end(phase: str = "train") -> None:
    ph = _phase(phase)
    if ph.open_compute is not None:
        t = time.perf_counter()
        ph.compute += t - ph.open_compute
        ph.computes += 1
        ph.open_compute = None
        ph.last_begin = t


def watch_dataloaders() -> None:
    from torch.utils.data import dataloader

    base = dataloader._BaseDataLoaderIter
    orig_next = base.__next__

    def timed_next(self: Any) -> Any:
        # one entry per DataLoader: its dataset and sampler (an eval pass over the training
        # set has the same dataset but its own sampler)
        key = (id(getattr(self, "_dataset", self)), id(getattr(self, "_index_sampler", None)))
        st = _loaders.setdefault(
            key,
            {
                "dataset": type(getattr(self, "_dataset", self)).__name__,
                "wait": 0.0,
                "wall": 0.0,
                "fetches": 0,
            },
        )
        t0 = time.perf_counter()
        me = id(self)
        if st.get("iter") != me:  # a new pass over this loader
            st["iter"], st["first"] = me, t0
        elif st.get("last") is not None:
            st["wall"] += t0 - st["last"]
        st["last"] = t0
        try:
            out = orig_next(self)
        except StopIteration:
            raise
        st["wait"] += time.perf_counter() - t0
        st["fetches"] += 1
        return out

    base.__next__ = timed_next  # type: ignore[method-assign]


class _KerasTimer:
    """Times ``on_train_batch_end`` calls; ``batch`` is the last batch index of the execution."""

    def __init__(self) -> None:
        self.epochs: list[list[tuple[float, int]]] = []

    def callback(self) -> Any:
        import keras

        timer = self

        class Timer(keras.callbacks.Callback):  # type: ignore[misc]
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                timer.epochs.append([])

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                timer.epochs[-1].append((time.perf_counter(), int(batch)))

        return Timer()

    def measured(self) -> tuple[float, int]:
        """Seconds and batches after each epoch's first execution."""
        secs, n = 0.0, 0
        for marks in self.epochs:
            if len(marks) >= 2:
                secs += marks[-1][0] - marks[0][0]
                n += marks[-1][1] - marks[0][1]
        return secs, n


def watch_keras_fit(ablation_batches: int = 60) -> None:
    import keras
    import tensorflow as tf

    orig_fit = keras.Model.fit

    def fit(self: Any, x: Any = None, *args: Any, **kw: Any) -> Any:
        if getattr(self, "_corpus_probe_inner", False):
            return orig_fit(self, x, *args, **kw)
        timer = _KerasTimer()
        kw["callbacks"] = [*list(kw.get("callbacks") or []), timer.callback()]
        out = orig_fit(self, x, *args, **kw)
        real_s, real_n = timer.measured()
        if real_n <= 0:
            return out
        first = x[0] if isinstance(x, keras.utils.PyDataset) else next(builtins.iter(x))
        if isinstance(first, list):
            first = tuple(first)
        cached = tf.data.Dataset.from_tensors(first).repeat()
        abl = _KerasTimer()
        spe = getattr(self, "steps_per_execution", 1) or 1
        # at least 3 executions and ~2 s of batches: ~1 ms steps are noisy over 60 batches
        n = min(5000, max(ablation_batches, 3 * int(spe), int(2.0 * real_n / max(real_s, 1e-9))))
        n = -(-n // int(spe)) * int(spe)
        self._corpus_probe_inner = True
        try:
            orig_fit(
                self, cached, epochs=1, steps_per_epoch=n, verbose=0, callbacks=[abl.callback()]
            )
        finally:
            self._corpus_probe_inner = False
        comp_s, comp_n = abl.measured()
        per_real = real_s / real_n
        per_comp = comp_s / comp_n if comp_n else per_real
        _keras.append(
            {
                "batches": real_n,
                "real_s_per_batch": per_real,
                "compute_s_per_batch": per_comp,
                "input_x": type(x).__name__,
            }
        )
        return out

    keras.Model.fit = fit  # type: ignore[method-assign]


def _phase_numbers() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, ph in _phases.items():
        wall = ph.total_wall()
        out[name] = {
            "source": "iter/markers",
            "wait_s": ph.wait,
            "wall_s": wall,
            "fetches": ph.fetches,
            "fraction": ph.wait / wall if wall > 0 else None,
        }
        if ph.computes:
            out[name].update(
                compute_s=ph.compute,
                computes=ph.computes,
                host_fraction=max(0.0, 1 - ph.compute / wall) if wall > 0 else None,
            )
    if _loaders:
        best = max(_loaders.values(), key=lambda s: s["fetches"])
        out["train"] = {
            "source": "dataloaders",
            "wait_s": best["wait"],
            "wall_s": best["wall"],
            "fetches": best["fetches"],
            "fraction": best["wait"] / best["wall"] if best["wall"] > 0 else None,
        }
        _detail["loaders"] = [
            {k: v for k, v in s.items() if k in ("dataset", "wait", "wall", "fetches")}
            for s in _loaders.values()
        ]
    if _keras:
        wall = sum(k["batches"] * k["real_s_per_batch"] for k in _keras)
        wait = sum(
            k["batches"] * max(0.0, k["real_s_per_batch"] - k["compute_s_per_batch"])
            for k in _keras
        )
        out["train"] = {
            "source": "keras-ablation",
            "wait_s": wait,
            "wall_s": wall,
            "fetches": sum(k["batches"] for k in _keras),
            "fraction": wait / wall if wall > 0 else None,
        }
        _detail["fits"] = _keras
    return out


def _report() -> None:
    phases = _phase_numbers()
    want = os.environ.get("CORPUS_TRUTH_PHASE") or ("train" if "train" in phases else None)
    if want is None and len(phases) == 1:
        want = next(builtins.iter(phases))
    truth = phases.get(want or "", {})
    frac = truth.get("fraction")
    _detail.update(
        phase=want,
        source=truth.get("source"),
        wait_s=truth.get("wait_s", 0.0),
        wall_s=truth.get("wall_s", 0.0),
        fetches=truth.get("fetches", 0),
        phases=phases,
    )
    out = sys.__stdout__ or sys.stdout
    print(f"SELF_INPUT_DETAIL {json.dumps(_detail)}", file=out, flush=True)
    for name, p in phases.items():
        f = p.get("fraction")
        print(f"SELF_PHASE {name} {'nan' if f is None else f'{f:.4f}'}", file=out, flush=True)
    print(
        f"SELF_INPUT_FRACTION {frac:.4f}" if frac is not None else "SELF_INPUT_FRACTION nan",
        file=out,
        flush=True,
    )


atexit.register(_report)
