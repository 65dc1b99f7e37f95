"""Shared fixtures: real processes, started and always reaped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from other_uid import OtherUser, stage
from procs import read_now, spawned, wait_for
from recordings import Recordings
from tmux_term import Tmux

from sofa_top.recording.reader import SessionReader

WORKLOADS = Path(__file__).parent / "workloads"
REPO = Path(__file__).parent.parent
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
# Session fixtures cheap enough that each xdist worker may set up its own.
_CHEAP_PER_WORKER = {"nobody", "_no_sessions_in_the_users_data_dir"}


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core this process may use. Most tests wait on workloads
    that sleep, block on a barrier or run for their ``--seconds``, so two workers on two cores
    leave a fifth of the machine idle; three ran in 7.4 minutes instead of 10 but made timing
    tests (a fake CUDA window's step count) and verdicts on neighbour-starved workloads flaky."""
    return max(1, len(os.sched_getaffinity(0)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup``: tests that share an expensive module or session
    fixture (a recorded workload, a torchrun job, a Prometheus server) go to one worker, so that
    each is set up once; every other test goes wherever a worker is free."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keys: dict[str, list[str]] = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        mine = []
        for name in info.names_closure:
            defs = info.name2fixturedefs.get(name)
            if not defs or name in _CHEAP_PER_WORKER or not defs[-1].baseid:
                continue  # a plugin's fixture, or one each worker may have
            scope = defs[-1].scope
            if scope == "session":
                mine.append(f"{defs[-1].baseid}::{name}")
            elif scope in ("module", "package"):
                mine.append(item.nodeid.split("::")[0])
        for key in mine[1:]:
            parent[root(key)] = root(mine[0])
        keys[item.nodeid] = mine
    for item in items:
        mine = keys.get(item.nodeid)
        if mine:
            group = root(mine[0]).replace("/", ".").replace("::", ".")
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _isolated_data_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions written by tests never land in the user's data dir."""
    monkeypatch.setenv("SOFA_TOP_DATA_DIR", str(tmp_path_factory.mktemp("sofa-data")))


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    """A private tmux server (``tmux_term.Tmux``), killed after the test."""
    t = Tmux()
    try:
        yield t
    finally:
        t.kill()


@pytest.fixture
def busy_python() -> Iterator[subprocess.Popen[bytes]]:
    """A real pure-Python busy loop (function ``spin_here``), in its loop when yielded; it runs
    until the test ends (600 s at most, so that nothing outlives a killed pytest for long)."""
    with spawned([sys.executable, str(WORKLOADS / "busy_python.py"), "600"], ready=b"READY") as p:
        yield p


@pytest.fixture
def cpu_hog() -> Iterator[subprocess.Popen[bytes]]:
    """One CPU hog beside the test (``python -c "while True: pass"``, a neighbour that takes a
    core), killed at teardown."""
    with spawned([sys.executable, "-c", "while True: pass"]) as p:
        wait_for(lambda: _busy(p.pid), 30, "the hog to spin")
        yield p


def _busy(pid: int) -> bool:
    """The process has used CPU (it is spinning)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) + int(fields[12]) > 0  # utime + stime, in clock ticks


@pytest.fixture(scope="session")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    """The real workloads of ``recordings.SHAPES``, each recorded once per session."""
    return Recordings(tmp_path_factory.mktemp("recordings"))


@pytest.fixture(scope="session")
def nobody() -> Iterator[OtherUser]:
    """sofa-top staged for user ``nobody`` (world-readable, so it works from a clone in a 0700
    directory too; see other_uid.py); skips, saying why, where that cannot be done."""
    staged = stage()
    if isinstance(staged, str):
        pytest.skip(staged)
    try:
        yield staged
    finally:
        staged.remove()


def run_cli(
    *args: str,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    user: OtherUser | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real ``sofa-top`` console script (or, as ``user``, its staged copy)."""
    cmd = [SOFA_TOP, *args] if user is None else user.sofa_top(*args)
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})} if user is None else user.env(env),
        stdin=subprocess.DEVNULL,
    )


CTRL_C = 130  # record's exit status when Ctrl-C (SIGINT) stops it, as a shell reports it


def judged_from_stacks(r: SessionReader) -> bool:
    """The session holds a verdict marker its stacks decided: enough samples to judge (py-spy's
    rate is what its CPU budget buys, so a slow or busy machine takes longer to get there)."""
    return any(e.data.get("evidence", {}).get("source") == "stacks" for e in r.events("verdict"))


def record_until(
    out: Path, done: Callable[[SessionReader], bool], what: str, *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``sofa-top record --json -o OUT ARGS`` until ``done`` holds of its session file (``what``
    names it for the timeout's message), then SIGINT, as a user's Ctrl-C: its exit (``CTRL_C``),
    summary and errors."""
    rec = subprocess.Popen(
        [SOFA_TOP, "record", "--json", "-o", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_for(lambda: read_now(out, done, False), timeout, what)
    finally:
        rec.send_signal(signal.SIGINT)
        stdout, stderr = rec.communicate(timeout=60)
    return subprocess.CompletedProcess(rec.args, rec.returncode, stdout, stderr)


def record_until_judged(
    out: Path, *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``record_until`` the stacks have judged (``judged_from_stacks``)."""
    return record_until(out, judged_from_stacks, "a stacks verdict", *args, timeout=timeout)


def log_lines(session: str | Path) -> list[str]:
    """The workload output lines a session recorded."""
    from sofa_top.recording.reader import SessionReader

    reader = SessionReader(Path(session))
    try:
        return [e.message for e in reader.events("log")]
    finally:
        reader.close()


def validate_json(instance: object, schema_file: Path) -> None:
    """Fail the test unless ``instance`` matches the JSON schema in ``schema_file``."""
    import json

    import jsonschema

    schema = json.loads(schema_file.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(instance)


def validate_record_json(summary: object) -> None:
    """``record --json`` against ``sofa_top/recording/record.schema.json``."""
    from sofa_top.recording.report import SCHEMA_FILE

    validate_json(summary, SCHEMA_FILE)


def validate_compare_json(result: object) -> None:
    """``compare --json`` against ``optimizers/compare/compare.schema.json``."""
    from sofa_top.optimizers.compare.results import SCHEMA_FILE

    validate_json(result, SCHEMA_FILE)
