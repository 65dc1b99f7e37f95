"""sofa-top beside its peers (TraceML, py-spy, torch.profiler) on the same labelled PyTorch
workloads (``peers_workloads.py``, each measuring its own truth): each tool's diagnosis against
the truth, the code change it needs, and what it costs the workload (paired, interleaved runs).

Usage::

    python benchmarks/peers.py [--pairs 3] [--scale 1] [--only SHAPE,...]
                               [--tools sofa-top,traceml,py-spy,torch.profiler]
                               [--traceml-venv DIR] [--json FILE]

TraceML (``traceml-ai``) runs from its own virtualenv (``--traceml-venv``, default
``benchmarks/.peers/traceml``), made on first use with ``torch==2.13.0`` pinned after a
``pip install --dry-run`` shows that it would install no other torch (the script stops if it
would). py-spy is the one beside sofa-top; torch.profiler is the project venv's torch.

Per shape and pair, the plain run and one run under each tool go in a rotated order (drift
cancels). A tool's overhead is the workload's own loop time under it over the plain run's of
the same pair (start-up excluded), median and min-max over the pairs; "added wall" is the
whole command's extra seconds (start-up, the tool's own launch and teardown). An interval
(max-min over the median) of 5% or more is marked: not resolved at that many pairs.

How each tool's diagnosis is read: sofa-top, ``record --json`` (``verdict.kind``,
``steps.input_wait_fraction``, ``straggler``); TraceML, its ``final_summary.json``
(``primary_diagnosis.kind``, input wait over step time); py-spy has no verdict: the share of its
samples (default flags: idle excluded) under the workload's input functions (``__getitem__``,
``burn``), which a reader must know by name, labelled input-bound past one half; torch.profiler
has none either: the DataLoader ``__next__`` event's share of the profiled steps, likewise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "peers_workloads.py"
BIN = Path(sys.executable).parent
SOFA_TOP = str(BIN / "sofa-top")
PY_SPY = str(BIN / "py-spy")
TOOLS = ("sofa-top", "traceml", "py-spy", "torch.profiler")
SHAPES = ("dataloader-cpu", "storage", "compute", "inference", "ddp")
RANKS = 4
# steps per run: about 5 s of loop each on this machine (2 cores, busy); --scale multiplies them
STEPS = {"dataloader-cpu": 250, "storage": 100, "compute": 130, "inference": 330, "ddp": 150}
TORCH_PIN = "torch==2.13.0"
INPUT_FUNCTIONS = ("__getitem__", "burn")  # the workloads' input code, by name
LOOP_FUNCTIONS = ("timed_loop", "infer_loop")  # the timed loops; warm_up is left out
# the code change each tool needs on these workloads (plain PyTorch loops)
CHANGES = {
    "sofa-top": "none (`sofa-top record -- python train.py`)",
    "traceml": "`traceml.init()` + `with traceml.trace_step(model):` around each step (and "
    "`traceml.wrap_dataloader_fetch(it)` on an input that is no DataLoader); `traceml run`",
    "py-spy": "none (`py-spy record -- python train.py`)",
    "torch.profiler": "`with profile(schedule=...) as prof:` around the loop, `prof.step()` "
    "per step, then reading `key_averages()`",
}


@dataclass
class Result:
    """One run of one workload (plain or under a tool)."""

    tool: str
    shape: str
    wall_s: float
    truth: list[dict[str, Any]] = field(default_factory=list)  # one per rank
    kind: str | None = None  # the tool's label, or None (failed / none given)
    input_fraction: float | None = None
    straggler: int | None = None
    note: str = ""

    @property
    def loop_s(self) -> float | None:
        times = [t["elapsed_s"] for t in self.truth]
        return max(times) if times else None

    @property
    def truth_fraction(self) -> float | None:
        fr = [t["input_fraction"] for t in self.truth]
        return statistics.median(fr) if fr else None


def truth_label(shape: str, fraction: float | None) -> str:
    """What the workload is, by its own measure."""
    if shape == "ddp":
        return "straggler"
    if fraction is None:
        return "?"
    return "input-bound" if fraction >= 0.5 else "compute-bound" if fraction <= 0.2 else "mixed"


def label(kind: str | None) -> str | None:
    """A tool's label, in the truth's words."""
    if kind is None:
        return None
    k = kind.lower().replace("_", "-")
    if "straggler" in k:
        return "straggler"
    if "input" in k or "preprocess" in k:
        return "input-bound"
    if "compute" in k:
        return "compute-bound"
    return k


# -- running --------------------------------------------------------------------------------------


def workload_argv(python: str, shape: str, steps: int, instrument: str = "none") -> list[str]:
    args = [shape, "--steps", str(steps), "--instrument", instrument]
    if shape == "ddp":
        torchrun = str(Path(python).with_name("torchrun"))
        return [torchrun, "--standalone", f"--nproc-per-node={RANKS}", str(WORKLOAD), *args]
    return [python, str(WORKLOAD), *args]


def run(tool: str, shape: str, steps: int, traceml_venv: Path, tmp: Path) -> Result:
    """One run; never raises for a tool's failure (the result says why)."""
    truth_file = tmp / f"truth-{tool}-{shape}-{time.monotonic_ns()}.jsonl"
    env = {**os.environ, "PEERS_TRUTH_FILE": str(truth_file), "PYTHONUNBUFFERED": "1",
           "SOFA_TOP_DATA_DIR": str(tmp / "sofa-data")}  # fmt: skip
    out = tmp / f"out-{tool}-{shape}-{time.monotonic_ns()}"
    py = sys.executable
    if tool == "plain":
        argv = workload_argv(py, shape, steps)
    elif tool == "sofa-top":
        argv = [SOFA_TOP, "record", "--json", "-o", f"{out}.sofa", "--",
                *workload_argv(py, shape, steps)]  # fmt: skip
    elif tool == "traceml":
        tpy = str(traceml_venv / "bin" / "python")
        argv = [str(traceml_venv / "bin" / "traceml"), "run", str(WORKLOAD), "--logs-dir",
                str(out), "--run-name", "run"]  # fmt: skip
        if shape == "ddp":
            argv += ["--nproc-per-node", str(RANKS)]
        argv += ["--args", shape, "--steps", str(steps), "--instrument", "traceml"]
        env["PATH"] = f"{Path(tpy).parent}:{env['PATH']}"
    elif tool == "py-spy":
        argv = [PY_SPY, "record", "-f", "raw", "-r", "100", "-o", f"{out}.txt"]
        argv += ["--subprocesses"] if shape == "ddp" else []
        argv += ["--", *workload_argv(py, shape, steps)]
    else:
        argv = workload_argv(py, shape, steps, "torch-profiler")
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    res = Result(tool, shape, time.perf_counter() - t0)
    if truth_file.exists():
        res.truth = [json.loads(line) for line in truth_file.read_text().splitlines() if line]
    if p.returncode != 0 and tool != "py-spy":
        res.note = f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}"
    try:
        read_diagnosis(res, p.stdout, out)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        res.note = res.note or f"no diagnosis: {exc}"
    return res


def read_diagnosis(res: Result, stdout: str, out: Path) -> None:
    """Fill in the tool's label, input fraction and straggler."""
    if res.tool == "sofa-top":
        s = json.loads(stdout)
        v = s.get("verdict") or {}
        res.kind = v.get("kind")
        if v.get("severity") == "moderate":
            res.note = "moderate"  # input-bound past XProf's 5% bar, short of its 20%
        res.input_fraction = (s.get("steps") or {}).get("input_wait_fraction")
        st = s.get("straggler")
        if res.shape == "ddp":
            res.straggler = st.get("rank") if st else None
            rv = s.get("rank_verdict")
            res.kind = rv.get("kind") if isinstance(rv, dict) else rv or res.kind
            if st:
                res.note = f"cause: {st.get('cause')}"
    elif res.tool == "traceml":
        d = json.loads((out / "run" / "final_summary.json").read_text())
        pd = d["primary_diagnosis"]
        res.kind = pd.get("kind")
        ev = pd.get("evidence") or {}
        if ev.get("input_wait_ms") is not None and ev.get("step_time_ms"):
            res.input_fraction = ev["input_wait_ms"] / ev["step_time_ms"]
        worst = ev.get("worst")
        if res.shape == "ddp" and isinstance(worst, dict) and "rank" in worst:
            res.straggler = int(worst["rank"])  # the rank its rank comparison names
    elif res.tool == "py-spy":
        shares = pyspy_input_shares(Path(f"{out}.txt").read_text())
        pid_rank = {t["pid"]: t.get("rank", 0) for t in res.truth}
        if res.shape == "ddp":
            ranks = {pid_rank[p]: f for p, f in shares.items() if p in pid_rank}
            if ranks:
                res.straggler = max(ranks, key=lambda r: ranks[r])
                res.kind = "straggler (by the reader)"
        else:
            f = shares.get(0, next((f for p, f in shares.items() if p in pid_rank), None))
            res.input_fraction = f
            res.kind = None if f is None else "input" if f >= 0.5 else "compute"
    elif res.tool == "torch.profiler":
        if res.shape == "ddp":
            res.kind = "no cross-rank view"  # one table per rank, read side by side by hand
            return
        peers = [json.loads(line[5:]) for line in stdout.splitlines() if line.startswith("PEER ")]
        fr = [p["input_fraction"] for p in peers if p.get("input_fraction") is not None]
        if fr:
            res.input_fraction = fr[0]
            res.kind = "input" if fr[0] >= 0.5 else "compute"


def pyspy_input_shares(raw: str) -> dict[int, float]:
    """Per process (0: the one process of a run without ``--subprocesses``): of py-spy's
    samples in the workload's timed loop (``timed_loop`` / ``infer_loop``: start-up, imports
    and warm-up left out, as a reader zooms in), the share with an input function on the
    stack."""
    total: dict[int, int] = {}
    inputs: dict[int, int] = {}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or "warm_up (" in stack:
            continue
        if not any(f"{fn} (" in stack for fn in LOOP_FUNCTIONS):
            continue
        # --subprocesses: "process ROOT:...;process CHILD:...;frames": the last one is the
        # process the frames are of
        procs = re.findall(r"process (\d+):", stack)
        pid = int(procs[-1]) if procs else 0
        n = int(count)
        total[pid] = total.get(pid, 0) + n
        if any(f"{fn} (" in stack for fn in INPUT_FUNCTIONS):
            inputs[pid] = inputs.get(pid, 0) + n
    return {pid: inputs.get(pid, 0) / n for pid, n in total.items() if n}


# -- setup ----------------------------------------------------------------------------------------


def torches_to_install(dry_run_output: str) -> list[tuple[str, str]]:
    """The torch packages (torch, torchvision, ...) a ``pip install --dry-run`` would install."""
    would = next((ln for ln in dry_run_output.splitlines() if ln.startswith("Would install")), "")
    return re.findall(r"\b(torch[a-z_]*)-(\d\S*)", would)


def ensure_traceml(venv: Path) -> Path:
    """TraceML's own virtualenv, torch pinned; refuses when pip would pull another torch."""
    if (venv / "bin" / "traceml").exists():
        return venv
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    dry = subprocess.run([*pip, "install", "--dry-run", "traceml-ai", TORCH_PIN],
                         capture_output=True, text=True, check=True)  # fmt: skip
    torches = torches_to_install(dry.stdout)
    if [(n, v.split("+")[0]) for n, v in torches] != [("torch", "2.13.0")]:
        shutil.rmtree(venv, ignore_errors=True)
        sys.exit(f"traceml-ai would install {torches}, not torch 2.13.0 alone: stopped")
    subprocess.run([*pip, "install", "-q", "traceml-ai", TORCH_PIN], check=True)
    return venv


# -- report ---------------------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    wide = len(values) < 2 or (hi - lo) / med >= 0.05
    return f"{med:.3f}x ({lo:.3f}-{hi:.3f}){' *' if wide else ''}"


def table(results: list[Result], tools: list[str]) -> str:
    """The README's table (markdown)."""
    lines = [
        "| workload | truth (its own measure) | tool | diagnosis | input share | right? | "
        "slowdown, median (min-max) | added wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape in dict.fromkeys(r.shape for r in results):
        plain = [r for r in results if r.shape == shape and r.tool == "plain"]
        fr = [r.truth_fraction for r in plain if r.truth_fraction is not None]
        tf = statistics.median(fr) if fr else None
        truth = truth_label(shape, tf)
        shown = "rank 2 slow input" if shape == "ddp" else f"{truth} {tf:.2f}" if tf else truth
        for tool in tools:
            runs = [r for r in results if r.shape == shape and r.tool == tool]
            if not runs:
                continue
            ratios, added = [], []
            for i, r in enumerate(runs):
                if i < len(plain) and r.loop_s and plain[i].loop_s:
                    ratios.append(r.loop_s / plain[i].loop_s)
                    added.append(r.wall_s - plain[i].wall_s)
            kinds = sorted({str(r.kind) for r in runs})
            fracs = [r.input_fraction for r in runs if r.input_fraction is not None]
            share = f"{statistics.median(fracs):.2f}" if fracs else "-"
            if shape == "ddp":
                got = [r.straggler for r in runs]
                right = f"{sum(g == 2 for g in got)}/{len(runs)} named rank 2"
            else:
                ok = sum(label(r.kind) == truth and (
                    r.input_fraction is None or tf is None or abs(r.input_fraction - tf) <= 0.1)
                    for r in runs)  # fmt: skip
                right = f"{ok}/{len(runs)}"
            notes = sorted({r.note for r in runs if r.note})
            diag = "/".join(kinds) + (f" ({'; '.join(notes)[:120]})" if notes else "")
            add = f"{statistics.median(added):+.1f}" if added else "-"
            lines.append(f"| {shape} | {shown} | {tool} | {diag} | {share} | {right} | "
                         f"{spread(ratios)} | {add} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=3, help="interleaved repeats (default 3)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply each shape's steps")
    p.add_argument("--only", help=f"comma-separated shapes of {','.join(SHAPES)}")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"of {','.join(TOOLS)}")
    p.add_argument("--traceml-venv", type=Path, default=HERE / ".peers" / "traceml")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write every run here")
    a = p.parse_args()
    shapes = a.only.split(",") if a.only else list(SHAPES)
    tools = a.tools.split(",")
    bad = [s for s in shapes if s not in SHAPES] + [t for t in tools if t not in TOOLS]
    if bad:
        p.error(f"unknown: {', '.join(bad)}")
    if "traceml" in tools:
        ensure_traceml(a.traceml_venv)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} · {platform.node()} · {os.cpu_count()} cores · "
          f"load {os.getloadavg()[0]:.1f} · {platform.processor() or platform.machine()}",
          flush=True)  # fmt: skip
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="sofa-top-peers-") as tmp:
        for shape in shapes:
            for i in range(a.pairs):
                order = ["plain", *tools]
                order = order[i % len(order) :] + order[: i % len(order)]  # rotate: drift cancels
                for tool in order:
                    steps = max(30, round(STEPS[shape] * a.scale))
                    r = run(tool, shape, steps, a.traceml_venv, Path(tmp))
                    results.append(r)
                    print(f"{shape} {i} {tool}: loop {r.loop_s} s, wall {r.wall_s:.1f} s, "
                          f"{r.kind} {r.input_fraction} {r.straggler} {r.note}",
                          flush=True)  # fmt: skip
    print(f"# load after: {os.getloadavg()[0]:.1f}")
    print(table(results, tools))
    if a.json:
        a.json.write_text(json.dumps([{**asdict(r), "loop_s": r.loop_s} for r in results]))


if __name__ == "__main__":
    main()
