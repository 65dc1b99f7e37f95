"""Pilot tests of the home screen: a fake process list and session list, the choices it returns,
and the real psutil scanner against a real busy Python process."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from test_tui_pilot import run_async, wait_for
from textual import events
from textual.pilot import Pilot

from sofa_top.collectors.discovery import PyProc, PythonProcessScanner, is_python, sort_processes
from sofa_top.recording.catalogue import SessionInfo
from sofa_top.tui.home import NONE_KEY, HomeApp, HomeChoice, parse_command, run_home

T0 = 1_700_000_000.0
GIB = 1024**3
SIZE = (100, 30)


def procs() -> list[PyProc]:
    """Unsorted on purpose: the picker sorts by CPU."""
    return [
        PyProc(913, "python3.11", ("python3.11", "-m", "http.server"), 0.0, 18 << 20),
        PyProc(4242, "python", ("python", "train.py", "--epochs", "10"), 312.0, 3 * GIB, 30 * GIB),
        PyProc(5150, "python3", ("python3", "new.py"), None, 5 << 20),
        PyProc(1777, "python3", ("/usr/bin/python3", "/usr/bin/jupyter-lab"), 1.5, 210 << 20),
    ]


def sessions() -> list[SessionInfo]:
    return [
        SessionInfo(
            Path("/s/train-4242.sofa"), T0, T0 + 302, 302.0, 4242, "python",
            ("python", "train.py"), "launch", "input-bound: 60% of each step waits for input",
            "input-bound", 12 << 20, T0 + 302, False,
        ),
        SessionInfo(
            Path("/s/broken.sofa"), None, None, None, None, "", (), "", None, None, 10, T0,
            False, "not a readable sofa-top session: file is not a database",
        ),
        SessionInfo(
            Path("/s/demo-torch.sofa"), T0 - 86400, T0 - 86339, 61.0, 777, "demo-torch",
            ("python", "demo"), "launch", "compute-bound: only 2% waits", "compute-bound",
            3 << 20, T0, False,
        ),
    ]  # fmt: skip


async def loaded(pilot: Pilot[HomeChoice | None], app: HomeApp) -> None:
    await wait_for(lambda: app.scans > 0 and app.sessions_loaded)
    await pilot.pause()


KEY_NAMES = {"/": "slash", " ": "space", ".": "full_stop"}


def rows(table: object) -> list[list[str]]:
    from textual.widgets import DataTable

    assert isinstance(table, DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


@run_async
async def test_processes_are_listed_busiest_first_and_enter_attaches() -> None:
    app = HomeApp(scan=procs, sessions=sessions)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        table = rows(app.proc_table)
        assert [r[0].strip() for r in table] == ["4242", "1777", "913", "5150"]
        assert table[0][1:4] == ["312%", "3.0 GiB", "30.0 GiB"]
        assert table[0][4] == "python train.py --epochs 10"
        assert table[3][1] == "-" and table[1][3] == "-"  # unknown CPU / GPU memory
        assert app.focused is app.proc_table
        await pilot.press("down", "enter")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == HomeChoice("attach", pid=1777)


@run_async
async def test_command_line_launches_a_shlex_split_command() -> None:
    app = HomeApp(scan=procs, sessions=sessions)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("slash")
        assert app.focused is app.command
        # q typed into the command line is text, not the quit key.
        await pilot.press(*'python train.py --name "my q run"')
        assert app.is_running
        await pilot.press("enter")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == HomeChoice.launch(["python", "train.py", "--name", "my q run"])
    assert app.return_value.argv == ("python", "train.py", "--name", "my q run")


@run_async
async def test_keys_right_after_slash_go_to_the_command_line() -> None:
    """A terminal can deliver "/" and the keys after it in one read (a paste, a page's keys
    over its websocket): each key goes where the focus is when it is handled, so "/" moves
    the focus at once and none of the text after it goes to the process list."""
    app = HomeApp(scan=procs, sessions=sessions)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        text = "/work/x.py 3"
        keys = [("slash", "/")] + [(KEY_NAMES.get(c, c), c) for c in text]
        for key, char in keys:  # queued together, none handled yet
            app.post_message(events.Key(key, char))
        await wait_for(lambda: app.command.value.endswith("x.py 3"), 30)
        assert app.command.value == text
        await pilot.press("enter")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == HomeChoice.launch(["/work/x.py", "3"])


@run_async
async def test_a_bad_command_is_reported_not_launched() -> None:
    app = HomeApp(scan=procs, sessions=sessions)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        app.command.focus()
        await pilot.press(*'python -c "unbalanced', "enter")
        await pilot.pause()
        assert app.is_running and app.return_value is None
        assert any("cannot parse the command" in n.message for n in app._notifications)
        await pilot.press("ctrl+u", "enter")  # empty: nothing to launch either
        await pilot.pause()
        assert app.is_running


@run_async
async def test_enter_on_a_session_opens_its_replay_and_broken_ones_explain() -> None:
    app = HomeApp(scan=procs, sessions=sessions)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        table = rows(app.session_table)
        # the script, not the interpreter and its PID
        assert table[0][1] == "train.py" and table[0][2].strip() == "5m02s"
        assert table[0][3].startswith("input-bound: 60%")
        assert table[1][3].startswith("unreadable: not a readable")
        await pilot.press("tab", "tab")
        assert app.focused is app.session_table
        await pilot.press("down", "enter")  # the broken one
        await pilot.pause()
        assert app.is_running
        assert any("broken.sofa" in n.message for n in app._notifications)
        await pilot.press("down", "enter")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == HomeChoice.replay(Path("/s/demo-torch.sofa"))


class ChangingScan:
    """Each call is one refresh; once ``busier`` is set, 1777 is the busiest process."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[int] = set()
        self.busier = threading.Event()

    def __call__(self) -> list[PyProc]:
        self.calls += 1
        self.threads.add(threading.get_ident())
        rows = procs()
        if self.busier.is_set():
            rows[3] = PyProc(1777, "python3", ("python3", "jupyter"), 900.0, 1 << 20)
        return rows


@run_async
async def test_list_refreshes_off_the_ui_thread_and_keeps_the_cursor() -> None:
    scan = ChangingScan()
    app = HomeApp(scan=scan, sessions=sessions, refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("down")
        assert rows(app.proc_table)[1][0].strip() == "1777"
        assert app.proc_table.cursor_row == 1
        scan.busier.set()
        await wait_for(lambda: rows(app.proc_table)[0][0].strip() == "1777")  # re-sorted ...
        await pilot.pause()
        assert app.proc_table.cursor_row == 0  # ... and the cursor followed the process
        assert rows(app.proc_table)[0][1] == "900%"
        assert scan.calls >= 2
        assert threading.main_thread().ident not in scan.threads
        await pilot.press("enter")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == HomeChoice.attach(1777)


@run_async
async def test_empty_lists_say_so_and_enter_does_nothing() -> None:
    app = HomeApp(scan=lambda: [], sessions=lambda: [])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        assert "no Python processes found" in rows(app.proc_table)[0][0]
        assert "no saved sessions yet" in rows(app.session_table)[0][0]
        await pilot.press("enter")
        await pilot.pause()
        assert app.is_running
        await pilot.press("q")
        await wait_for(lambda: not app.is_running)
    assert app.return_value is None


@run_async
async def test_scan_and_listing_errors_leave_the_other_choices_usable() -> None:
    def broken_scan() -> list[PyProc]:
        raise PermissionError("no /proc")

    def broken_sessions() -> list[SessionInfo]:
        raise OSError("disk gone")

    app = HomeApp(scan=broken_scan, sessions=broken_sessions)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        assert "scan failed: PermissionError: no /proc" in str(app.proc_table.border_subtitle)
        assert "disk gone" in str(app.session_table.border_subtitle)
        await pilot.press("slash", *"python x.py", "enter")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == HomeChoice.launch(["python", "x.py"])


def test_helpers() -> None:
    assert is_python("python3.11", ())
    assert is_python("torchrun", ("/usr/bin/python3", "/usr/bin/torchrun"))
    assert is_python("x", (), "/opt/conda/bin/python3.10")
    assert not is_python("bash", ("bash", "-c", "python x.py"))
    assert not is_python("pythonista-helper", ())
    assert parse_command("python 'a b' c") == ["python", "a b", "c"]
    sorted_pids = [p.pid for p in sort_processes(procs())]
    assert sorted_pids == [4242, 1777, 913, 5150]
    assert callable(run_home)
    assert NONE_KEY == "-"


def test_real_scanner_finds_a_busy_python_process(busy_python: subprocess.Popen[bytes]) -> None:
    """The scanner lists the loop with the CPU it used between two scans (what the kernel
    says over the same interval: on a busy machine a spinning loop may get little of a core)."""
    scanner = PythonProcessScanner(gpu=dict)
    me = psutil.Process(busy_python.pid)
    scanner()  # the first scan only starts each process's CPU clock
    t0, c0 = time.monotonic(), sum(me.cpu_times()[:2])
    time.sleep(1.0)  # the span measured, not a synchronisation
    found = next((p for p in scanner() if p.pid == busy_python.pid), None)
    truth = 100 * (sum(me.cpu_times()[:2]) - c0) / (time.monotonic() - t0)
    assert found is not None
    assert any(a.endswith("busy_python.py") for a in found.cmdline)
    assert found.cpu_percent is not None and found.cpu_percent > 0  # it spins
    assert found.cpu_percent == pytest.approx(truth, abs=15), (found.cpu_percent, truth)
    assert found.rss is not None and found.rss > 1 << 20
    assert all(p.pid != os.getpid() for p in scanner())  # sofa-top never lists itself
