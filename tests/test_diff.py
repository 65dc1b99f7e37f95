"""``sofa-top diff A B``: on real recorded sessions (``recordings``: a torch loop that waits for
its DataLoader, and one that computes), through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from recordings import Recordings

SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))


def sofa(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SOFA_TOP, *args], capture_output=True, text=True, timeout=120)


def rows(out: str) -> dict[tuple[str, str], dict[str, Any]]:
    data = json.loads(out)
    return {(r["section"], r["name"]): r for r in data["rows"]}


def test_diff_help() -> None:
    r = sofa("diff", "--help")
    assert r.returncode == 0 and "--threshold" in r.stdout and "--json" in r.stdout


@pytest.mark.slow
def test_same_session_no_regression(recordings: Recordings) -> None:
    a = recordings.get("torch input")
    r = sofa("diff", str(a.path), str(a.path), "--json", "--threshold", "0")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["kind"] == "session" and data["regressed"] is False
    assert all(row["a"] == row["b"] for row in data["rows"])
    phase = rows(r.stdout)
    main = a.summary["steps"].get("phase") or "all"
    assert phase[(f"phase {main}", "median_step_s")]["a"] == a.summary["steps"]["median_step_s"]


@pytest.mark.slow
def test_input_bound_against_compute_bound(recordings: Recordings, tmp_path: Path) -> None:
    """B waits for input where A computed: the verdict fields differ row by row, the input-wait
    share grew by tens of points, and a threshold gates on it (exit 1); the same pair read from
    ``record --json`` files gives the same rows."""
    a, b = recordings.get("torch compute"), recordings.get("torch input")
    r = sofa("diff", str(a.path), str(b.path), "--json", "--threshold", "10")
    assert r.returncode == 1, r.stderr
    got = rows(r.stdout)
    assert got[("verdict", "kind")]["a"] == a.summary["verdict"]["kind"]
    assert got[("verdict", "kind")]["b"] == b.summary["verdict"]["kind"] == "input-bound"
    main_a = a.summary["steps"].get("phase") or "all"
    main_b = b.summary["steps"].get("phase") or "all"
    if main_a == main_b:
        wait = got[(f"phase {main_a}", "input_wait_fraction")]
        expect = (
            b.summary["steps"]["input_wait_fraction"] - a.summary["steps"]["input_wait_fraction"]
        )
        assert wait["change"] == pytest.approx(expect)
        assert wait["regressed"] is (expect > 0.10)
        assert expect > 0.10
    assert json.loads(r.stdout)["regressions"]
    # B against A: the input wait fell, nothing in the phases regressed on it
    back = rows(sofa("diff", str(b.path), str(a.path), "--json", "--threshold", "10").stdout)
    assert not any(
        row["regressed"] for (sec, name), row in back.items() if name == "input_wait_fraction"
    )
    # the same pair from record --json files
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(json.dumps(a.summary))
    fb.write_text(json.dumps(b.summary))
    r2 = sofa("diff", str(fa), str(fb), "--json", "--threshold", "10")
    assert r2.returncode == 1
    assert [x for x in rows(r2.stdout).values()] == [x for x in got.values()]
    # people's table: the regression is named, the exit status the same
    r3 = sofa("diff", str(a.path), str(b.path), "--threshold", "10")
    assert r3.returncode == 1 and "regressed past 10%" in r3.stdout
    # no threshold: a report, exit 0
    assert sofa("diff", str(a.path), str(b.path)).returncode == 0


def test_bad_input_one_line(tmp_path: Path, recordings: Recordings) -> None:
    missing = sofa("diff", str(tmp_path / "nope.sofa"), "last")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "Traceback" not in missing.stderr
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}')
    r = sofa("diff", str(junk), str(junk))
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"sofa-top: {junk} is neither a 'record --json' summary nor a 'compare --json' result"
    )
    compare = tmp_path / "c.json"
    compare.write_text(json.dumps({"runs": [], "best": None}))
    notjson = tmp_path / "n.json"
    notjson.write_text("{")
    assert sofa("diff", str(notjson), str(compare)).returncode == 2
    bad = sofa("diff", str(compare), str(junk), "--threshold", "-3")
    assert bad.returncode == 2 and "must be 0 or more" in bad.stderr


@pytest.mark.slow
def test_session_against_compare_refused(recordings: Recordings, tmp_path: Path) -> None:
    compare = tmp_path / "c.json"
    compare.write_text(json.dumps({"runs": [], "best": None}))
    a = recordings.get("torch input")
    r = sofa("diff", str(a.path), str(compare))
    assert r.returncode == 2 and "cannot diff a session" in r.stderr


# A stdlib loop whose input takes argv[1] seconds a step (its steps marked by the agent's api).
SYNTH = """
import sys, time
from sofa_top.agent import api
input_s = float(sys.argv[1])
def batches():
    while True:
        time.sleep(input_s)
        yield 1
for i, _ in enumerate(api.iterate(batches(), batch_size=4)):
    time.sleep(0.004)
"""


@pytest.mark.slow
def test_two_compare_results(tmp_path: Path) -> None:
    """Two real ``compare --json`` runs of one loop, the second with 8x slower input: its
    baseline throughput fell past the threshold with the ranges apart (exit 1)."""
    script = tmp_path / "synth.py"
    script.write_text(SYNTH)
    out = {}
    for name, input_s in (("fast", "0.004"), ("slow", "0.032")):
        r = sofa("compare", "--configs", "baseline", "--repeats", "2", "--steps", "20",
                 "--warmup-steps", "2", "--json", "-o", str(tmp_path / name), "--",
                 sys.executable, str(script), input_s)  # fmt: skip
        assert r.returncode == 0, r.stderr
        out[name] = tmp_path / f"{name}.json"
        out[name].write_text(r.stdout)
    same = sofa("diff", str(out["fast"]), str(out["fast"]), "--json", "--threshold", "20")
    assert same.returncode == 0 and json.loads(same.stdout)["kind"] == "compare"
    r = sofa("diff", str(out["fast"]), str(out["slow"]), "--json", "--threshold", "20")
    assert r.returncode == 1, r.stdout + r.stderr
    row = next(x for x in rows(r.stdout).values() if x["name"].startswith("throughput median"))
    assert row["section"] == "config baseline" and row["regressed"]
    assert row["change"] == pytest.approx(row["b"] / row["a"] - 1)
    assert row["change"] < -0.4  # 8 ms steps against 36 ms, sleeps overshooting on a busy machine
