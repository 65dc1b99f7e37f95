"""The README's first screen, beside a CPU hog: ``sofa-top demo``'s workload (a serial tf.data
map that waits 4 ms per file on simulated storage, then decodes) must be judged latency-bound
with the hog's load named, never "parallelism cannot help", and agree with what a comparison
of the advised toggle measures (the panel's Re-run & compare runs the same ``run_compare``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CTRL_C, record_until, run_cli, validate_compare_json

from sofa_top.demos import DEMOS
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.report import session_summary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def test_the_demo_beside_a_hog_names_latency_and_agrees_with_compare(
    tmp_path: Path, cpu_hog: subprocess.Popen[bytes]
) -> None:
    cmd = [sys.executable, str(DEMOS["tf"]), "--seconds", "600"]

    def enough(r: SessionReader) -> bool:
        return len(r.steps()) >= 25 and len(r.points("sched.tree.on_cpu")) >= 10

    proc = record_until(tmp_path / "demo.sofa", enough, "25 demo steps", "--", *cmd, timeout=400)
    assert proc.returncode == CTRL_C, proc.stderr
    v = json.loads(proc.stdout)["verdict"]
    ev = v["evidence"]
    text = " | ".join(v["recommendations"])
    assert v["kind"] == "input-bound" and ev["input_cause"] == "latency", v
    assert "waits on I/O" in v["headline"] and "cannot help" not in text
    # the hog's core is measured and said: what other processes keep busy, by name
    assert ev["others_cores"] >= 0.5 and ev["neighbours"], ev
    assert (
        "other processes keep" in v["headline"]
        and str(ev["neighbours"][0]["pid"]) in (v["headline"])
    )
    # parallelism past the cores, first
    first = v["recommendations"][0]
    m = re.search(r"num_parallel_calls=(\d+)", first)
    assert m is not None and int(m.group(1)) > ev["cores"], first
    assert cpu_hog.poll() is None

    proc = run_cli(
        "compare", "--json", "--configs", "baseline,prefetch", "--repeats", "2",
        "--max-repeats", "5", "--steps", "20", "--warmup-steps", "3",
        "--parallelism", m.group(1), "-o", str(tmp_path / "cmp"), "--", *cmd,
        timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    validate_compare_json(result)
    pre = next(r for r in result["runs"] if r["config"] == "prefetch")
    assert pre["applied"] == ["prefetch"] and pre["effect"] == "faster", pre
    assert pre["speedup"] > 2 and "data-changed" not in pre["flags"], pre
    assert result["best"] == "prefetch"
    # the comparison's sessions carry what it measured: their verdict quotes the win
    base = next(r for r in result["runs"] if r["config"] == "baseline")
    after = session_summary(base["sessions"][0])["verdict"]
    assert (
        f"measured: prefetch x{pre['speedup']:.2f} at parallelism {m.group(1)}"
        in (after["headline"])
    ), after
    assert not any("cannot help" in r for r in after["recommendations"])
