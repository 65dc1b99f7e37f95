"""Rings keep per-second means and stay bounded."""

from sofa_top.recording.rings import Rings, SeriesRing


def test_per_second_means_and_bound() -> None:
    ring = SeriesRing(seconds=10)
    for i in range(1000):  # 100 s at 10 Hz
        ring.add(1000.0 + i / 10, float(i % 10))
    pts = ring.points()
    assert len(pts) == 11  # 10 completed seconds + the current one
    assert all(v == 4.5 for _, v in pts)
    assert pts[-1][0] == 1099.0


def test_none_and_nan_are_gaps() -> None:
    ring = SeriesRing()
    ring.add(1.0, None)
    ring.add(2.0, float("nan"))
    ring.add(3.0, 5.0)
    assert ring.points() == ((1.0, None), (2.0, None), (3.0, 5.0))


def test_rings_skip_per_process_series_and_cap_count() -> None:
    rings = Rings(max_series=2)
    rings.add("proc.1.cpu", 1.0, 1.0)
    rings.add("a", 1.0, 1.0)
    rings.add("b", 1.0, 1.0)
    rings.add("c", 1.0, 1.0)
    assert set(rings.history()) == {"a", "b"}
