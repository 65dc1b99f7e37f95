"""Ranks: who is a rank (environment, TF_CONFIG, the process tree), the per-rank split and the
cross-rank verdict (pure functions, each threshold on both sides), and their wire and store
formats (old frames and old session files still read)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SOFA_TOP
from procs import spawned, wait_until

from sofa_top.agent.protocol import FrameError
from sofa_top.agent.rankenv import parse_environ, rank_from_env
from sofa_top.analysis.ranks import (
    STRAGGLER_GAP,
    RankEvidence,
    cross_rank_verdict,
    owners,
    rank_roots,
    rank_stat,
    straggler_json,
)
from sofa_top.analysis.verdicts import Evidence
from sofa_top.collectors.agent_frames import convert_frame
from sofa_top.collectors.process import ROLE_RANK, ProcessCollector, zombie_exit_code
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.ranks import RankId, RankStat
from sofa_top.datamodel.samples import Event, ProcInfo, StepSample
from sofa_top.datamodel.verdict import Verdict
from sofa_top.recording.ranks_live import RankTracker
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.store import SessionStore

TORCHRUN_ENV = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}


def test_torchrun_environment_names_the_rank_and_its_node() -> None:
    found = rank_from_env(TORCHRUN_ENV, "gpu-host")
    assert found is not None
    ident = RankId.from_json(found)
    assert ident == RankId(5, 8, 1, 4, 1, "gpu-host", "10.0.0.1:29500", "torchrun")
    # two launchers on one host are two nodes
    assert ident.node == "gpu-host/1"
    assert RankId.from_json(ident.as_json()) == ident
    assert rank_from_env({"PATH": "/bin"}, "h") is None  # the torchrun launcher itself
    assert rank_from_env({"RANK": "x"}, "h") is None
    assert rank_from_env({"RANK": "-1"}, "h") is None


@pytest.mark.parametrize(
    "task, rank",
    [({"type": "chief", "index": 0}, 0), ({"type": "worker", "index": 1}, 2)],
)
def test_tf_config_names_multi_worker_ranks(task: dict[str, object], rank: int) -> None:
    config = {
        "cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]},
        "task": task,
    }
    found = rank_from_env({"TF_CONFIG": json.dumps(config)}, "h")
    assert found is not None
    ident = RankId.from_json(found)
    assert ident is not None
    assert (ident.rank, ident.world_size, ident.source, ident.master) == (
        rank,
        3,
        "tf-config",
        "h0:2222",
    )


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"cluster": {}, "task": {"type": "ps", "index": 0}}', '{"task": 1}'],
)
def test_tf_config_that_names_no_training_task_is_no_rank(text: str) -> None:
    assert rank_from_env({"TF_CONFIG": text}, "h") is None


def test_environ_parsing_survives_bad_bytes() -> None:
    env = parse_environ(b"RANK=3\0NAME=\xff\xfe\0=nokey\0NOVALUE\0")
    assert env["RANK"] == "3" and "\ufffd" in env["NAME"] and "NOVALUE" not in env


def _proc(pid: int, ppid: int, rank: RankId | None) -> ProcInfo:
    return ProcInfo(pid, ppid, "python", (), 0.0, 1.0, 1, 1, 0, 0, 0, "running", rank=rank)


R0 = RankId(0, 2, 0, 2, 0, "h")
R1 = RankId(1, 2, 1, 2, 0, "h")


def test_the_tree_groups_by_rank_and_the_launcher_is_none() -> None:
    procs = [
        _proc(10, 1, None),  # torchrun
        _proc(11, 10, R0),
        _proc(12, 10, R1),
        _proc(13, 12, R1),  # a DataLoader worker of rank 1 (its environment is its rank's)
        _proc(14, 13, R1),
    ]
    roots = rank_roots(procs)
    assert roots == {11: R0, 12: R1}
    belongs = owners({p.pid: p.ppid for p in procs}, roots)
    assert belongs == {11: 11, 12: 12, 13: 12, 14: 12}
    # a rank only its agent named (its environment was unreadable) still counts
    reported = {15: (10, RankId(2, 3, 2, 3, 0, "h"))}
    assert set(rank_roots([*procs, _proc(15, 10, None)], reported)) == {11, 12, 15}


def _steps(n: int, step_s: float, wait: float, coll: float | None, pid: int) -> list[StepSample]:
    return [
        StepSample(
            100.0 + i * step_s,
            i,
            100.0 + (i - 1) * step_s,
            step_s,
            step_s * wait,
            "torch-dataloader",
            8,
            pid,
            wait_cpu_s=0.0,
            collective_s=None if coll is None else step_s * coll,
        )
        for i in range(n)
    ]


def _rank(rank: int, wait: float, coll: float | None, step_s: float = 0.04) -> RankStat:
    ident = RankId(rank, 4, rank, 4, 0, "h")
    ev = RankEvidence(ident, 100 + rank, _steps(30, step_s, wait, coll, 100 + rank), 5.0, 0.0)
    return rank_stat(ev, Evidence(cpu_count=2))


def test_a_rank_sleeping_on_storage_is_its_own_latency_bound_verdict() -> None:
    slow = _rank(2, 0.77, 0.2)
    assert (slow.verdict and slow.verdict.kind, slow.cause) == ("input-bound", "latency")
    assert slow.input_wait_fraction == pytest.approx(0.77)
    assert slow.collective_wait_fraction == pytest.approx(0.2)
    assert slow.compute_fraction == pytest.approx(0.03)
    fast = _rank(0, 0.01, 0.95)
    assert fast.verdict is not None and fast.verdict.kind == "compute-bound"


def test_straggler_names_the_rank_its_cause_the_others_wait_and_the_cost() -> None:
    ranks = [_rank(0, 0.01, 0.96), _rank(1, 0.01, 0.96), _rank(2, 0.77, 0.2), _rank(3, 0.01, 0.96)]
    v = cross_rank_verdict(ranks)
    assert v is not None and v.kind == "straggler"
    ev = v.as_json()["evidence"]
    assert (ev["rank"], ev["verdict"], ev["cause"]) == (2, "input-bound", "latency")
    assert ev["others_collective_wait_fraction"] == pytest.approx(0.96)
    # matching the median rank's own time (0.04 * 0.04 s) the step loses the gap
    gap = 0.04 * (0.8 - 0.04)
    assert ev["gap_s"] == pytest.approx(gap, rel=1e-3)
    assert ev["steps_per_s_if_matched"] == pytest.approx(1 / (0.04 - gap), rel=1e-3)
    assert "rank 2" in v.headline and "latency" in v.headline and "96%" in v.headline
    # the straggler's own recommendations: latency wants more workers than cores
    assert v.recommendations and "I/O" in v.recommendations[0].text
    out = straggler_json(v)
    assert out is not None and out["rank"] == 2 and out["cause"] == "latency"


def test_a_straggler_leads_the_jobs_headline_and_balanced_ranks_do_not() -> None:
    from sofa_top.analysis.ranks import headline_verdict

    ranks = [_rank(0, 0.01, 0.96), _rank(1, 0.01, 0.96), _rank(2, 0.77, 0.2), _rank(3, 0.01, 0.96)]
    straggler = cross_rank_verdict(ranks)
    job = ranks[2].verdict  # any job-level verdict: the average would say input-bound, cpu
    assert straggler is not None and job is not None
    top = headline_verdict(job, straggler)
    assert top is not None and top.kind == "straggler"
    assert top.recommendations == straggler.recommendations
    assert top.as_json()["evidence"]["job_verdict"] == {"kind": job.kind, "headline": job.headline}
    balanced = cross_rank_verdict([_rank(0, 0.01, 0.1), _rank(1, 0.01, 0.1)])
    assert balanced is not None and balanced.kind == "balanced"
    assert headline_verdict(job, balanced) is job and headline_verdict(job, None) is job


@pytest.mark.parametrize(
    "gap, kind",
    [(STRAGGLER_GAP + 0.01, "straggler"), (STRAGGLER_GAP - 0.01, "balanced")],
)
def test_the_straggler_gap_threshold(gap: float, kind: str) -> None:
    # rank 1's own time exceeds the others' by ``gap`` of the step; they wait that much
    ranks = [_rank(0, 0.0, gap + 0.1), _rank(1, 0.0, 0.1), _rank(2, 0.0, gap + 0.1)]
    v = cross_rank_verdict(ranks)
    assert v is not None and v.kind == kind
    if kind == "straggler":
        assert v.as_json()["evidence"]["rank"] == 1


def test_one_rank_or_ranks_without_steps_give_no_cross_rank_verdict() -> None:
    assert cross_rank_verdict([_rank(0, 0.1, 0.0)]) is None
    idle = RankStat(rank=1, pid=5, node="h")
    assert cross_rank_verdict([_rank(0, 0.1, 0.0), idle]) is None


def test_without_collective_wait_ranks_differ_by_step_time() -> None:
    ranks = [_rank(0, 0.0, None, 0.04), _rank(1, 0.0, None, 0.04), _rank(2, 0.5, None, 0.08)]
    v = cross_rank_verdict(ranks)
    assert v is not None and v.kind == "straggler" and v.as_json()["evidence"]["rank"] == 2
    assert v.as_json()["evidence"]["collective_wait_measured"] is False
    assert v.as_json()["evidence"]["others_collective_wait_fraction"] is None


@pytest.mark.parametrize("world", [64, 512])
def test_the_cluster_verdict_stays_correct_at_scale(world: int) -> None:
    straggler = world - 3
    ranks = [
        _rank(r, 0.7, 0.15) if r == straggler else _rank(r, 0.01, 0.8 + (r % 7) / 100)
        for r in range(world)
    ]
    v = cross_rank_verdict(ranks)
    assert v is not None and v.kind == "straggler"
    assert (v.as_json()["evidence"]["rank"], v.as_json()["evidence"]["ranks"]) == (straggler, world)


def test_steps_frames_carry_collective_wait_and_old_frames_still_read() -> None:
    row = [3, 1_000_000, 1_040_000, 30_000, 8, 1_000]
    old = convert_frame({"type": "steps", "source": "torch-dataloader", "data": row}, 7)
    assert isinstance(old[0], StepSample) and old[0].collective_s is None
    frame = {"type": "steps", "source": "s", "data": row + row, "collective_us": [9_000, None]}
    new = convert_frame(frame, 7)
    assert [s.collective_s for s in new if isinstance(s, StepSample)] == [0.009, None]
    for bad in ([1], ["x", None], [-1, 0]):
        with pytest.raises(FrameError):
            convert_frame({**frame, "collective_us": bad}, 7)


def test_hello_carries_the_rank_and_bye_the_uncaught_error() -> None:
    hello = {"type": "hello", "t": 1.0, "v": 2, "ppid": 1, "argv": [], "settings": {}}
    (ev,) = convert_frame({**hello, "rank": {"rank": 1, "world_size": 2, "host": "h"}}, 9)
    assert isinstance(ev, Event) and ev.data["rank"]["node"] == "h"  # type: ignore[index]
    (plain,) = convert_frame(hello, 9)
    assert isinstance(plain, Event) and "rank" not in plain.data
    with pytest.raises(FrameError):
        convert_frame({**hello, "rank": {"rank": "one"}}, 9)
    (bye,) = convert_frame({"type": "bye", "t": 2.0, "error": "RuntimeError: boom"}, 9)
    assert isinstance(bye, Event) and bye.data["error"] == "RuntimeError: boom"


def test_steps_keep_their_collective_wait_and_v2_files_still_read(tmp_path: Path) -> None:
    path = tmp_path / "s.sofa"
    store = SessionStore(path)
    steps = [
        StepSample(2.0, 0, 1.0, 1.0, 0.1, "torch-dataloader", 8, 42, 0.0, 0.6),
        StepSample(3.0, 1, 2.0, 1.0, 0.1, "torch-dataloader", 8, 42, 0.0, None),
    ]
    store.write(steps)
    store.close(ended=3.0)
    reader = SessionReader(path)
    assert reader.steps() == steps
    reader.close()
    db = sqlite3.connect(path)  # a v2 file: before collective_s existed
    db.execute("ALTER TABLE steps DROP COLUMN collective_s")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    reader = SessionReader(path)
    assert [s.collective_s for s in reader.steps()] == [None, None]
    assert [s.wait_cpu_s for s in reader.steps()] == [0.0, 0.0]
    reader.close()


def test_a_zombie_s_exit_code_is_read_from_proc() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    try:
        stat = Path(f"/proc/{pid}/stat")
        assert wait_until(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", 10)
        assert zombie_exit_code(pid) == 3
    finally:
        os.waitpid(pid, 0)


def test_the_process_collector_names_ranks_from_their_environment(tmp_path: Path) -> None:
    # a launcher (no rank) with two rank children, one of which forks a worker (its env)
    script = tmp_path / "launcher.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "kids = []\n"
        "for r in (0, 1):\n"
        "    env = {**os.environ, 'RANK': str(r), 'WORLD_SIZE': '2', 'LOCAL_RANK': str(r),\n"
        "           'GROUP_RANK': '0', 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': '1'}\n"
        "    code = 'import os, time\\nif os.fork() == 0: time.sleep(120)\\ntime.sleep(120)'\n"
        "    kids.append(subprocess.Popen([sys.executable, '-c', code], env=env))\n"
        "time.sleep(120)\n"
    )
    with spawned([sys.executable, str(script)]) as launcher:
        collector = ProcessCollector(launcher.pid)

        def tree() -> list[ProcInfo]:
            sample = collector.tick()[0]
            return list(getattr(sample, "procs", ()))

        assert wait_until(lambda: len(tree()) >= 5, 30)
        procs = tree()
        by_role = {p.role for p in procs}
        assert {"target", f"{ROLE_RANK} 0", f"{ROLE_RANK} 1"} <= by_role
        ranks = {p.rank.rank for p in procs if p.rank is not None}
        assert ranks == {0, 1}
        assert next(p for p in procs if p.role == "target").rank is None
        workers = [p for p in procs if p.rank is not None and not p.role.startswith(ROLE_RANK)]
        assert len(workers) == 2  # the forked workers keep their rank, not the rank role
        assert set(rank_roots(procs).values()) == {p.rank for p in workers}


def test_the_tracker_reports_a_rank_s_exit_with_its_agent_s_error() -> None:
    tracker = RankTracker()
    from sofa_top.datamodel.samples import ProcessSample

    def sample(ts: float, alive: bool, code: int | None = None) -> ProcessSample:
        rank = ProcInfo(
            11, 10, "python", (), 0.0, 50.0, 1, 1, 0, 0, 0,
            "running" if alive else "exited", alive=alive, role="rank 1", rank=R1,
            exit_code=code,
        )  # fmt: skip
        return ProcessSample(ts, 10, True, (_proc(10, 1, None), rank), 50.0, 1, 0, 0, 2)

    events = tracker.absorb(sample(1.0, True))
    assert [e.kind for e in events] == ["rank"] and events[0].data["rank"] == 1
    assert not tracker.absorb(Event(1.5, "agent-exit", "", {"pid": 11, "error": "RuntimeError: x"}))
    [exit_ev] = tracker.absorb(sample(2.0, False, 1))
    assert exit_ev.kind == "rank-exit"
    assert exit_ev.message == "rank 1 (pid 11) exited with code 1: RuntimeError: x"
    (ev,) = tracker.evidence(0.0)
    assert (ev.alive, ev.exit) == (False, "exited with code 1: RuntimeError: x")


def test_a_verdict_kind_this_version_does_not_know_reads_as_unknown() -> None:
    v = Verdict.from_json({"kind": "straggler"})
    assert v.kind == "straggler"
    assert Verdict.from_json({"kind": "from-the-future"}).kind == "unknown"


def test_rank_and_straggler_json_match_the_record_schema(tmp_path: Path) -> None:
    from conftest import validate_json

    from sofa_top.recording.report import SCHEMA_FILE

    defs = json.loads(SCHEMA_FILE.read_text())["$defs"]
    ranks = [_rank(0, 0.01, 0.96), _rank(1, 0.77, 0.2)]
    for name, value in (("rank", ranks[0].as_json()), ("straggler", _straggler(ranks))):
        path = tmp_path / f"{name}.schema.json"
        path.write_text(json.dumps({**defs[name], "$defs": defs}))
        validate_json(value, path)


def _straggler(ranks: list[RankStat]) -> dict[str, object] | None:
    return straggler_json(cross_rank_verdict(ranks))


def test_multi_worker_mirrored_ranks_are_named_from_tf_config(tmp_path: Path) -> None:
    """Two TF_CONFIG workers (MultiWorkerMirroredStrategy's launch shape, without TensorFlow:
    only the naming is under test) under ``sofa-top record``: each is its rank."""

    launcher = tmp_path / "tf_launcher.py"
    launcher.write_text(
        "import json, os, subprocess, sys, time\n"
        "cluster = {'worker': ['127.0.0.1:1', '127.0.0.1:2']}\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],\n"
        "        env={**os.environ, 'TF_CONFIG': json.dumps(\n"
        "            {'cluster': cluster, 'task': {'type': 'worker', 'index': i}})})\n"
        "        for i in (0, 1)]\n"
        "time.sleep(300)\n"
    )
    path = tmp_path / "tf.sofa"
    proc = subprocess.Popen(
        [SOFA_TOP, "record", "--no-stacks", "-o", str(path), "--", sys.executable, str(launcher)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )

    def ranks() -> dict[int, dict[str, object]]:
        try:
            reader = SessionReader(path)
        except UserError:  # not created yet, or its schema not yet written
            return {}
        try:
            return {int(str(e.data["rank"])): e.data for e in reader.events("rank")}
        finally:
            reader.close()

    try:
        assert wait_until(lambda: len(ranks()) == 2, 60, 0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    found = ranks()
    assert sorted(found) == [0, 1]
    assert {d["source"] for d in found.values()} == {"tf-config"}
    assert {d["world_size"] for d in found.values()} == {2}
