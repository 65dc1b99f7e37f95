"""Wire format, settings, launch environment and frame conversion (no subprocesses)."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sofa_top.agent import protocol
from sofa_top.agent.launch_env import INJECT_DIR, agent_env
from sofa_top.agent.protocol import MAX_FRAME, FrameError, FrameReader, encode
from sofa_top.agent.settings import AgentSettings, parse_settings
from sofa_top.agent.toggles import OptimizeSpec, PrefetchOptions
from sofa_top.collectors.agent_frames import convert_frame
from sofa_top.datamodel.samples import AgentInfo, Event, PipelineSample, StepSample

AGENT_DIR = Path(protocol.__file__).resolve().parent


def frames_of(data: bytes, chunk: int) -> list[dict[str, object]]:
    reader = FrameReader()
    out: list[dict[str, object]] = []
    for i in range(0, len(data), chunk):
        reader.feed(data[i : i + chunk])
        while (f := reader.next_frame()) is not None:
            out.append(f)
    assert reader.pending == 0
    return out


@given(
    st.lists(
        st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=20), max_size=5),
        max_size=5,
    ),
    st.integers(1, 64),
)
def test_frames_survive_any_split(objs: list[dict[str, object]], chunk: int) -> None:
    frames = [{**o, "type": "event"} for o in objs]
    assert frames_of(b"".join(encode(f) for f in frames), chunk) == frames


def test_oversized_frame_is_refused_from_its_header() -> None:
    reader = FrameReader()
    reader.feed(struct.pack(">I", MAX_FRAME + 1))
    with pytest.raises(FrameError, match="oversized"):
        reader.next_frame()


def test_encode_refuses_what_the_server_would_refuse() -> None:
    with pytest.raises(FrameError):
        encode({"type": "event", "message": "x" * MAX_FRAME})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"kind": "x"}', '"type"'),
        (b'{"type": 3}', '"type"'),
        (b'{"type": "steps", "x": NaN}', "non-finite"),
    ],
)
def test_bad_bodies_are_frame_errors(body: bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        protocol.decode_body(body)


def test_agent_package_is_stdlib_only() -> None:
    """The agent runs in the workload's interpreter: importing any of its modules loads
    nothing outside the standard library and the agent package itself."""
    code = (
        "import sys, json, pkgutil, importlib\n"
        "before = set(sys.modules)\n"
        "import sofa_top.agent as pkg\n"
        "names = [m.name for m in pkgutil.walk_packages(pkg.__path__, 'sofa_top.agent.')]\n"
        "for name in names:\n"
        "    if not name.endswith('.sitecustomize'):  # that one starts the agent\n"
        "        importlib.import_module(name)\n"
        "print(json.dumps([names, sorted(set(sys.modules) - before)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=AGENT_DIR.parents[1],
    ).stdout
    names, mods = json.loads(out)
    assert {"sofa_top.agent.core", "sofa_top.agent.hooks_tf", "sofa_top.agent.api"} <= set(names)
    outside = [
        m
        for m in mods
        if m.split(".")[0] not in sys.stdlib_module_names
        and not (m == "sofa_top" or m.startswith("sofa_top.agent"))
    ]
    assert outside == []


def _module_level_imports(tree: ast.Module) -> list[str]:
    """Imports that run when the module is imported (``if TYPE_CHECKING:`` blocks do not)."""
    found: list[str] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody
            for h in node.handlers:
                todo += h.body
    return found


def test_agent_sources_import_nothing_else_from_sofa_top_at_import_time() -> None:
    for path in AGENT_DIR.rglob("*.py"):
        for name in _module_level_imports(ast.parse(path.read_text())):
            if name.split(".")[0] == "sofa_top":
                assert name.startswith("sofa_top.agent"), (path, name)


def test_settings_defaults_and_problems() -> None:
    assert parse_settings(None) == AgentSettings()
    assert parse_settings("not json").problems
    s = parse_settings(
        json.dumps(
            {
                "queue_max": 5,
                "flush_interval_s": 0.5,
                "optimize": {"prefetch": 2},
                "disabled_hooks": ["keras-fit", "nope"],
                "bogus": 1,
                "send_timeout_s": "slow",
            }
        )
    )
    assert s.queue_max == 5
    assert s.flush_interval_s == 0.5
    # a malformed toggle is left out and listed, like any other setting
    assert s.optimize == OptimizeSpec()
    assert any("prefetch" in p for p in s.problems)
    assert s.disabled_hooks == ("keras-fit", "nope")
    assert s.send_timeout_s == AgentSettings().send_timeout_s
    assert any("bogus" in p for p in s.problems)
    assert any("nope" in p for p in s.problems)
    assert any("send_timeout_s" in p for p in s.problems)
    clean = AgentSettings(
        queue_max=5,
        disabled_hooks=("keras-fit",),
        optimize=OptimizeSpec(xla=True, prefetch=PrefetchOptions(parallelism=8)),
    )
    assert parse_settings(json.dumps(clean.to_json())) == clean


def test_agent_env_puts_inject_dir_first_and_keeps_the_rest(tmp_path: Path) -> None:
    base = {"PYTHONPATH": os.pathsep.join(["/a", str(INJECT_DIR), "", "/b"])}
    env = agent_env(tmp_path / "s.sock", {"optimize": {}}, base=base)
    parts = env["PYTHONPATH"].split(os.pathsep)
    assert parts == [str(INJECT_DIR), "/a", "", "/b"]
    assert (INJECT_DIR / "sitecustomize.py").is_file()
    assert env["SOFA_TOP_SOCKET"] == str(tmp_path / "s.sock")
    assert json.loads(env["SOFA_TOP_AGENT_SETTINGS"]) == {"optimize": {}}
    assert agent_env("x", base={})["PYTHONPATH"] == str(INJECT_DIR)


def test_convert_frames_to_samples() -> None:
    steps = convert_frame(
        {
            "type": "steps",
            "pid": 1,
            "source": "tf-eager",
            "data": [
                *(3, 100_000_000, 100_500_000, 200_000, 8, 150_000),
                *(4, 100_500_000, 101_000_000, 0, None, None),
            ],
        },
        pid=42,
    )
    assert steps == [
        StepSample(100.5, 3, 100.0, 0.5, 0.2, "tf-eager", 8, 42, 0.15),
        StepSample(101.0, 4, 100.5, 0.5, 0.0, "tf-eager", None, 42, None),
    ]
    (info,) = convert_frame(
        {
            "type": "info",
            "t": 5.0,
            "python": "3.11.7",
            "frameworks": [["torch", "2.13.0"]],
            "hooks_applied": ["torch-dataloader"],
            "hooks_skipped": [["keras-fit", "not imported by the workload"]],
            "dropped": 7,
        },
        pid=42,
    )
    assert info == AgentInfo(
        5.0,
        42,
        "3.11.7",
        (("torch", "2.13.0"),),
        ("torch-dataloader",),
        (("keras-fit", "not imported by the workload"),),
        7,
    )
    (pipe,) = convert_frame(
        {
            "type": "pipeline",
            "t": 1.0,
            "framework": "tf.data",
            "note": "n",
            "stages": [
                {
                    "name": "MapDataset",
                    "kind": "map",
                    "parallelism": 1,
                    "buffer": None,
                    "self_time_s": None,
                    "is_bottleneck": True,
                }
            ],
        },
        pid=42,
    )
    assert isinstance(pipe, PipelineSample)
    assert pipe.stages[0].is_bottleneck
    assert pipe.stages[0].parallelism == 1
    (ev,) = convert_frame({"type": "workers", "t": 1.0, "workers": [5, 6]}, pid=42)
    assert isinstance(ev, Event)
    assert ev.kind == "agent-workers"
    assert ev.data["workers"] == [5, 6]
    (unknown,) = convert_frame({"type": "from-the-future"}, pid=42)
    assert isinstance(unknown, Event)
    assert unknown.kind == "agent-unknown-frame"


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "steps", "source": "s", "data": [1, 2, 1, 0, None, None]},  # ends before it starts
        {"type": "steps", "source": "s", "data": [1, 1, 2, -1, None, None]},  # negative wait
        {"type": "steps", "source": "s", "data": [True, 1, 2, 0, None, None]},
        {"type": "steps", "source": "s", "data": [1, 1.5, 2, 0, None, None]},
        {"type": "steps", "source": "s", "data": [1, 1, 2, 0, None]},  # a partial row
        {"type": "steps", "source": "s", "data": [1, 1, 2, 0, None, -5]},  # negative wait CPU
        {"type": "steps", "source": "s", "data": [1, 1, 2, 0, None, 1.5]},
        {"type": "steps", "source": "s", "data": [1, 1, 2, 0, "8", None]},
        {"type": "steps", "data": [1, 1, 2, 0, None, None]},  # no source
        {"type": "steps", "source": "s", "data": {}},
        {"type": "info", "t": 1.0, "hooks_applied": [1]},
        {"type": "info", "t": "x"},
        {"type": "pipeline", "t": 1.0, "framework": "x", "stages": [{"kind": "map"}]},
        {"type": "workers", "t": 1.0, "workers": ["1"]},
        {"type": "event", "t": 1.0, "kind": "k", "data": []},
    ],
)
def test_malformed_frames_are_errors(frame: dict[str, object]) -> None:
    with pytest.raises(FrameError):
        convert_frame(frame, pid=1)


@settings(max_examples=200)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    ),
    st.sampled_from(protocol.FRAME_TYPES),
)
def test_conversion_never_fails_other_than_frame_error(payload: object, kind: str) -> None:
    frame = {"type": kind, "t": 1.0, "data": payload, "stages": payload, "workers": payload}
    if isinstance(payload, dict):
        frame.update(payload)
        frame["type"] = kind
    with contextlib.suppress(FrameError):
        convert_frame(frame, pid=1)
