"""sofa-top doctor and the data paths, on this real machine (no GPU, root, py-spy in the venv)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import WORKLOADS
from other_uid import OtherUser
from procs import spawned

from sofa_top.cli import doctor
from sofa_top.cli.doctor import Check, check_data_dir, check_import, check_stacks, check_terminal
from sofa_top.collectors.stacks import find_pyspy
from sofa_top.recording import paths

ROOT = os.geteuid() == 0


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Check], bool]]:
    """One full doctor run shared by the tests below (it takes seconds: torch, tensorflow)."""
    # Module scope runs before conftest's per-test data dir: isolate it here too.
    with pytest.MonkeyPatch.context() as mp:
        data = tmp_path_factory.mktemp("doctor-data")
        mp.setenv("SOFA_TOP_DATA_DIR", str(data))
        yield doctor.run_doctor(timeout=60.0)


def test_doctor_runs_every_check(report: tuple[list[Check], bool]) -> None:
    checks, ok = report
    assert [c.name for c in checks] == [
        "process stats",
        "py-spy",
        "python stacks",
        "agent injection",
        "NVIDIA GPU",
        "torch",
        "tensorflow",
        "terminal",
        "data dir",
    ]
    assert ok
    by = _by_name(checks)
    assert by["process stats"].level == "ok" and by["process stats"].required
    assert sum(c.required for c in checks) == 1
    assert by["data dir"].level == "ok"
    checked = Path(by["data dir"].detail.removesuffix(" (writable)"))
    assert checked.name.startswith("doctor-data")  # the isolated dir, not the user's
    assert (checked / "sessions").is_dir()


@pytest.mark.skipif(not ROOT, reason="as root, ptrace is allowed")
def test_py_spy_works_as_root(report: tuple[list[Check], bool]) -> None:
    by = _by_name(report[0])
    assert by["py-spy"].level == "ok"
    assert by["py-spy"].detail.startswith(str(Path(sys.executable).parent / "py-spy"))
    assert version("py-spy") in by["py-spy"].detail
    assert by["python stacks"].level == "ok", by["python stacks"]
    assert "root" in by["python stacks"].detail
    # a real injection into the probe Python, which then detached
    assert by["agent injection"].level == "ok", by["agent injection"]
    assert "cpython 3." in by["agent injection"].detail


def test_gpu_check_on_this_machine(report: tuple[list[Check], bool]) -> None:
    gpu = _by_name(report[0])["NVIDIA GPU"]
    if gpu.level == "ok":
        pytest.skip("this machine has a GPU")
    assert gpu.level == "info"  # information, not a failure
    assert gpu.detail.startswith("no NVIDIA GPU: ")


def test_frameworks(report: tuple[list[Check], bool]) -> None:
    by = _by_name(report[0])
    for module in ("torch", "tensorflow"):
        c = by[module]
        if c.level == "warn" and "did not finish" in c.detail:
            continue  # a very loaded machine; the limit itself is tested below
        try:
            installed = version(module if module == "torch" else "tensorflow-cpu")
        except Exception:
            installed = None
        if installed is None:
            assert c.level == "info" and c.detail == "not installed in this environment"
        else:
            assert c.level == "ok" and c.detail.startswith(installed), c


def test_import_check_states(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sofa_broken_mod.py").write_text("raise RuntimeError('half-installed wheel')\n")
    (tmp_path / "sofa_slow_mod.py").write_text("import time\ntime.sleep(3600)\n")
    (tmp_path / "sofa_good_mod.py").write_text("__version__ = '1.2.3'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    missing = check_import("sofa_no_such_module_xyz")
    assert (missing.level, missing.detail) == ("info", "not installed in this environment")
    assert missing.ok
    broken = check_import("sofa_broken_mod")
    assert broken.level == "warn" and "half-installed wheel" in broken.detail and broken.fix
    good = check_import("sofa_good_mod")
    assert (good.level, good.detail) == ("ok", "1.2.3")
    t0 = time.monotonic()
    slow = check_import("sofa_slow_mod", timeout=1.0)
    assert time.monotonic() - t0 < 60  # gave up on the hour-long import
    assert slow.level == "warn" and "did not finish within 1s" in slow.detail


def test_exit_semantics_without_py_spy() -> None:
    checks, ok = doctor.run_doctor(timeout=60.0, find_py_spy=lambda: None, frameworks=())
    by = _by_name(checks)
    assert by["py-spy"].level == "fail" and "pip install py-spy" in by["py-spy"].fix
    assert by["python stacks"].level == "fail"
    assert ok  # attach still works: process stats, GPU; only stacks are missing
    text = doctor.render(checks, ok)
    assert "fix: " + by["py-spy"].fix in text
    assert text.splitlines()[-1].startswith("sofa-top can attach; limited until fixed: py-spy")


def test_exit_semantics_required_failure() -> None:
    checks = [
        Check("process stats", "fail", "cannot read process statistics", "fix it", True),
        Check("NVIDIA GPU", "info", "no NVIDIA GPU: NVML library not found"),
        Check("terminal", "warn", "70x20", "enlarge"),
    ]
    assert not doctor.overall_ok(checks)
    assert doctor.overall_ok(checks[1:])
    text = doctor.render(checks, False, color=True)
    assert "\x1b[31m✗\x1b[0m process stats" in text
    assert text.splitlines()[-1] == "sofa-top cannot attach: process stats failed."


def as_nobody(check: Callable[[], Check]) -> tuple[str, str, str]:
    """Run ``check`` in a forked child as user nobody: (level, detail, fix)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            c = check()
            os.write(w, f"{c.level}\n{c.detail}\n{c.fix}".encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        level, detail, fix = f.read().split("\n", 2)
    os.waitpid(child, 0)
    return level, detail, fix


def test_ptrace_denied_is_reported_with_a_fix(nobody: OtherUser) -> None:
    """The real thing: py-spy as user nobody against a root-owned Python process (the staged,
    world-readable py-spy: nobody may not reach the one in the venv of a clone in a 0700
    directory)."""
    with spawned([sys.executable, str(WORKLOADS / "busy_python.py"), "600"], ready=b"READY") as t:
        level, detail, fix = as_nobody(lambda: check_stacks(nobody.py_spy, t.pid))
    assert level == "fail", detail
    assert detail.startswith("ptrace denied"), detail  # py-spy ran, and was refused
    assert "not root" in detail
    assert "sudo" in fix


@pytest.mark.skipif(not ROOT, reason="needs root to become nobody")
def test_injection_denied_is_reported_with_a_fix() -> None:
    """The real thing: doctor's injection check as nobody against a root-owned Python."""
    with spawned([sys.executable, str(WORKLOADS / "busy_python.py"), "600"], ready=b"READY") as t:
        level, detail, fix = as_nobody(lambda: doctor.check_injection(t.pid, 5.0))
        assert t.poll() is None  # untouched
    assert level == "fail", detail
    assert "permission denied" in detail and "outside only" in detail
    assert "sudo" in fix


def test_stacks_check_without_py_spy() -> None:
    c = check_stacks(None, os.getpid())
    assert c.level == "fail" and "py-spy not installed" in c.detail


def test_terminal_check() -> None:
    env = {"TERM": "xterm-256color", "COLORTERM": "truecolor"}
    ok = check_terminal(os.terminal_size((120, 40)), env, True)
    assert ok.level == "ok" and ok.detail.startswith("120x40, truecolor")
    small = check_terminal(os.terminal_size((79, 40)), env, True)
    assert small.level == "warn" and "80x24" in small.fix
    assert check_terminal(os.terminal_size((80, 23)), env, True).level == "warn"
    dumb = check_terminal(os.terminal_size((100, 30)), {"TERM": "dumb"}, True)
    assert dumb.level == "warn" and "no colors" in dumb.detail
    assert (
        "256 colors"
        in check_terminal(os.terminal_size((100, 30)), {"TERM": "screen-256color"}, True).detail
    )
    piped = check_terminal(None, env, False)
    assert piped.level == "info" and "not a terminal" in piped.detail


def test_data_dir_not_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # A file where the directory should be: unwritable even for root.
    monkeypatch.setenv("SOFA_TOP_DATA_DIR", str(blocker / "sofa"))
    c = check_data_dir()
    assert c.level == "fail" and "SOFA_TOP_DATA_DIR" in c.fix
    monkeypatch.setenv("SOFA_TOP_DATA_DIR", str(tmp_path / "fresh"))
    assert check_data_dir().level == "ok"
    assert (tmp_path / "fresh" / "sessions").is_dir()
    assert list((tmp_path / "fresh" / "sessions").iterdir()) == []  # probe file removed


def test_data_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOFA_TOP_DATA_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.data_dir() == tmp_path / "explicit"
    assert paths.sessions_dir() == tmp_path / "explicit" / "sessions"
    monkeypatch.delenv("SOFA_TOP_DATA_DIR")
    assert paths.data_dir() == tmp_path / "xdg" / "sofa-top"
    monkeypatch.setenv("XDG_DATA_HOME", "")
    assert paths.data_dir() == tmp_path / "home" / ".local" / "share" / "sofa-top"
    assert not (tmp_path / "home").exists()  # pure: nothing created


def test_py_spy_found_next_to_the_interpreter_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert find_pyspy() == str(Path(sys.executable).parent / "py-spy")


def test_main_prints_the_report_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main() == 0
    out = capsys.readouterr().out
    assert out.startswith("sofa-top doctor\n")
    assert "process stats" in out and "\x1b[" not in out  # not a tty: no colour codes
