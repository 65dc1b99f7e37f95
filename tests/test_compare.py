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

# Input wait depends on the settings the agent received: "prefetch" makes input 3x faster (and
# says so through the agent, as a toggle's installer does); "xla" changes nothing but the loss,
# and says nothing: it did not apply; "depth_first" applies and changes nothing.
SYNTH = """
import json, os, sys, time
from sofa_top.agent import api
from sofa_top.agent.optimize_state import applied
opt = json.loads(os.environ.get("SOFA_TOP_AGENT_SETTINGS", "{}")).get("optimize", {})
input_s = 0.004 if opt.get("prefetch") else 0.012
loss = "nan" if opt.get("xla") else "0.25"
if opt.get("prefetch"):
    applied("prefetch", "synth: input read 3x faster")
if opt.get("depth_first"):
    applied("depth_first", "synth: nothing that changes its speed")
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
        repeats=3,
        steps=30,
        warmup_steps=3,
        on_progress=lambda e: isinstance(e, RunStarted) and order.append(e.config),
        out_dir=tmp_path / "out",
    )  # fmt: skip
    # A B C A B A B: xla changed nothing in its first run, so it is not run again
    assert order == ["baseline", "prefetch", "xla", "baseline", "prefetch", "baseline", "prefetch"]
    runs = {c.config: c for c in r.runs}
    base, pre, xla = runs["baseline"], runs["prefetch"], runs["xla"]
    # 16 ms vs 8 ms steps of 4 samples: 250 vs 500 samples/s, a 2x speedup
    assert base.throughput.unit == "samples/s"
    assert 200 < (base.throughput.median or 0) < 260
    assert 1.7 < (pre.speedup or 0) < 2.1
    assert (base.throughput.min or 0) <= base.throughput.median <= (base.throughput.max or 0)
    assert base.speedup == pytest.approx(1.0)
    assert len(pre.sessions) == 3 and all(Path(s).is_file() for s in pre.sessions)
    assert base.verdict == "input-bound"
    assert pre.applied == ["prefetch"] and pre.effect == "faster"
    assert pre.interval is not None and pre.interval[0] > (base.throughput.max or 0)
    # xla did not apply: not timed as if it had run, and says why (a stdlib job)
    assert xla.applied == [] and xla.not_applied[0][0] == "xla"
    assert "not a TF or PyTorch job" in xla.not_applied[0][1]
    assert xla.speedup is None and xla.effect is None and "toggle-not-applied" in xla.flags
    assert "non-finite-loss" in xla.flags and "non-finite-loss" not in base.flags
    assert r.best == "prefetch" and r.best_note is None
    # the baseline sleeps for its input: a latency cause, so prefetch was searched, and the
    # search stopped when a level gained nothing (the synthetic input ignores parallelism)
    assert r.diagnosis is not None and r.diagnosis.cause == "latency"
    assert r.search is not None
    cores = r.diagnosis.cores
    assert [lv.parallelism for lv in r.search.levels] == [cores, 2 * cores]
    assert "less than 10% better" in r.search.stop and r.search.chosen == cores
    assert pre.parallelism == cores
    # 12 ms input + 4 ms compute: at 1 parallel input the bound is 1/12 ms, 333 samples/s
    assert base.headroom.bound == "latency" and base.headroom.unit == "samples/s"
    assert 0.6 < (base.headroom.fraction_reached or 0) < 0.9
    render_compare(r)


def test_noise_runs_more_rounds_and_names_no_best(synth: list[str], tmp_path: Path) -> None:
    """A toggle that applies but changes nothing: its interval overlaps the baseline's, so
    compare runs more rounds (up to ``max_repeats``), then names no best, with the spread."""
    order: list[str] = []
    r = run_compare(
        synth, ["baseline", "depth-first"], repeats=2, steps=20, warmup_steps=3,
        on_progress=lambda e: isinstance(e, RunStarted) and order.append(e.config),
        out_dir=tmp_path / "out", max_repeats=3, budget_s=600.0,
    )  # fmt: skip
    same = r.run("depth-first")
    assert same is not None and same.applied == ["depth_first"]
    if same.effect == "unclear":  # the usual case: 2 identical workloads
        assert order == ["baseline", "depth-first"] * 3 and r.rounds == 3
        assert r.best is None and r.best_note is not None
        assert r.best_note.startswith("no clear difference at this noise: baseline ")
        assert "depth-first" in r.best_note and "3 runs" in r.best_note
    else:  # a busy machine can still part 3 runs of each: then it is named, never guessed
        assert (r.best == "depth-first") == (same.effect == "faster")
    assert same.speedup is not None and same.interval is not None
    # no time left: no more rounds
    quick = run_compare(
        synth, ["baseline", "depth-first"], repeats=2, steps=20, warmup_steps=3,
        out_dir=tmp_path / "quick", max_repeats=5, budget_s=0.0,
    )  # fmt: skip
    assert quick.rounds == 2


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
    assert d["schema"] == 3
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
