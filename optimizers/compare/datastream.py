"""Was a configuration fed the baseline's data? Its batch prints against the baseline's, over
the batches both runs fed (the common prefix), like with like.

A faster run feeds more batches in the same time, and any stream that repeats with a period (a
small dataset under ``.repeat()``, synthetic data such as ``i % 7``, a short epoch without a
length) shows its period sooner: a repeat share taken over each run's own length flags it.
Over the common prefix:

- equal print sequences: the same stream (a deterministic pipeline);
- both first epochs printed whole, with equal multisets of prints: the same data (shuffled);
- else a change shows as repeats the baseline lacks over the same batches, within each run's
  first epoch (a later epoch repeats the first by design), or as another epoch length: every
  sample fed to two workers (an unsharded ``IterableDataset``) does both. A shuffled stream
  that differs in order only is not flagged.

Runs of an agent that sent counts but no prints are compared by those counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sofa_top.optimizers.measures import DataStream

REPEATS_CHANGED = 0.10  # more repeated batches than the baseline's by this share of batches
MIN_REPEATS = 3
EPOCH_TOLERANCE = 0.10  # per-worker partial last batches make epochs slightly longer


@dataclass(frozen=True)
class StreamCheck:
    """The outcome: how the stream differed (None: no difference seen) and over how many
    batches it was compared (0: nothing to compare)."""

    change: str | None
    compared: int


def _repeats(prints: Sequence[int]) -> int:
    seen: set[int] = set()
    n = 0
    for p in prints:
        n += p in seen
        seen.add(p)
    return n


def _first_epoch(s: DataStream, n: int) -> int:
    """How many of the first ``n`` batches are in ``s``'s first epoch."""
    return min(n, s.epoch_batches[0]) if s.epoch_batches else n


def _epoch_change(run: DataStream, base: DataStream) -> str | None:
    if run.epoch_batches and base.epoch_batches:
        n, b = run.epoch_batches[0], base.epoch_batches[0]
        if abs(n - b) > max(2, EPOCH_TOLERANCE * b):
            return f"an epoch is {n} batches (baseline: {b}): the data stream changed"
    return None


def _by_counts(run: DataStream, base: DataStream) -> str | None:
    """Without prints: the repeat shares of each run's own stream."""
    extra = run.repeat_fraction - base.repeat_fraction
    batches, repeats = run.first_epoch or (run.batches, run.repeats)
    if repeats >= MIN_REPEATS and extra >= REPEATS_CHANGED:
        where = "of the first epoch's" if run.first_epoch else "of"
        return (
            f"{repeats} {where} {batches} batches repeat an earlier one (baseline: "
            f"{base.repeat_fraction:.0%}): samples are fed more than once"
        )
    return _epoch_change(run, base)


def compare_streams(run: DataStream | None, base: DataStream | None) -> StreamCheck:
    """How ``run``'s stream differs from the baseline's over the batches both fed."""
    if run is None or base is None:
        return StreamCheck(None, 0)
    n = min(len(run.prints), len(base.prints))
    if n == 0:
        return StreamCheck(_by_counts(run, base), 0)
    if run.prints[:n] == base.prints[:n]:
        return StreamCheck(None, n)
    er, eb = _first_epoch(run, len(run.prints)), _first_epoch(base, len(base.prints))
    whole = bool(run.epoch_batches and base.epoch_batches)
    if (
        whole
        and er == run.epoch_batches[0]
        and eb == base.epoch_batches[0]
        and Counter(run.prints[:er]) == Counter(base.prints[:eb])
    ):
        return StreamCheck(None, max(er, eb))
    mine = _repeats(run.prints[: _first_epoch(run, n)])
    theirs = _repeats(base.prints[: _first_epoch(base, n)])
    if mine >= MIN_REPEATS and mine - theirs >= max(MIN_REPEATS, REPEATS_CHANGED * n):
        return StreamCheck(
            f"{mine} of the first {n} batches repeat an earlier one (baseline: {theirs} of the "
            f"same {n}): samples are fed more than once",
            n,
        )
    return StreamCheck(_epoch_change(run, base), n)
