"""Exports: what was recorded shows up at the right time in each format, every format is
well-formed for its viewer, the event budget holds, and bad input is one clear line with no file
left under the final name."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import CTRL_C, WORKLOADS, record_until
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from procs import spawned
from synthetic_session import (
    CHILD,
    PID,
    T0,
    gpu_util,
    make_session,
    session_file,
    step_wait,
    tree_cpu,
)

from sofa_top.datamodel.samples import (
    ProcessSample,
)
from sofa_top.export import FORMATS, ExportResult, export_session
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.store import SessionStore

SCHEMA = Path(__file__).parent / "data" / "speedscope-file-format-schema.json"


@pytest.fixture
def session(tmp_path: Path) -> Path:
    return session_file(tmp_path)


def _ns(ts: float) -> int:
    return round(ts * 1e9)


def _us(ts: float) -> float:
    return round(ts * 1e6, 3)


# -- reading a Perfetto trace back ------------------------------------------------------------
@dataclass
class PerfettoView:
    tracks: dict[int, Any] = field(default_factory=dict)  # uuid -> TrackDescriptor
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    slices: dict[int, list[tuple[str, int, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # uuid -> (name, begin, end, depth)
    slice_args: dict[tuple[int, int, str], dict[str, Any]] = field(default_factory=dict)
    instants: list[tuple[int, int, str, str]] = field(default_factory=list)
    # (pid, tid, thread name) -> [(ts_us, frames outermost first as (function, file, line))]
    samples: dict[tuple[int, int, str], list[tuple[int, tuple[tuple[str, str, int], ...]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    clocks: list[int] = field(default_factory=list)

    def track(self, name: str, parent_pid: int | None = None) -> int:
        procs = {u: t.process.pid for u, t in self.tracks.items() if t.HasField("process")}
        found = [
            u
            for u, t in self.tracks.items()
            if t.name == name and (parent_pid is None or procs.get(t.parent_uuid) == parent_pid)
        ]
        assert len(found) == 1, (name, found)
        return found[0]

    def counter(self, name: str, parent_pid: int | None = None) -> dict[int, float]:
        return dict(self.counters[self.track(name, parent_pid)])


def parse_perfetto(path: Path) -> PerfettoView:
    """Parse with the package's protos and check what the trace processor relies on."""
    trace = pb.Trace.FromString(path.read_bytes())
    v = PerfettoView()
    open_slices: dict[int, list[tuple[str, int]]] = defaultdict(list)
    last_ts: dict[int, int] = {}
    seqs: dict[int, dict[str, Any]] = {}
    for p in trace.packet:
        assert p.HasField("trusted_packet_sequence_id")
        kind = p.WhichOneof("data")
        if kind == "clock_snapshot":
            v.clocks = [c.clock_id for c in p.clock_snapshot.clocks]
        elif kind == "track_descriptor":
            td = p.track_descriptor
            assert td.uuid not in v.tracks, "track uuids are unique"
            if td.HasField("parent_uuid"):
                assert td.parent_uuid in v.tracks, "a parent is declared before its children"
            v.tracks[td.uuid] = td
        elif kind == "track_event":
            te = p.track_event
            assert te.track_uuid in v.tracks, "events go to declared tracks"
            assert p.timestamp >= last_ts.get(te.track_uuid, 0), "time moves forward per track"
            last_ts[te.track_uuid] = p.timestamp
            if te.type == pb.TrackEvent.TYPE_COUNTER:
                assert v.tracks[te.track_uuid].HasField("counter")
                v.counters[te.track_uuid].append((p.timestamp, te.double_counter_value))
            elif te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                open_slices[te.track_uuid].append((te.name, p.timestamp))
                v.slice_args[(te.track_uuid, p.timestamp, te.name)] = {
                    a.name: getattr(a, a.WhichOneof("value")) for a in te.debug_annotations
                }
            elif te.type == pb.TrackEvent.TYPE_SLICE_END:
                name, begin = open_slices[te.track_uuid].pop()
                assert p.timestamp >= begin
                depth = len(open_slices[te.track_uuid])
                v.slices[te.track_uuid].append((name, begin, p.timestamp, depth))
            elif te.type == pb.TrackEvent.TYPE_INSTANT:
                v.instants.append((te.track_uuid, p.timestamp, te.name, te.categories[0]))
        elif kind == "thread_descriptor":
            assert p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            td = p.thread_descriptor
            assert 0 < td.tid < 2**31 and 0 < td.pid < 2**31
            seqs[p.trusted_packet_sequence_id] = {
                "thread": (td.pid, td.tid, td.thread_name),
                "now": td.reference_timestamp_us,
                "names": {},
                "paths": {},
                "maps": {},
                "frames": {},
                "stacks": {},
            }
        elif kind == "streaming_profile_packet":
            st = seqs[p.trusted_packet_sequence_id]  # the thread descriptor came first
            for s in p.interned_data.function_names:
                st["names"][s.iid] = s.str.decode()
            for s in p.interned_data.mapping_paths:
                st["paths"][s.iid] = s.str.decode()
            for m in p.interned_data.mappings:
                st["maps"][m.iid] = st["paths"][m.path_string_ids[0]]
            for fr in p.interned_data.frames:
                st["frames"][fr.iid] = (
                    st["names"][fr.function_name_id],
                    st["maps"][fr.mapping_id],
                    fr.rel_pc,
                )
            for cs in p.interned_data.callstacks:
                st["stacks"][cs.iid] = tuple(st["frames"][f] for f in cs.frame_ids)
            sp = p.streaming_profile_packet
            assert len(sp.callstack_iid) == len(sp.timestamp_delta_us)
            for iid, delta in zip(sp.callstack_iid, sp.timestamp_delta_us, strict=True):
                assert delta >= 0, "samples never step back in time"
                st["now"] += delta
                v.samples[st["thread"]].append((st["now"], st["stacks"][iid]))
    assert all(not s for s in open_slices.values()), "every slice ends"
    return v


def test_perfetto_round_trip(session: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.pftrace"
    res = export_session(session, "perfetto", out)
    assert res.path == out and res.bytes == out.stat().st_size and res.notes == []
    v = parse_perfetto(out)
    assert v.clocks == [1, 3, 6]  # REALTIME, MONOTONIC, BOOTTIME declared equal
    procs = {
        t.process.pid: t.process.process_name for t in v.tracks.values() if t.HasField("process")
    }
    assert procs == {PID: "python (target)", CHILD: "python (DataLoader worker)"}

    cpu = v.counter("CPU (process tree) [%]", PID)
    assert cpu == {_ns(T0 + i / 10): tree_cpu(i) for i in range(100)}
    assert v.counter("CPU [%]", CHILD)[_ns(T0 + 0.5)] == 10.0
    util = v.counter("GPU 0 utilization [%]")
    assert util == {_ns(T0 + 0.5 * k + 0.01): gpu_util(k) for k in range(20)}
    assert v.tracks[v.track("RSS (process tree) [B]", PID)].counter.unit == (
        pb.CounterDescriptor.UNIT_SIZE_BYTES
    )
    frac = v.counter("input fraction (of step time)", PID)
    assert frac[_ns(T0 + 0.5 * 3 + 0.5)] == pytest.approx(0.3 / 0.5)
    tput = v.counter("throughput [steps/s]", PID)
    assert len(tput) == 20 and all(x == pytest.approx(2.0) for x in tput.values())
    read = v.counter("disk read (process tree) [B/s]", PID)
    assert read[_ns(T0 + 5.0)] == pytest.approx(10_000.0, rel=1e-6)

    steps = v.slices[v.track("training steps", PID)]
    top = [s for s in steps if s[3] == 0]
    waits = [s for s in steps if s[3] == 1]
    assert [(n, b, e) for n, b, e, _ in top] == [
        (f"step {k}", _ns(T0 + 0.5 * k), _ns(T0 + 0.5 * k + 0.5)) for k in range(20)
    ]
    assert v.slice_args[(v.track("training steps", PID), _ns(T0 + 1.5), "step 3")] == {
        "input_wait_s": 0.3,
        "steps": 1,
        "source": "torch-dataloader",
        "batch_size": 32,
    }
    assert [(n, b, e) for n, b, e, _ in waits] == [
        ("input wait", _ns(T0 + 0.5 * k), _ns(T0 + 0.5 * k + step_wait(k))) for k in range(20)
    ]

    markers = v.track("markers", PID)
    assert [(t, n, c) for u, t, n, c in v.instants if u == markers] == [
        (_ns(T0 + 2.0), "verdict: input-bound (moderate)", "verdict"),
        (_ns(T0 + 6.0), "verdict: compute-bound", "verdict"),
        (_ns(T0 + 7.0), "optimizer: prefetch on", "optimize"),
        (_ns(T0 + 9.5), "target exited (code 0)", "target-exit"),
    ]

    threads = {k[:2]: k[2] for k in v.samples}
    (main_key,) = [k for k in v.samples if k[0] == PID]
    assert main_key[1] >= 2**30 and main_key[2] == "MainThread"  # pthread id -> synthetic tid
    assert threads[(CHILD, CHILD)] == "MainThread"
    main = v.samples[main_key]
    assert len(main) == 1000
    times = [t for t, _ in main]
    assert times == sorted(times) and times[0] >= T0 * 1e6 and times[-1] <= (T0 + 10) * 1e6
    for j in range(10):  # each window's counts land inside that window
        in_window = [s for t, s in main if (T0 + j) * 1e6 <= t < (T0 + j + 1) * 1e6]
        leaves = Counter(s[-1][0] for s in in_window)
        assert leaves == {"__next__": 30, "forward": 70}
    assert main[-1][1] == (
        ("<module>", "/w/train.py", 40),
        ("train_step", "/w/train.py", 20),
        ("forward", "/w/model.py", 12),
    )
    # 1098 counter points (see below), 20 steps with their waits, 4 markers, 2000 samples.
    assert res.events == 1098 + 40 + 4 + 2000


def test_perfetto_counts_every_recorded_point(session: Path, tmp_path: Path) -> None:
    v = parse_perfetto(export_session(session, "perfetto", tmp_path / "a.pftrace").path)
    per_track = sorted(len(c) for c in v.counters.values())
    # tree cpu/rss/threads, 2 per-process CPUs, system cpu/iowait/memory: 100 points each; the
    # IO rates: 99 (a rate needs two readings); GPU util/memory/power, input fraction and the
    # derived throughput: one per GPU sample or step (20).
    assert per_track == [20] * 5 + [99] * 2 + [100] * 8
    assert sum(per_track) == 1098


# -- Chrome JSON ------------------------------------------------------------------------------
REQUIRED = {
    "X": {"name", "ts", "dur", "pid", "tid"},
    "C": {"name", "ts", "pid", "args"},
    "i": {"name", "ts", "pid", "tid", "s"},
    "M": {"name", "pid", "args"},
}
METADATA = {
    "process_name",
    "process_labels",
    "process_sort_index",
    "thread_name",
    "thread_sort_index",
}


def check_chrome(text: str) -> list[dict[str, Any]]:
    """Check the Trace Event Format rules the viewers rely on; returns the events."""
    events = json.loads(text)["traceEvents"]
    assert isinstance(events, list) and events
    last: dict[tuple[Any, ...], float] = {}
    for e in events:
        ph = e["ph"]
        assert ph in REQUIRED, e
        assert REQUIRED[ph] <= e.keys(), e
        assert isinstance(e["pid"], int) and 0 < e["pid"] < 2**31
        if "tid" in e:
            assert isinstance(e["tid"], int) and 0 < e["tid"] < 2**31
        if ph == "M":
            assert e["name"] in METADATA
            continue
        assert isinstance(e["ts"], int | float) and math.isfinite(e["ts"])
        if ph == "C":
            assert e["args"] and all(isinstance(x, int | float) for x in e["args"].values())
            track: tuple[Any, ...] = ("C", e["pid"], e["name"])
        else:
            track = (e["pid"], e["tid"])
        assert e["ts"] >= last.get(track, -math.inf), f"ts goes back on {track}"
        last[track] = e["ts"]
        if ph == "X":
            assert e["dur"] >= 0
        if ph == "i":
            assert e["s"] in ("g", "p", "t")
    # Complete events nest: no partial overlaps, checked exactly. A float64 holds Unix-time
    # microseconds only to 0.25 us, so the slices are read back as decimals for this.
    exact = [e for e in json.loads(text, parse_float=Decimal)["traceEvents"] if e["ph"] == "X"]
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in exact:
        by_thread[(e["pid"], e["tid"])].append(e)
    for slices in by_thread.values():
        stack: list[Decimal] = []
        for e in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1], f"{e['name']} overlaps its parent"
            stack.append(end)
    return events


def test_chrome_round_trip(session: Path, tmp_path: Path) -> None:
    res = export_session(session, "chrome", tmp_path / "run.json")
    doc = json.loads(res.path.read_text())
    events = check_chrome(res.path.read_text())
    assert res.events == len(events) and res.notes == []
    assert doc["otherData"]["target"]["pid"] == PID
    meta = {(e["name"], e["pid"], e.get("tid")): e["args"] for e in events if e["ph"] == "M"}
    assert meta[("process_name", PID, PID)] == {"name": "python (target)"}
    assert meta[("process_name", CHILD, CHILD)] == {"name": "python (DataLoader worker)"}
    thread_names = {(p, t): a["name"] for (n, p, t), a in meta.items() if n == "thread_name"}
    main_tid = next(t for (p, t), n in thread_names.items() if p == PID and n == "MainThread")
    assert main_tid >= 2**30 and thread_names[(CHILD, CHILD)] == "MainThread"

    def counter(name: str, pid: int) -> dict[float, float]:
        return {
            e["ts"]: next(iter(e["args"].values()))
            for e in events
            if e["ph"] == "C" and e["name"] == name and e["pid"] == pid
        }

    assert counter("CPU (process tree)", PID) == {_us(T0 + i / 10): tree_cpu(i) for i in range(100)}
    machine = next(p for (n, p, _), a in meta.items() if a.get("name", "").startswith("machine"))
    assert counter("GPU 0 utilization", machine) == {
        _us(T0 + 0.5 * k + 0.01): gpu_util(k) for k in range(20)
    }
    assert set(counter("throughput", PID).values()) == {2.0}

    xs = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    steps = [(e["name"], e["ts"], e["dur"]) for e in xs if e["name"] != "input wait"]
    assert steps == [(f"step {k}", _us(T0 + 0.5 * k), 500_000.0) for k in range(20)]
    waits = [(e["ts"], e["dur"]) for e in xs if e["name"] == "input wait"]
    assert waits == [(_us(T0 + 0.5 * k), _us(step_wait(k))) for k in range(20)]
    assert len({e["tid"] for e in xs}) == 1 and thread_names[(PID, xs[0]["tid"])] == (
        "training steps"
    )

    marks = [(e["ts"], e["name"]) for e in events if e["ph"] == "i"]
    assert marks == [
        (_us(T0 + 2.0), "verdict: input-bound (moderate)"),
        (_us(T0 + 6.0), "verdict: compute-bound"),
        (_us(T0 + 7.0), "optimizer: prefetch on"),
        (_us(T0 + 9.5), "target exited (code 0)"),
    ]

    flame = [e for e in events if e["ph"] == "X" and e["cat"] == "stack" and e["tid"] == main_tid]
    outer = [e for e in flame if e["name"] == "<module>"]
    assert len(outer) == 1 and outer[0]["ts"] == _us(T0) and outer[0]["dur"] == pytest.approx(1e7)
    fwd = [e for e in flame if e["name"] == "forward"]
    assert len(fwd) == 10 and sum(e["dur"] for e in fwd) == pytest.approx(7e6)
    assert fwd[0]["args"] == {"file": "/w/model.py", "line": 12}


# -- speedscope -------------------------------------------------------------------------------
def check_speedscope(doc: dict[str, Any]) -> None:
    jsonschema.Draft6Validator(json.loads(SCHEMA.read_text())).validate(doc)
    n = len(doc["shared"]["frames"])
    for p in doc["profiles"]:
        assert len(p["samples"]) == len(p["weights"])
        assert all(0 <= i < n for s in p["samples"] for i in s)
        assert p["endValue"] == pytest.approx(p["startValue"] + sum(p["weights"]))


def test_speedscope_round_trip(session: Path, tmp_path: Path) -> None:
    res = export_session(session, "speedscope", tmp_path / "run.speedscope.json")
    doc = json.loads(res.path.read_text())
    check_speedscope(doc)
    frames = doc["shared"]["frames"]
    main, worker = doc["profiles"]
    assert main["name"].endswith("/ MainThread") and "pid 4242" in main["name"]
    assert main["unit"] == "milliseconds"

    def weight_by_leaf(p: dict[str, Any]) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for s, w in zip(p["samples"], p["weights"], strict=True):
            out[frames[s[-1]]["name"]] += w
        return dict(out)

    assert weight_by_leaf(main) == pytest.approx({"__next__": 3000.0, "forward": 7000.0})
    assert weight_by_leaf(worker) == pytest.approx({"load": 6000.0, "wait": 4000.0})
    assert [frames[i]["name"] for i in main["samples"][0]] == ["<module>", "train_step", "__next__"]
    assert frames[main["samples"][0][0]] == {"name": "<module>", "file": "/w/train.py", "line": 40}
    assert doc["activeProfileIndex"] == 0  # the busiest thread (the worker idles 40 %)
    assert res.events == len(main["samples"]) + len(worker["samples"])


def test_schema_catches_a_bad_speedscope_file() -> None:
    bad = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [{"name": "f"}]},
        "profiles": [
            {
                "type": "sampled",
                "name": "x",
                "unit": "milliseconds",
                "startValue": 0,
                "endValue": 1,
                "samples": [[0]],
            }
        ],
    }  # no weights
    with pytest.raises(jsonschema.ValidationError):
        check_speedscope(bad)


# -- budget, sizes, streaming -----------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_event_budget_merges_and_says_so(session: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"small.{fmt}"
    res = export_session(session, fmt, out, max_events=600)
    assert res.events <= 600
    assert any("counters averaged" in n for n in res.notes), res.notes
    assert any("600" in n for n in res.notes)
    if fmt == "perfetto":
        v = parse_perfetto(out)
        assert any("thinned" in n for n in res.notes)
        assert sum(len(s) for s in v.samples.values()) <= 600
        cpu = v.counter("CPU (process tree) [%]", PID)
        # Averages over buckets stay within what was recorded, in time order.
        assert 2 <= len(cpu) < 100 and all(100.0 <= x <= 199.0 for x in cpu.values())
    else:
        events = check_chrome(out.read_text())
        assert len(events) == res.events


def test_speedscope_budget_merges_windows(session: Path, tmp_path: Path) -> None:
    res = export_session(session, "speedscope", tmp_path / "s.json", max_events=10)
    doc = json.loads(res.path.read_text())
    check_speedscope(doc)
    assert any("merged" in n for n in res.notes)
    main = doc["profiles"][0]
    assert sum(main["weights"]) == pytest.approx(10_000.0)  # nothing lost, only merged


def test_live_session_exports_what_was_committed(tmp_path: Path) -> None:
    path = tmp_path / "live.sofa"
    store = make_session(path, seconds=4, close=False)
    try:
        res = export_session(path, "chrome", tmp_path / "live.json")
        events = check_chrome(res.path.read_text())
        assert sum(1 for e in events if e["name"] == "CPU (process tree)") == 40
        store.write([ProcessSample(T0 + 4.0, PID, True, (), 1.0, 1, 0, 0, 1)])
        store.commit()  # the writer is not blocked by the export's read
    finally:
        store.close()


def test_session_without_stacks_or_steps(tmp_path: Path) -> None:
    path = tmp_path / "bare.sofa"
    store = SessionStore(path)
    store.set_meta(target={"pid": 7, "name": "x", "cmdline": []}, started=T0)
    store.write([ProcessSample(T0, 7, True, (), 5.0, 1, 0, 0, 1)])
    store.close(ended=T0 + 1)
    v = parse_perfetto(export_session(path, "perfetto", tmp_path / "bare.pftrace").path)
    assert v.counter("CPU (process tree) [%]", 7) == {_ns(T0): 5.0} and not v.samples
    check_chrome(export_session(path, "chrome", tmp_path / "b.json").path.read_text())
    res = export_session(path, "speedscope", tmp_path / "bare.speedscope.json")
    doc = json.loads(res.path.read_text())
    check_speedscope(doc)
    assert doc["profiles"] == []
    assert any("no Python stacks" in n for n in res.notes)


def test_default_output_is_next_to_the_session(session: Path) -> None:
    res = export_session(session, "speedscope", None)
    assert res.path == session.with_name("run.speedscope.json") and res.path.is_file()


# -- a real recording -------------------------------------------------------------------------
def test_real_recording_exports(tmp_path: Path) -> None:
    path = tmp_path / "real.sofa"
    argv = [sys.executable, str(WORKLOADS / "busy_python.py"), "600"]

    def enough(r: SessionReader) -> bool:
        # 10 CPU points and 10 stack samples of the loop (a fixed 3 s once held no stacks
        # beside a hog: py-spy had not yet delivered a window)
        cpu = [v for _, v, _ in r.points("tree.cpu") if v is not None]
        spins = sum(
            c.count for w in r.stack_windows() for c in w.stacks
            if c.frames and c.frames[-1].function == "spin_here"
        )  # fmt: skip
        return len(cpu) >= 10 and spins >= 10

    with spawned(argv, ready=b"READY") as work:
        rec = record_until(path, enough, "CPU points and stack samples", "--pid", str(work.pid))
    assert rec.returncode == CTRL_C, rec.stderr
    recorded = [v for _, v, _ in SessionReader(path).points("tree.cpu") if v is not None]
    results: dict[str, ExportResult] = {
        fmt: export_session(path, fmt, tmp_path / f"real.{fmt}") for fmt in FORMATS
    }

    v = parse_perfetto(results["perfetto"].path)
    assert any(t.process.pid == work.pid for t in v.tracks.values() if t.HasField("process"))
    cpu = v.counter("CPU (process tree) [%]", work.pid)
    assert len(cpu) >= 10  # sampled at 10 Hz
    # the counter is what was recorded, and it shows a busy loop (however loaded the machine)
    assert sorted(cpu.values()) == pytest.approx(sorted(recorded), abs=0.05)
    assert max(cpu.values()) > 10
    leaves = Counter(s[-1][0] for samples in v.samples.values() for _, s in samples if s)
    assert leaves["spin_here"] > 0.5 * sum(leaves.values())

    events = check_chrome(results["chrome"].path.read_text())
    assert any(e["ph"] == "X" and e["name"] == "spin_here" for e in events)

    doc = json.loads(results["speedscope"].path.read_text())
    check_speedscope(doc)
    names = {f["name"] for f in doc["shared"]["frames"]}
    assert "spin_here" in names
