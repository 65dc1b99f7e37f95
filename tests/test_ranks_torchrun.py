"""Ranks of real torchrun DDP jobs (gloo, CPU): the 4-rank straggler acceptance test, each rank
on its own export track, the ranks pane of a replay, and a rank that dies mid-run.

The job (``tests/workloads/ddp_ranks.py``) runs until sofa-top stops it; the test waits for
conditions in the session file (every rank known, enough steps from each), never for time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SOFA_TOP, WORKLOADS, log_lines, validate_record_json
from procs import wait_until
from prom import free_port
from test_tui_pilot import run_async, wait_for

from sofa_top.cli.exits import workload_status
from sofa_top.recording.reader import SessionReader

pytestmark = pytest.mark.slow

DDP = str(WORKLOADS / "ddp_ranks.py")
STEPS_PER_RANK = 150  # steps each rank has before the job is stopped: warm-up is a small part


def torchrun(
    nproc: int, *args: str, nnodes: int = 1, node_rank: int = 0, port: int = 0
) -> list[str]:
    """``python -m torch.distributed.run`` from this venv, on 127.0.0.1."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--node_rank={node_rank}",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={port or free_port()}",
        DDP,
        *args,
    ]


def rank_steps(path: Path) -> dict[int, int]:
    """Rank -> steps recorded so far (empty while the file or its ranks do not exist yet)."""
    if not path.exists():
        return {}
    try:
        reader = SessionReader(path)
    except Exception:
        return {}
    try:
        pids = {e.data["pid"]: e.data["rank"] for e in reader.events("rank")}
        counts: dict[int, int] = {}
        for s in reader.steps():
            if s.pid in pids:
                rank = int(str(pids[s.pid]))
                counts[rank] = counts.get(rank, 0) + 1
        return counts
    finally:
        reader.close()


def start_record(path: Path, cmd: list[str], env: dict[str, str], *flags: str) -> Any:
    """``sofa-top record --json`` on ``cmd``, started (stdout and stderr piped)."""
    return subprocess.Popen(
        [SOFA_TOP, "record", "--json", *flags, "-o", str(path), "--", *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def record_until(path: Path, cmd: list[str], ranks: int, steps: int, env: dict[str, str]) -> Any:
    """``record --json`` on ``cmd`` until each of ``ranks`` ranks has ``steps`` steps; then
    Ctrl-C (sofa-top stops the job) and the summary."""
    proc = start_record(path, cmd, env)
    try:
        ok = wait_until(
            lambda: (
                proc.poll() is not None
                or (len(c := rank_steps(path)) >= ranks and min(c.values()) >= steps)
            ),
            240,
            0.5,
        )
        assert ok and proc.poll() is None, f"job ended or stalled: {rank_steps(path)}"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGINT, err  # Ctrl-C
    assert "Traceback" not in err
    return json.loads(out)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Path]]:
    """The issue's job: 4 ranks, rank 2 sleeping 4 ms per sample in ``__getitem__``."""
    where = tmp_path_factory.mktemp("four-ranks")
    env = {**os.environ, "SOFA_TOP_DATA_DIR": str(where / "data")}
    path = where / "four.sofa"
    cmd = torchrun(4, "3600", "--slow-rank", "2", "--sleep-ms", "4")
    yield record_until(path, cmd, 4, STEPS_PER_RANK, env), path


def test_record_json_names_rank_2_the_straggler(four_ranks: tuple[dict[str, Any], Path]) -> None:
    summary, _ = four_ranks
    validate_record_json(summary)
    ranks = {r["rank"]: r for r in summary["ranks"]}
    assert sorted(ranks) == [0, 1, 2, 3]
    assert {r["local_rank"] for r in ranks.values()} == {0, 1, 2, 3}
    assert len({r["node"] for r in ranks.values()}) == 1  # one launcher: one node
    assert len({r["pid"] for r in ranks.values()}) == 4
    assert all(r["world_size"] == 4 and r["steps"] >= STEPS_PER_RANK for r in ranks.values())
    straggler = summary["straggler"]
    assert straggler is not None, summary["rank_verdict"]
    assert (straggler["rank"], straggler["verdict"], straggler["cause"]) == (
        2,
        "input-bound",
        "latency",
    )
    assert ranks[2]["verdict"] == "input-bound" and ranks[2]["cause"] == "latency"
    for r in (0, 1, 3):
        assert ranks[r]["collective_wait_fraction"] >= 0.30, ranks[r]
    assert straggler["others_collective_wait_fraction"] >= 0.30
    assert straggler["steps_per_s_if_matched"] > straggler["steps_per_s"]
    assert summary["rank_verdict"]["kind"] == "straggler"
    # the job's headline is the straggler, its cause and its fix first: the job-level average
    # (input-bound, of the ranks taken together) is kept beside it, never leading
    top = summary["verdict"]
    assert top["kind"] == "straggler" and "rank 2" in top["headline"], top
    assert top["recommendations"] == straggler["recommendations"]
    assert top["evidence"]["job_verdict"]["kind"] != "straggler"
    # the torchrun launcher is not a rank
    assert summary["target"]["pid"] not in {r["pid"] for r in ranks.values()}


def test_each_rank_is_its_own_perfetto_track(four_ranks: tuple[dict[str, Any], Path]) -> None:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    _, path = four_ranks
    out = path.with_suffix(".perfetto-trace")
    r = subprocess.run(
        [SOFA_TOP, "export", str(path), "-o", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    trace = pb.Trace()
    trace.ParseFromString(out.read_bytes())
    processes = {
        p.track_descriptor.uuid: p.track_descriptor.process.process_name
        for p in trace.packet
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")
    }
    rank_tracks = {u: name for u, name in processes.items() if name.startswith("rank ")}
    assert sorted(name.split()[1] for name in rank_tracks.values()) == ["0", "1", "2", "3"]
    steps_tracks = {
        p.track_descriptor.uuid
        for p in trace.packet
        if p.HasField("track_descriptor")
        and p.track_descriptor.parent_uuid in rank_tracks
        and p.track_descriptor.name == "training steps"
    }
    assert len(steps_tracks) == 4
    slices = {p.track_event.track_uuid for p in trace.packet if p.HasField("track_event")}
    assert steps_tracks <= slices


@run_async
async def test_replay_shows_the_ranks_pane_and_the_straggler(
    four_ranks: tuple[dict[str, Any], Path],
) -> None:
    from sofa_top.recording.replay import ReplaySource
    from sofa_top.tui.app import DashboardApp

    _, path = four_ranks
    source = ReplaySource(path)
    app = DashboardApp(source)
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_for(lambda: app.ranks.display and len(app.ranks.body.ranks) == 4, 20)
        await pilot.pause()
        lines = [t.plain for t in app.ranks.body.text_lines()]
        assert lines[0].split()[:4] == ["rank", "node", "local", "pid"]
        row2 = next(t for t in app.ranks.body.text_lines() if t.plain.split()[0] == "2")
        # at the end of the recording sofa-top had stopped the job: the verdict stands, and the
        # exit says so (the rank's status went to torchrun, its parent, not to sofa-top)
        assert "input-bound (latency)" in row2.plain, row2.plain
        assert "stopped by sofa-top" in row2.plain, row2.plain
        assert row2.style and "bold" in str(row2.style)  # the straggler stands out
        verdict = "\n".join(t.plain for t in app.verdict.text_lines())
        assert "STRAGGLER" in verdict and "rank 2" in verdict
        await pilot.press("q")


def test_a_rank_that_dies_shows_as_that_rank_s_exit(tmp_path: Path) -> None:
    env = {**os.environ, "SOFA_TOP_DATA_DIR": str(tmp_path / "data")}
    path = tmp_path / "dies.sofa"
    cmd = torchrun(2, "3600", "--die-rank", "1", "--die-after", "3")
    r = subprocess.run(
        [SOFA_TOP, "record", "--json", "--no-stacks", "-o", str(path), "--", *cmd],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert "Traceback" not in r.stderr  # sofa-top's own stderr: the rank's traceback is logged
    summary = json.loads(r.stdout)
    validate_record_json(summary)
    assert summary["exit_code"] not in (0, None)  # the job failed, and says so
    assert r.returncode == workload_status(summary["exit_code"]), r.stderr  # so does sofa-top
    ranks = {x["rank"]: x for x in summary["ranks"]}
    assert "RuntimeError: rank 1 failed on purpose" in (ranks[1]["exit"] or "")
    assert ranks[1]["alive"] is False
    # the others kept being recorded: rank 0 has every step it took, up to the failure
    assert ranks[0]["steps"] > 0
    reader = SessionReader(path)
    try:
        exits = reader.events("rank-exit")
        assert any(e.data["rank"] == 1 and "RuntimeError" in e.message for e in exits)
        steps = reader.steps()
    finally:
        reader.close()
    assert summary["steps"]["count"] == len(steps)  # nothing recorded is lost
    logs = "\n".join(log_lines(path))
    assert "failed on purpose" in logs  # the rank's own traceback, as the workload printed it


def test_a_rank_killed_mid_run_is_not_called_stopped_by_sofa_top(tmp_path: Path) -> None:
    """SIGKILL to one rank while sofa-top records: torchrun takes its status and ends the job.
    sofa-top signalled nothing, so no rank reads "stopped by sofa-top"."""
    env = {**os.environ, "SOFA_TOP_DATA_DIR": str(tmp_path / "data")}
    path = tmp_path / "killed.sofa"
    rec = start_record(path, torchrun(2, "3600"), env, "--no-stacks")
    try:
        two = wait_until(lambda: len(rank_steps(path)) == 2, 240, 0.5)
        assert two and wait_until(lambda: min(rank_steps(path).values()) >= 20, 240, 0.5)
        reader = SessionReader(path)
        try:
            ranks = reader.events("rank")
        finally:
            reader.close()
        pids = {int(str(e.data["rank"])): int(str(e.data["pid"])) for e in ranks}
        os.kill(pids[1], signal.SIGKILL)
        out, err = rec.communicate(timeout=120)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.communicate()
    summary = json.loads(out)
    assert summary["end_reason"] == "target exited", err  # torchrun ended it, not sofa-top
    assert rec.returncode == workload_status(summary["exit_code"]) != 0, err
    reader = SessionReader(path)
    try:
        exits = {e.data["rank"]: e for e in reader.events("rank-exit")}
        stopped_job = reader.meta()["stopped_job"]
    finally:
        reader.close()
    assert stopped_job is False
    assert set(exits) == {0, 1}
    for e in exits.values():
        assert e.data["stopped"] is False, e
        assert "stopped by sofa-top" not in e.message, e.message
    ranks = {x["rank"]: x for x in summary["ranks"]}
    assert not any("stopped by sofa-top" in (x["exit"] or "") for x in ranks.values()), ranks


def test_ddp_results_and_the_user_s_comm_hook_are_untouched(tmp_path: Path) -> None:
    """The collective timing changes nothing: the same weights with and without sofa-top, and
    the user's own communication hook runs once per step, as without sofa-top."""
    env = {**os.environ, "SOFA_TOP_DATA_DIR": str(tmp_path / "data")}
    args = ("0", "--steps", "40", "--comm-hook", "--slow-rank", "1", "--sleep-ms", "1")
    plain = subprocess.run(torchrun(2, *args), capture_output=True, text=True, timeout=240)
    assert plain.returncode == 0, plain.stderr[-2000:]
    path = tmp_path / "hook.sofa"
    r = subprocess.run(
        [SOFA_TOP, "record", "--json", "--no-stacks", "-o", str(path), "--", *torchrun(2, *args)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    logs = log_lines(path)
    checksum = [ln for ln in logs if ln.startswith("CHECKSUM=")]
    assert checksum == [ln for ln in plain.stdout.splitlines() if ln.startswith("CHECKSUM=")]
    assert "HOOK_CALLS=40" in logs
    summary = json.loads(r.stdout)
    assert all(x["collective_wait_fraction"] is not None for x in summary["ranks"])
    reader = SessionReader(path)
    try:
        ranks = {e.data["pid"] for e in reader.events("rank")}
        applied = {e.data["pid"]: set(e.data["hooks_applied"]) for e in reader.events("agent")}
    finally:
        reader.close()
    for pid in ranks:
        assert {"torch-ddp", "torch-collectives", "torch-dataloader"} <= applied[pid]
