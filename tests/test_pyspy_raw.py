"""The py-spy raw-format parser: real lines captured from py-spy 0.4.3, and round-trip laws."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from sofa_top.collectors.pyspy_raw import (
    RawStack,
    format_raw_line,
    parse_frame,
    parse_raw,
    parse_raw_line,
)
from sofa_top.datamodel.samples import Frame

# Captured with: py-spy record --format raw --threads --nonblocking --idle [--subprocesses]
REAL_THREADS = """\
thread (3066): MainThread;<module> (busy.py:13);spin_here (busy.py:5) 61
thread (3066): MainThread;<module> (busy.py:13);spin_here (busy.py:4) 38
thread (3068): sleepy;Thread._bootstrap (threading.py:1002);Thread._bootstrap_inner \
(threading.py:1045);Thread.run (threading.py:982);sleeper (busy.py:9) 99
thread (12491);<module> (busy_python.py:34);main (busy_python.py:30);spin_here \
(busy_python.py:23) 17
"""

REAL_SUBPROCESSES = """\
process 5760:"/work/main/.venv/bin/python forker.py 10";process 5763:"/work/main/.venv/bin/\
python forker.py 10";thread (5763): MainThread;<module> (forker.py:8);BaseProcess.start \
(multiprocessing/process.py:121);BaseProcess.run (multiprocessing/process.py:108);spin_child \
(forker.py:5) 19
process 5760:"/work/main/.venv/bin/python forker.py 10";thread (5760): MainThread;<module> \
(forker.py:9);BaseProcess.join (multiprocessing/process.py:149);Popen.wait \
(multiprocessing/popen_fork.py:43);Popen.poll (multiprocessing/popen_fork.py:27) 19
"""


def test_real_threads_output() -> None:
    stacks = parse_raw(REAL_THREADS)
    assert len(stacks) == 4
    first = stacks[0]
    assert (first.tid, first.thread_name, first.count, first.pid) == (3066, "MainThread", 61, None)
    assert first.frames == (
        Frame("<module>", "busy.py", 13),
        Frame("spin_here", "busy.py", 5),
    )
    assert stacks[2].thread_name == "sleepy"
    assert stacks[2].frames[-1] == Frame("sleeper", "busy.py", 9)
    # py-spy could not read the thread's name: "thread (TID)" with no ": NAME"
    assert (stacks[3].tid, stacks[3].thread_name) == (12491, "")
    assert stacks[3].frames[0] == Frame("<module>", "busy_python.py", 34)


def test_real_subprocesses_output() -> None:
    child, parent = parse_raw(REAL_SUBPROCESSES)
    assert child.processes == (
        (5760, "/work/main/.venv/bin/python forker.py 10"),
        (5763, "/work/main/.venv/bin/python forker.py 10"),
    )
    assert child.pid == 5763 and child.tid == 5763
    assert child.frames[-1] == Frame("spin_child", "forker.py", 5)
    assert parent.pid == 5760
    assert parent.frames[-1] == Frame("Popen.poll", "multiprocessing/popen_fork.py", 27)


def test_hex_thread_id() -> None:
    # py-spy prints the pthread id as {:#X} when it cannot find the OS thread id
    s = parse_raw_line("thread (0x7F12AB34CD00): worker;run (w.py:3) 2")
    assert s is not None and s.tid == 0x7F12AB34CD00 and s.thread_name == "worker"


def test_frames_without_line_or_file() -> None:
    assert parse_frame("native_fn (libfoo.so)") == Frame("native_fn", "libfoo.so", 0)
    assert parse_frame("bare") == Frame("bare", "", 0)
    assert parse_frame("f (dir (x)/a.py:7)") == Frame("f", "dir (x)/a.py", 7)
    s = parse_raw_line("thread (1): T;a (a.py:1);leaf 4")
    assert s is not None and s.frames[-1] == Frame("leaf", "", 0)


def test_semicolons_spaces_and_unicode_in_names() -> None:
    s = parse_raw_line(
        "thread (7): Thrëad 1;<lambda> (my dir/ü.py:2);weird;name (a;b.py:5);"
        "Klass.método (x.py:9) 3"
    )
    assert s is not None
    assert s.thread_name == "Thrëad 1"
    assert s.frames == (
        Frame("<lambda>", "my dir/ü.py", 2),
        Frame("weird;name", "a;b.py", 5),
        Frame("Klass.método", "x.py", 9),
    )


def test_cmdline_with_quote_and_semicolon() -> None:
    s = parse_raw_line('process 9:"python -c "a";b";thread (9): MainThread;f (<string>:1) 1')
    assert s is not None
    assert s.processes == ((9, 'python -c "a";b'),)
    assert s.frames == (Frame("f", "<string>", 1),)


def test_malformed_lines_are_skipped() -> None:
    assert parse_raw_line("") is None
    assert parse_raw_line("no count here") is None
    assert parse_raw_line("thread (1): T;f (a.py:1) x") is None
    assert parse_raw("garbage\n\nthread (1): T;f (a.py:1) 2\n") == [
        RawStack(frames=(Frame("f", "a.py", 1),), count=2, tid=1, thread_name="T")
    ]


# Names as py-spy prints them: a function name never contains " (" (qualified names don't) nor
# starts like a pseudo-frame; a line-less file name must not end in ":<digits>"; a file name must
# not contain ");" and a thread name no ";" (the format cannot tell those apart). Everything else,
# including ';' in names, spaces, parens, quotes and unicode, round-trips.
_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\n\r"),
    max_size=20,
)
_names = _text.filter(lambda s: " (" not in s and not s.startswith(("thread (", "process ")))
_files = _text.filter(lambda s: s != "" and ");" not in s)


@st.composite
def _frames(draw: st.DrawFn) -> Frame:
    name = draw(_names)
    filename = draw(_files)
    line = draw(st.integers(min_value=0, max_value=100_000))
    if line == 0 and re.search(r":-?\d+$", filename):
        line = 1
    return Frame(name, filename, line)


@st.composite
def _stacks(draw: st.DrawFn) -> RawStack:
    procs = draw(
        st.lists(
            st.tuples(st.integers(1, 4_000_000), _text.filter(lambda s: '";' not in s)),
            max_size=3,
        )
    )
    tid = draw(st.none() | st.integers(0, 2**63))
    name = draw(_text.filter(lambda s: ";" not in s)) if tid is not None else ""
    frames = draw(st.lists(_frames(), max_size=8))
    count = draw(st.integers(0, 10**9))
    return RawStack(
        frames=tuple(frames),
        count=count,
        tid=tid,
        thread_name=name,
        processes=tuple(procs),
    )


@given(_stacks())
def test_round_trip(stack: RawStack) -> None:
    assert parse_raw_line(format_raw_line(stack)) == stack


@given(_frames())
def test_frame_round_trip(frame: Frame) -> None:
    from sofa_top.collectors.pyspy_raw import format_frame

    assert parse_frame(format_frame(frame)) == frame


@given(st.text(max_size=200))
def test_never_raises_on_arbitrary_text(text: str) -> None:
    for s in parse_raw(text):
        assert s.count >= 0
