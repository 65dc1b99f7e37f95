"""compare: the interleaved runner, its statistics and its JSON, on stdlib workloads."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from sofa_top.optimizers.compare import (
    add_compare_parser,
    compare_main,
    render_compare,
    run_compare,
)

# Input wait depends on the settings the agent received: "prefetch" makes input 3x faster.
SYNTH = """
import json, os, sys, time
from sofa_top.agent import api
opt = json.loads(os.environ.get("SOFA_TOP_AGENT_SETTINGS", "{}")).get("optimize", {})
input_s = 0.004 if opt.get("prefetch") else 0.012
loss = "nan" if opt.get("xla") else "0.25"
def batches():
    while True:
        time.sleep(input_s)
        yield 1
for i, _ in enumerate(api.iterate(batches(), batch_size=4)):
    time.sleep(0.004)
    if i % 5 == 0:
        print(f"step {i} loss {loss}", flush=True)
"""


@pytest.fixture
def synth(tmp_path: Path) -> list[str]:
    p = tmp_path / "synth.py"
    p.write_text(SYNTH)
    return [sys.executable, str(p)]


def test_interleaved_runs_known_speedup_and_flags(synth: list[str], tmp_path: Path) -> None:
    order: list[str] = []
    r = run_compare(
        synth,
        ["baseline", "prefetch", "xla"],
        repeats=2,
        steps=30,
        warmup_steps=3,
        on_progress=lambda m: m.startswith("run") and order.append(m.split()[2].rstrip(":")),
        out_dir=tmp_path / "out",
    )  # fmt: skip
    assert order == ["baseline", "prefetch", "xla"] * 2  # A B C A B C
    runs = {c.config: c for c in r.runs}
    base, pre, xla = runs["baseline"], runs["prefetch"], runs["xla"]
    # 16 ms vs 8 ms steps of 4 samples: 250 vs 500 samples/s, a 2x speedup
    assert base.throughput["unit"] == "samples/s"
    assert 200 < base.throughput["median"] < 260
    assert 1.7 < (pre.speedup or 0) < 2.1
    assert base.throughput["min"] <= base.throughput["median"] <= base.throughput["max"]
    assert base.speedup == pytest.approx(1.0)
    assert len(pre.sessions) == 2 and all(Path(s).is_file() for s in pre.sessions)
    assert base.verdict == "input-bound"
    # stdlib workload: the toggles cannot apply, and say why
    assert pre.applied == [] and pre.not_applied[0][0] == "prefetch"
    assert "toggle-not-applied" in pre.flags
    assert "non-finite-loss" in xla.flags and "non-finite-loss" not in base.flags
    assert r.best == "prefetch"  # the nan run is never best
    # the baseline sleeps for its input: a latency cause, so prefetch was searched, and the
    # search stopped at its first level since a stdlib loop has nothing to parallelize
    assert r.diagnosis is not None and r.diagnosis.cause == "latency"
    assert [lv["parallelism"] for lv in r.search["levels"]] == [r.diagnosis.cores]
    assert "did not apply" in r.search["stop"] and r.search["chosen"] is None
    assert pre.parallelism is None and pre.optimize == {"prefetch": True}
    # 12 ms input + 4 ms compute: at 1 parallel input the bound is 1/12 ms, 333 samples/s
    assert base.headroom["bound"] == "latency" and base.headroom["unit"] == "samples/s"
    assert 0.6 < base.headroom["fraction_reached"] < 0.9
    render_compare(r)


def test_failed_run_is_flagged(tmp_path: Path) -> None:
    r = run_compare(
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        ["baseline"],
        repeats=1,
        steps=5,
        warmup_steps=1,
        out_dir=tmp_path,
    )
    assert r.runs[0].flags == ["run-failed"]
    assert r.best is None


def _check_schema(d: dict[str, object]) -> None:
    assert set(d) >= {"runs", "best", "changes", "schema", "cmd", "repeats", "warmup_steps"}
    runs = d["runs"]
    assert isinstance(runs, list) and runs
    for run in runs:
        assert set(run) >= {
            "config",
            "applied",
            "not_applied",
            "throughput",
            "speedup",
            "verdict",
            "compile_s",
            "flags",
            "sessions",
        }
        assert set(run["throughput"]) == {"median", "min", "max", "unit"}
        assert set(run["headroom"]) >= {"throughput", "fraction_reached", "unit", "bound"}
        assert run["parallelism"] is None or run["parallelism"] >= 1
        assert all(isinstance(p, str) for p in run["sessions"])
        assert all(isinstance(x, list) and len(x) == 2 for x in run["not_applied"])
    assert d["best"] in [r["config"] for r in runs]
    diag = d["diagnosis"]
    assert isinstance(diag, dict) and diag["cause"] in ("cpu", "latency", "mixed", None)
    assert {"cores", "compute_s", "input_s", "cpu_per_step_s", "bounds"} <= set(diag)
    search = d["search"]
    assert isinstance(search, dict) and {"levels", "chosen", "stop"} <= set(search)
    for level in search["levels"]:
        assert {"parallelism", "throughput", "rss", "memory"} <= set(level)


def test_compare_json_schema(
    synth: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command")
    add_compare_parser(sub)
    args = p.parse_args(
        ["compare", "--configs", "baseline,prefetch", "--repeats", "1", "--steps", "10",
         "--warmup-steps", "2", "--parallelism", "3", "--json", "-o", str(tmp_path)]
    )  # fmt: skip
    args.cmd = synth
    assert compare_main(args) == 0
    d = json.loads(capsys.readouterr().out)
    _check_schema(d)
    assert d["schema"] == 2
    assert [r["config"] for r in d["runs"]] == ["baseline", "prefetch"]
    # --parallelism: no search, the prefetch configuration asks for it
    assert d["search"]["chosen"] == 3 and d["search"]["levels"] == []
    assert [r["parallelism"] for r in d["runs"]] == [None, 3]
    assert d["runs"][1]["optimize"] == {"prefetch": {"parallelism": 3}}
