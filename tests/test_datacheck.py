"""The data-stream check: batch fingerprints, repeats and epochs, and the IterableDataset probe
that decides by behaviour whether DataLoader workers would duplicate the data (real torch
tensors and datasets, the workload shapes of tests/workloads/iterable_stream.py)."""

from __future__ import annotations

import random
import runpy
from typing import Any

import numpy as np
import torch
from conftest import WORKLOADS

from sofa_top.agent.datacheck import DataCheck, fingerprint, iterable_shards, wrap_next

# the workload's own dataset class (run as a module, not as a script)
Stream = runpy.run_path(str(WORKLOADS / "iterable_stream.py"))["Stream"]


def test_fingerprints_tell_batches_apart_and_repeat_for_the_same_batch() -> None:
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(32, 3, 16, 16, generator=g), torch.arange(32))
    b = (torch.randn(32, 3, 16, 16, generator=g), torch.arange(32))
    assert fingerprint(a) == fingerprint((a[0].clone(), a[1].clone()))
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a) != fingerprint((a[0], torch.arange(1, 33)))  # labels count too
    arr = np.arange(1000, dtype=np.float32)
    assert fingerprint({"x": arr}) == fingerprint({"x": arr.copy()})
    assert fingerprint({"x": arr}) != fingerprint({"x": arr[::-1].copy()})
    assert fingerprint([1, "a", None]) == fingerprint([1, "a", None])


def test_a_check_counts_repeats_and_epochs() -> None:
    sent: list[dict[str, Any]] = []
    check = DataCheck(sent.append)

    class It:
        def __init__(self, items: list[Any]) -> None:
            self.items = iter(items)

        def __next__(self) -> Any:
            return next(self.items)

    It.__next__ = wrap_next(It.__next__, check)  # type: ignore[method-assign]
    batches = [torch.full((4,), float(i)) for i in range(10)]
    for _epoch in range(2):
        it = It(batches)
        while True:
            try:
                next(it)
            except StopIteration:
                break
    assert (check.batches, check.repeats, check.epochs) == (20, 10, [10, 10])
    assert sent[-1]["epoch_batches"] == [10, 10] and sent[-1]["batches"] == 20
    # every print was reported once, in order: the stream itself, for compare's prefix check
    prints: list[int] = []
    for report in sent:
        assert report["prints_from"] == len(prints)
        prints += report["prints"]
    assert prints == check.prints and len(prints) == 20
    assert prints[:10] == prints[10:] == [fingerprint(b) for b in batches]


def test_the_probe_tells_sharding_from_duplication_by_behaviour() -> None:
    before = (random.getstate(), torch.get_rng_state(), np.random.get_state()[1].copy())
    shards, why = iterable_shards(Stream(256, "none", 0.0), 2)
    assert not shards and "yield the same samples" in why
    assert iterable_shards(Stream(256, "worker", 0.0), 4) == (True, "")
    # it calls get_worker_info() but only to pick its start: its first items differ, so the
    # probe lets it through (compare's data check is what catches it)
    assert iterable_shards(Stream(256, "offset", 0.0), 2)[0]
    # the workload's random streams are as they were
    after = (random.getstate(), torch.get_rng_state(), np.random.get_state()[1])
    assert before[0] == after[0] and torch.equal(before[1], after[1])
    assert (before[2] == after[2]).all()
    assert torch.utils.data.get_worker_info() is None


def test_a_dataset_sharing_one_iterator_gets_no_workers() -> None:
    class OneShot(torch.utils.data.IterableDataset[int]):
        def __init__(self) -> None:
            self.it = iter(range(100))

        def __iter__(self) -> Any:
            return self.it

    shards, why = iterable_shards(OneShot(), 2)
    assert not shards and "one shared iterator" in why


def test_a_stream_changed_on_both_sides_of_the_thresholds() -> None:
    from sofa_top.optimizers.compare.summary import data_change
    from sofa_top.optimizers.measures import DataStream

    # counts only (an agent that sends no prints)
    # the baseline: 32-batch epochs, its second epoch repeating the first by design
    base = DataStream(64, 32, (32, 32), (32, 0))
    # a faster run reads more epochs in the same time: not a change
    assert data_change(DataStream(96, 64, (32, 32, 32), (32, 0)), base) is None
    # per-worker partial last batches: an epoch a batch longer, not a change
    assert data_change(DataStream(66, 33, (33, 33), (33, 0)), base) is None
    # every sample reached two workers: the first epoch repeats itself, and is twice as long
    doubled = data_change(DataStream(64, 32, (64,), (64, 32)), base)
    assert doubled is not None and "32 of the first epoch's 64 batches" in doubled
    assert "an epoch is 64 batches (baseline: 32)" in str(
        data_change(DataStream(64, 0, (64,), (64, 0)), base)
    )
    # endless streams: repeats over the run, against the baseline's
    endless = DataStream(100, 0)
    assert data_change(DataStream(100, 2), endless) is None  # under MIN_REPEATS
    assert data_change(DataStream(100, 40), endless) is not None
    assert data_change(None, base) is None and data_change(endless, None) is None


def _stream(prints: list[int], epochs: tuple[int, ...] = ()) -> Any:
    from sofa_top.optimizers.measures import DataStream

    first = (epochs[0], 0) if epochs else None
    return DataStream(len(prints), 0, epochs, first, tuple(prints))


def test_streams_are_compared_over_the_batches_both_fed() -> None:
    """Like with like: the common prefix, never one run's own length (a faster run of a stream
    with a period shows its period sooner; issue 21 lost a 3.3x win to that)."""
    from sofa_top.optimizers.compare.datastream import compare_streams

    periodic = [i % 7 for i in range(384)]  # an ``i % 7`` stream: 377 of 384 batches repeat
    check = compare_streams(_stream(periodic), _stream(periodic[:32]))
    assert check.change is None and check.compared == 32
    # shuffled: another order of the same first epoch is the same data
    epoch = list(range(40))
    shuffled = epoch[::-1] + epoch
    check = compare_streams(_stream(shuffled, (40,)), _stream(epoch + epoch[:8], (40,)))
    assert check.change is None and check.compared == 40
    # a shuffle in progress (no whole epoch yet): another order, no repeats, is not flagged
    assert compare_streams(_stream(epoch[::-1]), _stream(epoch)).change is None
    # duplicating workers: each batch twice, over the same 32 batches the baseline has none
    doubled = [i // 2 for i in range(64)]
    check = compare_streams(_stream(doubled), _stream(list(range(32))))
    assert check.compared == 32 and check.change is not None
    assert "16 of the first 32 batches repeat an earlier one (baseline: 0 of the same 32)" in (
        check.change
    )
    # ... and a handful of repeats is not a change
    few = [*range(30), 0, 1]
    assert compare_streams(_stream(few), _stream(list(range(32)))).change is None
    # every sample in two workers, each from its own offset: a first epoch twice as long
    offset = [j for i in range(32) for j in (i, (i + 16) % 32)]
    base = list(range(32)) * 2
    check = compare_streams(_stream(offset, (64,)), _stream(base, (32, 32)))
    assert check.change is not None and "repeat an earlier one" in check.change
