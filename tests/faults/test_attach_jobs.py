"""Attach = launch: injected into a running eager tf.data loop, Keras ``fit`` and DataLoader
loop, ``record --pid --json`` gives launch mode's verdict and an input-wait fraction within 0.10
of the job's own instrumented measure over the same steps; after detach py-spy sees no
sofa-top thread, and the job finishes with its own output and exit code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import validate_record_json

from faults.attach_helpers import ATTACH_JOBS, sofa_threads, value, wait_detached
from faults.conftest import no_traceback, read_now, running, sofa, start_sofa, wait_until
from sofa_top.recording.reader import SessionReader

pytestmark = pytest.mark.slow


def _job(job: str, tmp: Path, *extra: str) -> list[str]:
    return [
        sys.executable, str(ATTACH_JOBS), "--job", job,
        "--window", str(tmp / "window"), "--stop", str(tmp / "stop"), *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("job", ["tf-eager", "keras", "torch"])
def test_attached_matches_launch_and_the_jobs_own_measure(tmp_path: Path, job: str) -> None:
    out = tmp_path / "a.sofa"
    with running(_job(job, tmp_path, "--exit-code", "3"), stderr=-1) as proc:
        (tmp_path / "window").touch()
        rec = sofa("record", "--pid", str(proc.pid), "--duration", "8", "--json", "-o", str(out))
        (tmp_path / "window").unlink()
        assert rec.returncode == 0, rec.stderr
        no_traceback(rec.stderr)
        assert f"agent injected into PID {proc.pid}" in rec.stderr, rec.stderr
        attached = json.loads(rec.stdout)
        validate_record_json(attached)
        assert attached["mode"] == "record" and attached["injected"] is True
        # the socket closed with the recording: the agent restores everything and goes
        wait_detached(proc.pid, "no sofa-top thread in py-spy's dump")
        assert proc.poll() is None, "the job must run on after detach"
        (tmp_path / "stop").touch()
        assert proc.wait(timeout=120) == 3
        assert proc.stdout is not None and proc.stderr is not None
        output = read_rest(proc.stdout)
        errors = proc.stderr.read().decode()
    # nothing of sofa-top's in the job's output (a path may name the clone's folder sofa-top)
    said = [line for line in (output + errors).splitlines() if line.startswith("sofa-top")]
    assert "JOB DONE" in output and not said, (output, errors)
    own = float(value(output, "SELF_INPUT_FRACTION"))
    assert int(value(output, "SELF_STEPS")) >= 20
    steps = attached["steps"]
    assert steps["count"] >= 20, steps
    print(f"{job}: attached {steps['input_wait_fraction']:.3f}, own {own:.3f}")
    assert abs(steps["input_wait_fraction"] - own) <= 0.10, (steps, own)
    hello = [e for e in SessionReader(out).events("agent-connected") if e.data.get("mode")]
    assert hello and hello[0].data["mode"] == "attach"

    # the same job under launch: the same verdict
    (tmp_path / "stop").unlink()
    # (it trains 11 s once warm, so that the verdict's last ~10 s are training, not
    # TensorFlow's import on a busy machine)
    launched = sofa(
        "record", "--json", "-o", str(tmp_path / "l.sofa"),
        "--", *_job(job, tmp_path, "--train-seconds", "11"), timeout=240,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert attached["verdict"]["kind"] == json.loads(launched.stdout)["verdict"]["kind"]
    assert attached["verdict"]["kind"] == "input-bound", attached["verdict"]


def read_rest(stream: object) -> str:
    """Everything left on a finished process's stdout."""
    return stream.read().decode()  # type: ignore[attr-defined, no-any-return]


def test_threads_helper_sees_the_agent_while_attached(tmp_path: Path) -> None:
    """The check above can fail: while attached, py-spy does list the agent's thread."""
    job = _job("torch", tmp_path)
    with running(job) as proc:
        out = tmp_path / "t.sofa"
        # (an injection may wait for its turn on a busy machine: give it a minute)
        rec = start_sofa(
            "record", "--pid", str(proc.pid), "--duration", "600", "--inject-timeout", "60",
            "-o", str(out),
        )  # fmt: skip
        try:
            # first the session's word that the agent is in, then py-spy's: a py-spy dump
            # every 50 ms meanwhile would hold ptrace on the target while the injector needs it
            wait_until(lambda: connected(out), 120, "the agent-connected event")
            wait_until(lambda: bool(sofa_threads(proc.pid)), 60, "the agent's thread", 0.5)
        finally:
            rec.terminate()
            rec.communicate(timeout=60)
        wait_detached(proc.pid, "detach after SIGTERM")


def connected(session: Path) -> bool:
    """The session file has the injected agent's hello (it is committed within a second)."""
    hellos = read_now(session, lambda r: r.events("agent-connected"), [])
    return any(e.data.get("mode") == "attach" for e in hellos)
