"""Source lines belong to the session (``analysis.sources``), never to the process: two
sessions in one sofa-top (``serve``, the optimizer panel's re-runs) read their own
``train.py``, and a session's file records the lines it read, so a replay and
``record --json`` read those, whatever the files on disk say now. The analysis package keeps
no state of its own between calls."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from sofa_top.analysis.host import host_class
from sofa_top.analysis.sources import RecordedLines, SourceDirs, session_lines
from sofa_top.datamodel.samples import Frame, StackCount, StackWindow
from sofa_top.datamodel.snapshot import TargetInfo
from sofa_top.recording.hub import Session
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]
ANALYSIS = ROOT / "sofa_top" / "analysis"
LOOP = frozenset({("<module>", "train.py")})
# py-spy names a script relative to its folder: the same name in every project
HOST = (Frame("<module>", "train.py", 2),)
MODEL = (
    Frame("<module>", "train.py", 1),
    Frame("Module._call_impl", "torch/nn/modules/module.py", 1789),
)


def _project(tmp_path: Path, name: str, line2: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "train.py").write_text(f"out = model(batch)\n{line2}\n")
    return folder / "train.py"


def _record(tmp_path: Path, script: Path) -> Path:
    """A live session of ``python script`` (this process stands in for the target) that
    sampled the loop on line 2: its host time."""
    path = tmp_path / f"{script.parent.name}.sofa"
    target = TargetInfo(pid=os.getpid(), name="train", cmdline=("python", str(script)))
    s = Session(target, [], SessionStore(path), mode="attach")
    stacks = (
        StackCount(1, 7, "MainThread", HOST, 10, "python"),
        StackCount(1, 7, "MainThread", MODEL, 10, "compute"),
    )
    s._record([StackWindow(100.0, 101.0, 20.0, 20, stacks)])
    s.snapshot()
    s.stop()
    return path


def test_two_sessions_in_one_process_read_their_own_files(tmp_path: Path) -> None:
    a = _project(tmp_path, "a", "loss.item()")
    b = _project(tmp_path, "b", "batch = load()")
    for script, expected in ((a, "sync"), (b, "input"), (a, "sync")):
        lines = SourceDirs.of(["python", str(script)], str(tmp_path))
        assert host_class(HOST, "input", LOOP, lines) == expected
    path_a, path_b = _record(tmp_path, a), _record(tmp_path, b)
    for path, text in ((path_a, "loss.item()\n"), (path_b, "batch = load()\n")):
        r = SessionReader(path)
        meta = r.meta()
        r.close()
        assert ["train.py", 2, text] in meta["source_lines"]
        assert meta["source_dirs"][0] == str(path.parent / path.stem)


def test_a_replay_reads_the_lines_the_session_read(tmp_path: Path) -> None:
    script = _project(tmp_path, "a", "loss.item()")
    path = _record(tmp_path, script)
    script.write_text("out = model(batch)\nbatch = load()\n")  # the project moved on
    r = SessionReader(path)
    lines = session_lines(r.meta())
    r.close()
    assert isinstance(lines, RecordedLines)
    assert lines.line("train.py", 2) == "loss.item()\n"
    assert host_class(HOST, "input", LOOP, lines) == "sync"  # as live, not as the disk says
    assert lines.line("train.py", 9) == ""  # a line the session never read is not known


def test_a_file_of_an_older_version_reads_its_workloads_folders(tmp_path: Path) -> None:
    script = _project(tmp_path, "a", "loss.item()")
    lines = session_lines({"target": {"pid": 1, "cmdline": ["python", str(script)]}})
    assert lines.line("train.py", 2) == "loss.item()\n"


def _mutated_globals(tree: ast.Module) -> list[str]:
    """Module-level containers (list/dict/set literals or calls) that the module mutates."""
    containers: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        value = getattr(node, "value", None)
        mutable = isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            mutable = mutable or value.func.id in ("list", "dict", "set", "defaultdict", "deque")
        if mutable:
            containers |= {t.id for t in targets if isinstance(t, ast.Name)}
    mutators = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "clear"}
    found: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in mutators | {"remove", "discard", "popitem", "sort"}
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in containers
        ):
            found.append(f"{node.func.value.id}.{node.func.attr}")
        if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            for t in targets:
                if (
                    isinstance(t, ast.Subscript)
                    and isinstance(t.value, ast.Name)
                    and t.value.id in containers
                ):
                    found.append(f"{t.value.id}[...]")
        if isinstance(node, ast.Global):
            found.append("global " + ", ".join(node.names))
    return found


def test_the_analysis_keeps_no_module_level_state() -> None:
    found = {
        p.name: hits
        for p in sorted(ANALYSIS.glob("*.py"))
        if (hits := _mutated_globals(ast.parse(p.read_text())))
    }
    assert found == {}


def test_the_scan_finds_module_level_state() -> None:
    source = (
        "_DIRS: list[str] = []\n_SEEN = {}\nCACHE = set()\nN = 0\n"
        "def add(d):\n    global N\n    _DIRS.append(d)\n    _SEEN[d] = 1\n    CACHE.add(d)\n"
    )
    found = _mutated_globals(ast.parse(source))
    assert sorted(found) == ["CACHE.add", "_DIRS.append", "_SEEN[...]", "global N"]
