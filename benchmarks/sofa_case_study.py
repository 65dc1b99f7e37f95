"""The SOFA case study, reproduced: inference over JPEG files, four preprocessing methods x three
CNNs x TensorFlow and PyTorch, each cell measured by its own loop and judged by sofa-top.

    .venv/bin/python benchmarks/sofa_case_study.py [--frameworks tf,torch]
        [--models alexnet,vgg11,googlenet] [--methods loop,serial,parallel,compiled]
        [--repeats 3] [--seconds 6] [--record-seconds 12] [--device cpu|cuda]
        [--out benchmarks/results/sofa_case_study] [--quick] [--no-record] [--reuse FILE]
    .venv/bin/python benchmarks/sofa_case_study.py --render FILE.json [--compact]  # the table

The workloads are ``tests/workloads/sofa_case_{tf,torch}.py`` (one script per framework,
``--model/--method/--images/--seconds``; the methods and their own measure are described in
``tests/workloads/sofa_case_common.py``). The methods are the paper's ladder: ``loop`` (a Python
loop of per-file eager ops / PIL in the loop body), ``serial`` (the framework's input pipeline
without parallelism), ``parallel`` (parallel map + prefetch; DataLoader workers), ``compiled``
(``parallel`` + XLA ``jit_compile=True`` / ``torch.compile``). The JPEGs are synthetic (320x240,
made once in a temporary folder; no downloads), the models small (64x64 inputs) so that 2 CPU
cores run each cell in seconds.

Per (framework, model) the methods run interleaved, ``--repeats`` times (loop serial parallel
compiled loop serial ...), each for ``--seconds`` after its warm-up (a compile happens there);
then each cell once more under ``sofa-top record --json -- python WORKLOAD ...``. Per cell:
images/s (median, min-max over the repeats), the loop's own input share (preprocessing time over
preprocessing + model time), the speedup of the next method of the ladder (median of the paired
per-repeat ratios, min-max), and sofa-top's verdict kind, ``steps.input_wait_fraction``, step
count and top recommendation, with the lever that recommendation pulls (pipeline, compile,
threads, ...). Results are written as they come to ``OUT.json`` and ``OUT.md``.

``--reuse FILE`` keeps the throughput runs of an earlier ``OUT.json`` and re-runs only the
sofa-top records (a new sofa-top, same machine: minutes instead of the whole study).
``--quick`` is a smoke run (PyTorch, AlexNet, loop and serial, 1 repeat of 1 s, 40 small
batches of 8; well under a minute). ``--device cuda`` runs the cells on the GPU, and without one
says so and skips them (exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "tests" / "workloads"
sys.path.insert(0, str(WORKLOADS))
from sofa_case_common import METHODS, MODELS, synthetic_jpegs  # noqa: E402

FRAMEWORKS = ("tf", "torch")
SCRIPT = {"tf": WORKLOADS / "sofa_case_tf.py", "torch": WORKLOADS / "sofa_case_torch.py"}
METHOD_TEXT = {
    "tf": {
        "loop": "Python loop of eager tf.io/tf.image ops",
        "serial": "tf.data map, serial",
        "parallel": "map(num_parallel_calls=AUTOTUNE) + prefetch",
        "compiled": "parallel + XLA (jit_compile=True)",
    },
    "torch": {
        "loop": "Python loop of PIL + torch ops",
        "serial": "DataLoader(num_workers=0)",
        "parallel": "DataLoader(num_workers=cores)",
        "compiled": "parallel + torch.compile",
    },
}
# what each step of the ladder changes: the lever sofa-top's advice should pull there
NEXT_LEVER = {"loop": "pipeline", "serial": "pipeline", "parallel": "compile"}
LEVERS = (
    ("none", r"cannot help|nothing left to win"),
    ("compile", r"jit_compile|\bxla\b|torch\.compile|\.compile\(\)"),
    ("threads", r"set_num_threads|omp_num_threads|intra_op|omp_wait_policy"),
    ("mark-steps", r"api\.iterate|mark_step"),
    ("cache", r"\.cache\(|preprocess offline"),
    ("pipeline", r"tf\.data|num_parallel_calls|prefetch|dataloader|num_workers|interleave"),
    ("batching", r"batch"),
)
QUICK = {
    "frameworks": "torch",
    "models": "alexnet",
    "methods": "loop,serial",
    "repeats": 1,
    "seconds": 1.0,
    "record_seconds": 2.0,
    "images": 40,
    "batch": 8,
}


def lever(text: str | None) -> str:
    """The lever a recommendation pulls, from its words."""
    if not text:
        return "-"
    t = text.lower()
    return next((name for name, pat in LEVERS if re.search(pat, t)), "other")


def _csv(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise SystemExit(
            f"sofa_case_study: unknown {what} {', '.join(bad) or '(none)'}; "
            f"choose from {', '.join(allowed)}"
        )
    return items


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="The SOFA case study: inference over synthetic JPEGs, four preprocessing "
        "methods x three CNNs x TensorFlow/PyTorch, images/s per cell and sofa-top's verdict.",
    )
    ap.add_argument("--frameworks", default=None, help="comma list of tf,torch (default both)")
    ap.add_argument("--models", default=None, help="comma list of " + ",".join(MODELS))
    ap.add_argument("--methods", default=None, help="comma list of " + ",".join(METHODS))
    ap.add_argument("--repeats", type=int, default=None, help="plain runs per cell (default 3)")
    ap.add_argument("--seconds", type=float, default=None, help="measured s per run (default 6)")
    ap.add_argument(
        "--record-seconds", type=float, default=None, help="measured s under sofa-top (12)"
    )
    ap.add_argument("--images", type=int, default=None, help="synthetic JPEGs (default 256)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default 32)")
    ap.add_argument("--size", type=int, default=64, help="model input size (default 64)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="the models' intra-op threads (default: the framework's, as a user runs it)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "sofa_case_study",
        help="writes OUT.json and OUT.md (default benchmarks/results/sofa_case_study)",
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run (see the docstring)")
    ap.add_argument("--no-record", action="store_true", help="no sofa-top runs")
    ap.add_argument("--reuse", type=Path, help="keep the throughput runs of this OUT.json")
    ap.add_argument(
        "--render", type=Path, help="print the markdown table of this OUT.json (re-judged)"
    )
    ap.add_argument("--compact", action="store_true", help="with --render: the advice's lever")
    ap.add_argument("--timeout", type=float, default=900.0, help="s per run (default 900)")
    a = ap.parse_args(argv)
    defaults = {
        "frameworks": ",".join(FRAMEWORKS),
        "models": ",".join(MODELS),
        "methods": ",".join(METHODS),
        "repeats": 3,
        "seconds": 6.0,
        "record_seconds": 12.0,
        "images": 256,
        "batch": 32,
    }
    for key, value in (QUICK if a.quick else defaults).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    for key, value in defaults.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.frameworks = _csv(a.frameworks, FRAMEWORKS, "framework")
    a.models = _csv(a.models, MODELS, "model")
    a.methods = [m for m in METHODS if m in _csv(a.methods, METHODS, "method")]
    if a.repeats < 1 or a.seconds <= 0 or a.record_seconds <= 0 or a.images < 1 or a.batch < 1:
        raise SystemExit("sofa_case_study: --repeats, --seconds, --images, --batch must be > 0")
    if a.reuse is not None and not a.reuse.is_file():
        raise SystemExit(f"sofa_case_study: --reuse {a.reuse}: no such file")
    return a


def cuda_frameworks(frameworks: list[str]) -> tuple[list[str], list[str]]:
    """The frameworks that see a CUDA device here, and one line per framework that does not."""
    probes = {
        "torch": "import torch; print(torch.cuda.is_available())",
        "tf": "import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='2'; import tensorflow as tf; "
        "print(bool(tf.config.list_physical_devices('GPU')))",
    }
    ok, why = [], []
    for fw in frameworks:
        r = subprocess.run(
            [sys.executable, "-c", probes[fw]], capture_output=True, text=True, timeout=300
        )
        if r.stdout.strip().endswith("True"):
            ok.append(fw)
        else:
            reason = "not installed" if r.returncode else "sees no CUDA device"
            why.append(f"{'TensorFlow' if fw == 'tf' else 'PyTorch'} {reason}")
    return ok, why


class Study:
    """The results document, rewritten (JSON and markdown) after every run."""

    def __init__(self, args: argparse.Namespace, cells: list[dict[str, Any]]) -> None:
        self.out = args.out
        self.doc: dict[str, Any] = {
            "schema": 1,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": {"cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0))},
            "settings": {
                k: getattr(args, k)
                for k in ("repeats", "seconds", "record_seconds", "images", "batch", "size")
            }
            | {"device": args.device, "quick": args.quick, "threads": args.threads},
            "cells": cells,
        }

    def save(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        texts = {".json": json.dumps(self.doc, indent=1) + "\n", ".md": markdown(self.doc)}
        for suffix, text in texts.items():
            path = self.out.with_name(self.out.name + suffix)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)


def _spread(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def run_workload(
    cell: dict[str, Any], args: argparse.Namespace, jpegs: Path, seconds: float, tmp: Path,
    record: bool,
) -> dict[str, Any]:  # fmt: skip
    """One run of a cell's workload (under ``sofa-top record --json`` when ``record``)."""
    result = tmp / f"{cell['framework']}-{cell['model']}-{cell['method']}-{time.time_ns()}.json"
    workload = [
        sys.executable, str(SCRIPT[cell["framework"]]), "--model", cell["model"],
        "--method", cell["method"], "--images", str(jpegs), "--seconds", str(seconds),
        "--batch", str(args.batch), "--size", str(args.size), "--device", args.device,
        "--result", str(result),
    ]  # fmt: skip
    if args.threads:
        workload += ["--threads", str(args.threads)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
               os.environ.get("PYTHONPATH")])))  # fmt: skip
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    session = tmp / f"{result.stem}.sofa"
    cmd = [sys.executable, "-m", "sofa_top", "record", "--json", "-o", str(session), "--",
           *workload] if record else workload  # fmt: skip
    run: dict[str, Any] = {"load1": round(os.getloadavg()[0], 2)}
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        run["error"] = f"ran past {args.timeout:.0f} s"
        return run
    run["wall_s"] = round(time.monotonic() - t0, 1)
    if result.exists():
        own = json.loads(result.read_text())
        run.update({k: own[k] for k in ("images_per_s", "input_fraction", "median_step_s",
                                        "steps", "params")})  # fmt: skip
    elif not record:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
        run["error"] = f"exit {p.returncode}: {tail[0][:300]}"
    if record:
        try:
            summary = json.loads(p.stdout)
        except json.JSONDecodeError:
            tail = p.stderr.strip().splitlines()[-1:] or [f"exit {p.returncode}"]
            run["error"] = f"sofa-top record gave no JSON (exit {p.returncode}): {tail[0][:300]}"
            return run
        run["session"] = str(session)
        run["sofa"] = sofa_fields(summary)
        if summary.get("exit_code") not in (0, None):
            run["error"] = f"workload exit {summary.get('exit_code')}: " + str(
                summary.get("workload_error")
            )
    return run


def sofa_fields(summary: dict[str, Any]) -> dict[str, Any]:
    """What the table reads from ``record --json`` (the fields of issue 20's checks)."""
    v = summary.get("verdict") or {}
    steps = summary.get("steps") or {}
    recs = v.get("recommendations") or []
    return {
        "verdict": v.get("kind"),
        "confidence": v.get("confidence"),
        "headline": v.get("headline"),
        "recommendations": recs,
        "top_recommendation": recs[0] if recs else None,
        "lever": lever(recs[0] if recs else None),
        "input_wait_fraction": steps.get("input_wait_fraction"),
        "steps_count": steps.get("count"),
        "sources": steps.get("sources"),
        "reason": steps.get("reason"),
        "p50_s": steps.get("p50_s"),
        "p99_s": steps.get("p99_s"),
        "phases": steps.get("phases"),
        "stacks_split": (summary.get("stacks") or {}).get("split"),
    }


def summarize(cells: list[dict[str, Any]]) -> None:
    """Medians, spreads and paired speedups from the runs (in place)."""
    by_key = {(c["framework"], c["model"], c["method"]): c for c in cells}
    for c in cells:
        ok = [r for r in c["runs"] if r.get("images_per_s")]
        c["images_per_s"] = _spread([r["images_per_s"] for r in ok])
        c["input_fraction"] = _spread([r["input_fraction"] for r in ok if r.get("input_fraction")
                                       is not None])  # fmt: skip
        for name, other in (("next_speedup", _next(c["method"])), ("vs_loop", "loop")):
            o = by_key.get((c["framework"], c["model"], other)) if other else None
            if o is None or o is c:
                c[name] = None
                continue
            num, den = (o, c) if name == "next_speedup" else (c, o)
            pairs = [
                a["images_per_s"] / b["images_per_s"]
                for a, b in zip(num["runs"], den["runs"], strict=False)
                if a.get("images_per_s") and b.get("images_per_s")
            ]
            c[name] = _spread(pairs)
        rec = c.get("record") or {}
        sofa = rec.get("sofa") or {}
        want = NEXT_LEVER.get(c["method"])
        c["advice_is_next_step"] = None if not sofa or want is None else sofa["lever"] == want


def _next(method: str) -> str | None:
    i = METHODS.index(method)
    return METHODS[i + 1] if i + 1 < len(METHODS) else None


def _s(sp: dict[str, Any] | None, fmt: str, unit: str = "") -> str:
    if not sp:
        return "-"
    if sp["n"] == 1:
        return f"{sp['median']:{fmt}}{unit}"
    return f"{sp['median']:{fmt}}{unit} ({sp['min']:{fmt}}-{sp['max']:{fmt}})"


def _tail(sofa: dict[str, Any]) -> str:
    """sofa-top's p50 / p99 step time (issue 20's fields; '-' from a sofa-top without them)."""
    p50, p99 = sofa.get("p50_s"), sofa.get("p99_s")
    return "-" if p50 is None or p99 is None else f"{p50 * 1e3:.0f} / {p99 * 1e3:.0f} ms"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _threads(settings: dict[str, Any]) -> str:
    n = settings.get("threads")
    return f", models on {n} intra-op thread{'s' if n != 1 else ''}" if n else ""


def _load_line(doc: dict[str, Any]) -> str:
    loads = [r["load1"] for c in doc["cells"] for r in [*c["runs"], c.get("record") or {}]
             if "load1" in r]  # fmt: skip
    if not loads:
        return ""
    return (
        f" Load average (1 min) at the runs' starts: median {statistics.median(loads):.1f} "
        f"({min(loads):.1f}-{max(loads):.1f}) on {doc['machine']['usable_cores']} cores."
    )


def markdown(doc: dict[str, Any], compact: bool = False) -> str:
    """The results table (README format; ``compact``: the advice as its lever only)."""
    s = doc["settings"]
    lines = [
        f"SOFA case study, {doc['started']}, {doc['machine']['usable_cores']} cores, device "
        f"{s['device']}{_threads(s)}: {s['repeats']} interleaved repeats of {s['seconds']:g} s "
        "per cell "
        f"(batch {s['batch']}, {s['size']}x{s['size']} inputs, {s['images']} synthetic "
        f"320x240 JPEGs), then one `sofa-top record` run of {s['record_seconds']:g} s. "
        "Medians (min-max)." + _load_line(doc),
        "",
    ]
    if compact:
        lines += [
            "| framework | model | method | images/s | next step | own input share "
            "| sofa-top verdict | input wait (own) | steps | advice's lever |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            "| framework | model | method | images/s | next step | vs loop | own input share "
            "| sofa-top verdict | sofa-top input wait (own, same run) | steps (sources) "
            "| step p50 / p99 | top recommendation [lever] | advice = next step? |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for c in doc["cells"]:
        rec = c.get("record") or {}
        sofa = rec.get("sofa") or {}
        srcs = ", ".join(f"{k} {v}" for k, v in (sofa.get("sources") or {}).items())
        top = (sofa.get("top_recommendation") or "-").replace("|", "\\|").replace("\n", " ")
        if len(top) > 140:
            top = top[:137] + "..."
        top = top if "`" in top else f"`{top}`"
        verdict = sofa.get("verdict") or ("error: " + rec["error"] if rec.get("error") else "-")
        if sofa.get("confidence") is not None:
            verdict += f" ({sofa['confidence']:.2f})"
        advice = {True: "yes", False: "no", None: "-"}[c.get("advice_is_next_step")]
        errors = sorted({r["error"] for r in c["runs"] if r.get("error")})
        if compact:
            lines.append(
                f"| {c['framework']} | {c['model']} | {c['method']} "
                f"| {_s(c.get('images_per_s'), '.0f')} | {_s(c.get('next_speedup'), '.2f', 'x')} "
                f"| {_s(c.get('input_fraction'), '.0%')} | {verdict} "
                f"| {_pct(sofa.get('input_wait_fraction'))} ({_pct(rec.get('input_fraction'))}) "
                f"| {sofa.get('steps_count', '-')} | {sofa.get('lever', '-')} |"
            )
            continue
        lines.append(
            f"| {c['framework']} | {c['model']} | {c['method']}: "
            f"{METHOD_TEXT[c['framework']][c['method']]} "
            f"| {_s(c.get('images_per_s'), '.0f')}{' **' + errors[0] + '**' if errors else ''} "
            f"| {_s(c.get('next_speedup'), '.2f', 'x')} | {_s(c.get('vs_loop'), '.2f', 'x')} "
            f"| {_s(c.get('input_fraction'), '.0%')} | {verdict} "
            f"| {_pct(sofa.get('input_wait_fraction'))} ({_pct(rec.get('input_fraction'))}) "
            f"| {sofa.get('steps_count', '-')} ({srcs or 'none'}) | {_tail(sofa)} "
            f"| {top} [{sofa.get('lever', '-')}] | {advice} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        doc = json.loads(args.render.read_text())
        for c in doc["cells"]:  # judged again with this version's rules
            sofa = (c.get("record") or {}).get("sofa")
            if sofa:
                sofa["lever"] = lever(sofa.get("top_recommendation"))
        summarize(doc["cells"])
        print(markdown(doc, compact=args.compact), end="")
        return 0
    frameworks = args.frameworks
    if args.device == "cuda":
        frameworks, why = cuda_frameworks(frameworks)
        for line in why:
            print(f"--device cuda: {line}: its cells are skipped", flush=True)
        if not frameworks:
            print("--device cuda: no CUDA device here: skipped", flush=True)
            return 0
    reused: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    if args.reuse:
        for c in json.loads(args.reuse.read_text())["cells"]:
            reused[(c["framework"], c["model"], c["method"])] = c["runs"]
    cells = [
        {"framework": fw, "model": m, "method": me, "runs": [], "record": None}
        for fw in frameworks for m in args.models for me in args.methods
    ]  # fmt: skip
    study = Study(args, cells)
    with tempfile.TemporaryDirectory(prefix="sofa-case-") as tmpdir:
        tmp = Path(tmpdir)
        print(f"making {args.images} synthetic JPEGs ...", flush=True)
        jpegs = tmp / "jpegs"
        synthetic_jpegs(jpegs, args.images)
        sessions = Path(tempfile.mkdtemp(prefix="sofa-case-sessions-"))
        for fw in frameworks:
            for model in args.models:
                group = [c for c in cells if c["framework"] == fw and c["model"] == model]
                for c in group:
                    c["runs"] = list(reused.get((fw, model, c["method"]), []))
                for rep in range(args.repeats):
                    for c in group:
                        if len(c["runs"]) > rep:
                            continue
                        run = run_workload(c, args, jpegs, args.seconds, tmp, record=False)
                        c["runs"].append(run)
                        _say(c, f"run {rep + 1}/{args.repeats}", run)
                        summarize(cells)
                        study.save()
                if args.no_record:
                    continue
                for c in group:
                    c["record"] = run_workload(
                        c, args, jpegs, args.record_seconds, sessions, record=True
                    )
                    _say(c, "sofa-top record", c["record"])
                    summarize(cells)
                    study.save()
    study.doc["ended"] = time.strftime("%Y-%m-%d %H:%M:%S")
    study.doc["sessions"] = None if args.no_record else str(sessions)
    study.save()
    print(markdown(study.doc), end="")
    print(f"wrote {args.out}.json and {args.out}.md", flush=True)
    failed = [c for c in cells for r in [*c["runs"], c["record"] or {}] if r.get("error")]
    return 1 if failed else 0


def _say(cell: dict[str, Any], what: str, run: dict[str, Any]) -> None:
    head = f"{cell['framework']} {cell['model']} {cell['method']} {what}:"
    if run.get("error"):
        print(f"{head} FAILED {run['error']}", flush=True)
        return
    line = (
        f"{head} {run.get('images_per_s', 0):.0f} images/s, own input share "
        f"{_pct(run.get('input_fraction'))} (load {run['load1']}, {run.get('wall_s')} s)"
    )
    sofa = run.get("sofa")
    if sofa:
        line += (
            f"; sofa-top {sofa['verdict']}, input wait {_pct(sofa['input_wait_fraction'])}, "
            f"{sofa['steps_count']} steps, top: {sofa['top_recommendation']}"
        )
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
