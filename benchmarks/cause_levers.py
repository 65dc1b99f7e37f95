"""Cause vs measured lever, per input shape, quiet and beside a CPU hog (issue 21's table).

    .venv/bin/python benchmarks/cause_levers.py [--repeats 3] [--max-repeats 5] [--steps 30]
                                                [--only SHAPE ...] [--hog only|both|none]
                                                [--share MS ...] [--levers prefetch,threads]
                                                [--json FILE]

For each shape (``SHAPES``: the test set of ``tests/test_cause_truth.py`` plus the demo) and
condition (quiet: this machine as it is; hog: one ``python -c "while True: pass"`` beside it),
``sofa-top record --json`` judges the workload (until it has run ``STEPS_JUDGED`` steps), then
``sofa-top compare`` measures both cheap levers against the baseline: ``prefetch`` (at the
parallelism the verdict advises, else the search's) and ``threads``. Printed per row: the cause
and the producers' time split, the verdict's stance on each lever (``advised``, ``unmeasured``:
offered as not measured, ``ruled out``, ``-``: not mentioned), and what compare measured:
speedup median (the run spread over the baseline median, n runs) and whether its interval
cleared the baseline's (``faster`` / ``slower`` / ``unclear``). The load average before and
after each row says how quiet "quiet" was.

``--share MS`` (repeatable) runs ``tests/workloads/input_share.py --input-ms MS`` instead: a
compute-heavy loop whose serial input costs MS of CPU per batch, for the input share at which
the input lever starts to pay (``analysis.verdicts.INPUT_BOUND_FRACTION``); its rows add the
verdict's input fraction and the bound ``1/(1-f)`` on what any input lever can gain.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sofa_top.demos import DEMOS
from sofa_top.optimizers.advice import toggles_off
from sofa_top.recording.reader import SessionReader

ROOT = Path(__file__).resolve().parent.parent
W = ROOT / "tests" / "workloads"
SOFA = str(Path(sys.executable).with_name("sofa-top"))
SHAPES: dict[str, tuple[list[str], str]] = {
    "cpu": ([str(W / "input_shapes_torch.py"), "--shape", "cpu"], "torch"),
    "latency": ([str(W / "input_shapes_torch.py"), "--shape", "latency"], "torch"),
    "tf-latency": ([str(W / "input_shapes_tf.py"), "--shape", "latency"], "tensorflow"),
    "compute": ([str(W / "lbfgs_threads.py"), "--hidden", "128"], "torch"),
    "moderate": ([str(W / "input_share.py"), "--input-ms", "1"], "torch"),
    "tf-repeat": (
        [str(W / "periodic_streams.py"), "--framework", "tf", "--items", "40"],
        "tensorflow",
    ),
    "short-epoch": (
        [str(W / "periodic_streams.py"), "--framework", "torch", "--items", "128"],
        "torch",
    ),
    "demo": ([str(DEMOS["tf"])], "tensorflow"),
}
STEPS_JUDGED = 40
LEVERS = ("prefetch", "threads")


def share_shape(ms: float) -> str:
    """A ``--share`` row's shape name (added to ``SHAPES``)."""
    name = f"share-{ms:g}ms"
    SHAPES[name] = ([str(W / "input_share.py"), "--input-ms", f"{ms:g}"], "torch")
    return name


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _judge(argv: list[str], out: Path, steps: int) -> dict[str, Any]:
    """``record --json`` until ``steps`` steps are in the session, then Ctrl-C."""
    rec = subprocess.Popen(
        [SOFA, "record", "--json", "-o", str(out), "--", sys.executable, *argv, "--seconds", "900"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    end = time.monotonic() + 600
    while time.monotonic() < end:
        time.sleep(1.0)
        try:
            r = SessionReader(out)
            try:
                if len(r.steps()) >= steps and len(r.points("sched.tree.on_cpu")) >= 10:
                    break
            finally:
                r.close()
        except Exception:
            continue
    rec.send_signal(signal.SIGINT)
    stdout, _ = rec.communicate(timeout=120)
    return json.loads(stdout)["verdict"]  # type: ignore[no-any-return]


def stances(verdict: dict[str, Any], fw: str) -> dict[str, str]:
    """The verdict's stance on each lever, from its advice."""
    off = toggles_off(fw, verdict["kind"], None, set(verdict["toggles"]))
    out = {t: "ruled out" if t in off else "-" for t in LEVERS}
    for r, t in zip(verdict["recommendations"], verdict["toggles"], strict=True):
        if t in out and out[t] == "-":
            out[t] = "unmeasured" if "not measured here" in r else "advised"
    return out


def _parallelism(verdict: dict[str, Any]) -> str | None:
    for r in verdict["recommendations"]:
        m = re.search(r"(?:num_workers|num_parallel_calls)=(\d+)", r)
        if m:
            return m.group(1)
    return None


def _compare(argv: list[str], out: Path, a: argparse.Namespace, par: str | None) -> Any:
    steps = a.steps if "lbfgs" not in argv[0] else max(6, a.steps // 4)
    cmd = [
        SOFA, "compare", "--json", "--configs", ",".join(("baseline", *a.levers)),
        "--repeats", str(a.repeats), "--max-repeats", str(a.max_repeats),
        "--steps", str(steps), "--warmup-steps", "3", "-o", str(out),
    ]  # fmt: skip
    if par is not None:
        cmd += ["--parallelism", par]
    proc = subprocess.run(
        [*cmd, "--", sys.executable, *argv, "--seconds", "900"],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return json.loads(proc.stdout)


def _lever_row(result: Any, t: str) -> dict[str, Any]:
    runs = {r["config"]: r for r in result["runs"]}
    base, run = runs["baseline"], runs[t]
    bmed = base["throughput"]["median"]
    rates = [run["throughput"]["min"], run["throughput"]["max"]]
    n = len(run["sessions"])
    spread = [x / bmed if x and bmed else None for x in rates]
    return {
        "speedup": run["speedup"],
        "spread": spread,
        "n": n,
        "effect": run["effect"] or ("not applied" if not run["applied"] else None),
        "flags": run["flags"],
        "parallelism": run["parallelism"],
    }


def row(shape: str, hog: bool, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    argv, fw = SHAPES[shape]
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if hog else None
    load0 = _load()
    try:
        v = _judge(argv, work / f"{shape}-{hog}.sofa", STEPS_JUDGED if shape != "compute" else 8)
        result = _compare(argv, work / f"{shape}-{hog}-cmp", a, _parallelism(v))
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    ev = v["evidence"]
    return {
        "shape": shape,
        "hog": hog,
        "kind": v["kind"],
        "cause": ev.get("input_cause"),
        "split": ev.get("input_time_split"),
        "others_cores": ev.get("others_cores"),
        "stances": stances(v, fw),
        "levers": {t: _lever_row(result, t) for t in a.levers},
        "input_fraction": ev.get("input_fraction"),
        "best": result["best"],
        "load": f"{load0} -> {_load()}",
        "headline": v["headline"],
    }


def _fmt(r: dict[str, Any]) -> str:
    split = r["split"]
    sp = (
        "-"
        if not split
        else f"{split['on_cpu']:.2f}/{split['cpu_wait']:.2f}/{split['blocked']:.2f}"
    )
    cells = []
    for t in r["levers"]:
        m = r["levers"][t]
        lo, hi = m["spread"]
        speed = "-" if m["speedup"] is None else f"{m['speedup']:.2f}x"
        rng = "" if lo is None else f" ({lo:.2f}-{hi:.2f}, n={m['n']})"
        cells.append(f"{r['stances'][t]}: {speed}{rng} {m['effect']}")
    cause = r["cause"] or r["kind"]
    if r["shape"].startswith("share-") and r["input_fraction"] is not None:
        f = r["input_fraction"]
        cause = f"{r['kind']} ({cause}), input {f:.0%}, bound {1 / (1 - f):.2f}x"
    return (
        f"| {r['shape']} | {'hog' if r['hog'] else 'quiet'} | {cause} | {sp} | "
        f"{r['others_cores'] if r['others_cores'] is not None else '-'} | "
        + " | ".join(cells)
        + f" | {r['best']} | {r['load']} |"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--only", choices=SHAPES, action="append")
    ap.add_argument("--hog", choices=("both", "only", "none"), default="both")
    ap.add_argument("--share", type=float, action="append", metavar="MS")
    ap.add_argument("--levers", type=lambda v: tuple(v.split(",")), default=LEVERS)
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    shapes = [share_shape(ms) for ms in a.share or ()] + list(a.only or ([] if a.share else SHAPES))
    conditions = {"both": (False, True), "only": (True,), "none": (False,)}[a.hog]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sofa-top-cause-levers-") as tmp:
        for shape in shapes:
            for hog in conditions:
                r = row(shape, hog, a, Path(tmp))
                rows.append(r)
                print(r["headline"], flush=True)
                print(_fmt(r), flush=True)
    print(
        "\n| shape | machine | cause | split on/wait/blocked | others' cores | prefetch: "
        "stance: speedup (spread, n) effect | threads: same | best | load before -> after |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(_fmt(r))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
