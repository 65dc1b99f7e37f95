"""compare: the interleaved runner, its statistics and its JSON, on stdlib workloads."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
from conftest import validate_compare_json

from sofa_top.cli.compare import add_compare_parser, compare_main, render_compare
from sofa_top.optimizers.compare import RunStarted, run_compare

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
        on_progress=lambda e: isinstance(e, RunStarted) and order.append(e.config),
        out_dir=tmp_path / "out",
    )  # fmt: skip
    assert order == ["baseline", "prefetch", "xla"] * 2  # A B C A B C
    runs = {c.config: c for c in r.runs}
    base, pre, xla = runs["baseline"], runs["prefetch"], runs["xla"]
    # 16 ms vs 8 ms steps of 4 samples: 250 vs 500 samples/s, a 2x speedup
    assert base.throughput.unit == "samples/s"
    assert 200 < (base.throughput.median or 0) < 260
    assert 1.7 < (pre.speedup or 0) < 2.1
    assert (base.throughput.min or 0) <= base.throughput.median <= (base.throughput.max or 0)
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
    assert r.search is not None
    assert [lv.parallelism for lv in r.search.levels] == [r.diagnosis.cores]
    assert "did not apply" in r.search.stop and r.search.chosen is None
    assert pre.parallelism is None and pre.optimize.to_json() == {"prefetch": True}
    # 12 ms input + 4 ms compute: at 1 parallel input the bound is 1/12 ms, 333 samples/s
    assert base.headroom.bound == "latency" and base.headroom.unit == "samples/s"
    assert 0.6 < (base.headroom.fraction_reached or 0) < 0.9
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
    validate_compare_json(d)
    assert d["schema"] == 2
    assert [r["config"] for r in d["runs"]] == ["baseline", "prefetch"]
    # --parallelism: no search, the prefetch configuration asks for it
    assert d["search"]["chosen"] == 3 and d["search"]["levels"] == []
    assert [r["parallelism"] for r in d["runs"]] == [None, 3]
    assert d["runs"][1]["optimize"] == {"prefetch": {"parallelism": 3}}


def test_compare_piped_is_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    """Written to a pipe or a file, the table is not cut to the 80 columns rich assumes there."""
    import io

    from sofa_top.agent.toggles import OptimizeSpec, PrefetchOptions
    from sofa_top.optimizers.compare.results import CompareResult, ConfigResult
    from sofa_top.optimizers.measures import Throughput

    why = (
        "not sharded: DataLoader over Stream keeps num_workers=0: workers 0 and 1 of 2 yield "
        "the same samples (16 of the first 16): it does not shard by get_worker_info()"
    )
    base = ConfigResult("baseline", OptimizeSpec(), throughput=Throughput(379.2, 370.1, 390.4,
                        "samples/s"), speedup=1.0, verdict="input-bound")  # fmt: skip
    pre = ConfigResult(
        "prefetch", OptimizeSpec(prefetch=PrefetchOptions()), not_applied=[("prefetch", why)],
        throughput=Throughput(380.8, 371.0, 392.2, "samples/s"), speedup=1.004,
        verdict="input-bound", flags=["toggle-not-applied"], advice=["shard it per worker"],
    )  # fmt: skip
    result = CompareResult(["python", "train.py"], 1, 60, None, 3, [base, pre], "baseline", [])
    out = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stdout", out)
    render_compare(result)
    text = out.getvalue()
    assert "…" not in text
    for whole in ("throughput (median, min-max)", "applied / flags", "toggle-not-applied",
                  "input-bound", "380.80 (371.00-392.20) samples/s"):  # fmt: skip
        assert whole in text, whole
    joined = " ".join(line.strip(" │┃") for line in text.splitlines())
    assert "get_worker_info()" in joined and "prefetch: to apply it: shard it per worker" in text
