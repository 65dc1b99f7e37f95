"""Judge sofa-top on the real-world corpus (``manifest.toml``).

    .venv/bin/python benchmarks/corpus/run.py [--only ID ...] [--json] [--mirror DIR]

For each script it runs the plain copy under ``sofa-top record --json -- python SCRIPT ARGS``
(the worktree's ``.venv/bin/sofa-top``) and the instrumented copy without sofa-top, one at a
time, and prints per script: the verdict, ``steps.count``, ``steps.input_wait_fraction`` vs the
script's own ``SELF_INPUT_FRACTION`` (and the difference), the step sources (read from the
session file: ``record --json`` has no field for them), ``stacks.split``, and each
recommendation with a judgement: does it name an API or parameter that this script uses, in
its own framework? ``--json`` prints the same as one JSON document. ``--save FILE`` also writes
that document (``results.json`` beside this file is the latest committed run).

Scripts are materialised first (``prepare.py``) when their copy is missing. Needs the corpus
extra (``pip install -e '.[all,corpus]'``; see README).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SRC = HERE / "src"
SHIMS = HERE / "shims"
VENV_BIN = ROOT / ".venv" / "bin"

sys.path.insert(0, str(HERE))
import fixtures  # noqa: E402
import prepare  # noqa: E402

DIFF_FLAG = 0.10  # |sofa-top - truth| above this is flagged


COMMON_SHIMS = ("corpus_probe.py", "corpus_fakes.py")


def shim_path(script: dict[str, Any]) -> Path:
    """A folder with only the shims this script asks for (``shims = [...]``) and the probe: a
    stand-in that other libraries see (torchmetrics imports ``torchvision.models`` when it
    finds a ``torchvision``) must not be on every script's path."""
    d = SRC / ".shimpath" / script["id"]
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for name in [*COMMON_SHIMS, *script.get("shims", [])]:
        if not (SHIMS / name).exists():
            raise SystemExit(f"run: {script['id']}: no shim {name!r} in {SHIMS}")
        (d / name).symlink_to(SHIMS / name)
    return d


def _env(script: dict[str, Any], variant_root: Path) -> dict[str, str]:
    extra: dict[str, str] = script.get("env", {})
    env = dict(os.environ)
    paths = [str(shim_path(script)), str(variant_root)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["WANDB_MODE"] = "disabled"
    env["MPLBACKEND"] = "Agg"
    env["CORPUS_TRUTH_PHASE"] = script.get("phase", "")
    env.update(extra)
    return env


def _cwd(script: dict[str, Any], root: Path) -> Path:
    if "cwd" in script:
        return root / script["cwd"]
    return (root / prepare.script_file(script)).parent


def _setup(script: dict[str, Any], root: Path, env: dict[str, str], timeout: float) -> None:
    cwd = _cwd(script, root)
    for name in script.get("fixtures", []):
        fixtures.install(name, SRC / ".fixtures", cwd)
    for cmd in script.get("pre", []):
        cmd = [str(VENV_BIN / "python") if c == "python" else c for c in cmd]
        subprocess.run(cmd, cwd=cwd, env=env, check=True, timeout=timeout, capture_output=True)


def _cmd(script: dict[str, Any], root: Path) -> list[str]:
    file = root / prepare.script_file(script)
    rel = os.path.relpath(file, _cwd(script, root))
    return [str(VENV_BIN / "python"), rel, *script.get("args", [])]


def _tail(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _setup_error(script: dict[str, Any], root: Path, env: dict[str, str], timeout: float) -> str:
    """Fixtures and ``pre`` commands; what failed, in one line, or ''."""
    try:
        _setup(script, root, env, timeout)
    except subprocess.TimeoutExpired as e:
        return f"setup command ran past {timeout:.0f} s: {' '.join(map(str, e.cmd))}"
    except subprocess.CalledProcessError as e:
        err = (e.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
        return f"setup command failed (exit {e.returncode}): {err[0][:200]}"
    return ""


def run_sofa(script: dict[str, Any], timeout: float) -> dict[str, Any]:
    root = SRC / script["id"] / "plain"
    env = _env(script, root)
    err = _setup_error(script, root, env, timeout)
    if err:
        return {"error": err}
    session = Path(tempfile.mkdtemp(prefix="corpus-")) / f"{script['id']}.sofa"
    cmd = [
        str(VENV_BIN / "sofa-top"),
        "record",
        "--json",
        "-o",
        str(session),
        "--",
        *_cmd(script, root),
    ]
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            cmd, cwd=_cwd(script, root), env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"sofa-top record ran past {timeout:.0f} s", "session": str(session)}
    wall = time.monotonic() - t0
    out: dict[str, Any] = {"wall_s": round(wall, 1), "rc": p.returncode, "session": str(session)}
    try:
        out["summary"] = json.loads(p.stdout)
    except json.JSONDecodeError:
        out["error"] = f"no JSON from record (rc {p.returncode}): {_tail(p.stderr or p.stdout, 3)}"
        return out
    out["stderr_tail"] = _tail(p.stderr, 3)
    out["step_sources"] = step_sources(session)
    return out


def step_sources(session: Path) -> dict[str, int]:
    """How many steps each agent source reported (the session's steps table)."""
    from sofa_top.recording.reader import SessionReader

    try:
        reader = SessionReader(session)
    except Exception as e:  # a session that cannot be read says so in the row
        return {f"unreadable: {e}": 0}
    try:
        return dict(Counter(s.name or s.source for s in reader.steps()))
    finally:
        reader.close()


_FRAC = re.compile(r"^SELF_INPUT_FRACTION (\S+)$", re.M)
_DETAIL = re.compile(r"^SELF_INPUT_DETAIL (.+)$", re.M)
_PHASE = re.compile(r"^SELF_PHASE (\S+) (\S+)$", re.M)


def run_probe(script: dict[str, Any], timeout: float) -> dict[str, Any]:
    root = SRC / script["id"] / "probe"
    env = _env(script, root)
    err = _setup_error(script, root, env, timeout)
    if err:
        return {"error": err}
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            _cmd(script, root),
            cwd=_cwd(script, root),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"instrumented copy ran past {timeout:.0f} s"}
    out: dict[str, Any] = {"wall_s": round(time.monotonic() - t0, 1), "rc": p.returncode}
    m = _FRAC.search(p.stdout)
    if p.returncode != 0 or not m:
        out["error"] = f"rc {p.returncode}: {_tail(p.stderr or p.stdout, 3)}"
    if m:
        v = float(m.group(1))
        out["fraction"] = None if math.isnan(v) else v
    d = _DETAIL.search(p.stdout)
    if d:
        out["detail"] = json.loads(d.group(1))
    out["phases"] = {
        name: None if math.isnan(float(v)) else float(v) for name, v in _PHASE.findall(p.stdout)
    }
    return out


def sofa_phase(steps: dict[str, Any], phase: str | None) -> dict[str, Any] | None:
    """sofa-top's ``steps.phases`` entry for the truth's phase: the same name, or, for an
    eval/inference truth, the one eval-or-inference phase sofa-top reports (a standalone
    evaluation is either, by how one reads it). None when sofa-top reports no phases."""
    phases = steps.get("phases") or []
    if not phase or not phases:
        return None
    same = [p for p in phases if p.get("phase") == phase]
    if same:
        return same[0]
    if phase in ("eval", "inference"):
        other = [p for p in phases if p.get("phase") in ("eval", "inference")]
        if len(other) == 1:
            return other[0]
    return None


# --- recommendation judgement -----------------------------------------------------------


def _sources(script: dict[str, Any]) -> str:
    """The script's own code (all its files), comments left out."""
    root = SRC / script["id"] / "plain"
    text = "\n".join(
        (root / prepare._target(script, f)).read_text()
        for f in [script["path"], *script.get("extra", [])]
    )
    return re.sub(r"(?m)^\s*#.*$", "", text)


def frameworks(src: str) -> set[str]:
    fw = set()
    if re.search(r"^\s*(import torch|from torch)", src, re.M):
        fw.add("torch")
    if re.search(r"^\s*(import tensorflow|from tensorflow)", src, re.M):
        fw.add("tensorflow")
    if re.search(r"^\s*(import keras|from keras|from tensorflow import keras)", src, re.M):
        fw.add("keras")
    if "import lightning" in src or "pytorch_lightning" in src:
        fw.add("lightning")
    if re.search(r"\bTrainer\(", src) and "transformers" in src:
        fw.add("hf-trainer")
    return fw


def judge_recommendation(text: str, script: dict[str, Any], src: str) -> tuple[str, str]:
    """('yes' | 'no' | 'partly', why): does the advice name something this script uses?

    A manifest ``judge = [{match, applies, why}]`` entry (its ``match`` a substring of the
    advice) overrides the rules below: a judgement made by reading the script."""
    for j in script.get("judge", []):
        if j["match"] in text:
            return j["applies"], j["why"]
    fw = frameworks(src)
    env = script.get("env", {})
    keras_torch = env.get("KERAS_BACKEND") == "torch"
    uses_tfdata = bool(re.search(r"tf\.data\.Dataset|tfds\.load", src))
    pydataset = "keras.utils.PyDataset" in src
    has_dl = "DataLoader(" in src
    has_iterable = "IterableDataset" in src
    shards = "get_worker_info" in src
    t = text.lower()
    if "sofa-top launch" in t:
        return "no", "it already ran under the agent (record -- CMD launches it)"
    if "gpu" in t:
        return "no", "no GPU on this machine"
    if "more cores for input" in t:
        if pydataset:
            return "no", "keras PyDataset input: neither tf.data service nor DataLoader applies"
        if not uses_tfdata and not has_dl:
            return "no", "no tf.data pipeline and no DataLoader"
        return "partly", "a real lever only with more machines; says nothing about this script"
    if "dataloader" in t:
        if not has_dl:
            if "hf-trainer" in fw:
                return (
                    "partly",
                    "Trainer builds the DataLoader: the knob is "
                    "TrainingArguments(dataloader_num_workers=N)",
                )
            if "lightning" in fw:
                return "partly", "the DataLoader is built by Lightning's demo, not this script"
            return "no", "the script has no DataLoader (hand-written batching or in-memory tensors)"
        if has_iterable and not shards and "num_workers" in t:
            return (
                "no",
                "IterableDataset without get_worker_info(): every worker would replay the "
                "whole stream (duplicated batches)",
            )
        if "ff" in script["id"] or "forward-forward" in script["id"]:
            return (
                "no",
                "one full-batch fetch before training: workers cannot overlap it with anything",
            )
        if "num_workers=" in src and "num_workers" in t:
            return "partly", "the script already sets num_workers (on accelerators only)"
        return "yes", "the script builds a DataLoader without num_workers"
    if "num_parallel_calls" in t or "private_threadpool_size" in t:
        if pydataset:
            return "no", "keras PyDataset input: the stage named is Keras' own adapter"
        if not uses_tfdata:
            return "no", "no tf.data pipeline in the script"
        if "from_generator" in t and "from_generator" in src:
            # the tf.data guide's fix for a slow generator source: an interleave over shards
            return "yes", "a from_generator source: the guide's parallel interleave over shards"
        if ".map(" not in src and ".interleave(" not in src:
            return "no", "the tf.data pipeline has no map/interleave to parallelize"
        if "num_parallel_calls" in src and "private_threadpool_size" not in t:
            return "no", "map already has num_parallel_calls"
        return "yes", "tf.data map/interleave the script writes"
    if "prefetch(tf.data" in t:
        if pydataset:
            return (
                "no",
                "input is a keras PyDataset, not tf.data: its knobs are "
                "PyDataset(workers=, max_queue_size=)",
            )
        if not uses_tfdata:
            return "no", "no tf.data pipeline in the script"
        if ".prefetch(" in src:
            return "no", "the pipeline already ends in prefetch()"
        if "from_generator" in src and ".batch(" not in src:
            return "partly", "tf.data pipeline but no batch(): prefetch goes after the generator"
        return "yes", "tf.data pipeline without prefetch"
    if "decoding" in t or "augmentation" in t:
        if re.search(r"decode_|load_img|Random[A-Z]\w+\(|transforms\.Random", src):
            return "yes", "the script decodes/augments its input"
        return "no", "nothing to decode or augment: the input is arrays/tensors or a generator"
    if "keeps its producers on the" in t or ("already keeps the" in t and "busy" in t):
        return "partly", "a statement, not a change"
    if ".cache()" in t:
        if pydataset:
            return "no", "keras PyDataset input, not tf.data"
        if not uses_tfdata:
            return "no", "no tf.data pipeline (torch/Keras PyDataset input)"
        return (
            "partly",
            "tf.data pipeline; whether a cacheable expensive step exists is the script's",
        )
    if "jit_compile" in t or "xla" in t:
        if "tensorflow" in fw or ("keras" in fw and not keras_torch):
            return "yes", "Keras/TF model: compile(jit_compile=True) applies"
        return "no", f"not a TensorFlow model ({', '.join(sorted(fw)) or 'no framework'})"
    if "torch.compile" in t:
        if fw & {"torch", "lightning", "hf-trainer"} or keras_torch:
            if "hf-trainer" in fw:
                return "partly", "Trainer: the knob is TrainingArguments(torch_compile=True)"
            if "LBFGS" in src:
                return (
                    "partly",
                    "torch model, but the LBFGS closure re-runs forward 20x per step; "
                    "compile cost vs 4 steps",
                )
            return "yes", "torch nn.Module the script builds"
        return "no", f"not a torch model ({', '.join(sorted(fw)) or 'no framework'})"
    if "depth_first" in t:
        if fw & {"hf-trainer", "lightning"}:
            return (
                "partly",
                "the library builds/wraps the model: depth_first(model) must come before "
                "Trainer/fit, and only chains of memory-bound layers gain",
            )
        if "torch" in fw and "tensorflow" not in fw:
            return (
                "partly",
                "torch model; depth-first helps only chains of memory-bound layers (manual check)",
            )
        return "no", "not a torch model"
    if "local copy" in t or "files" in t:
        if "open(" not in src and "load_img" not in src and "read" not in src.lower():
            return "no", "the script reads no files (its input waits on sleep/compute)"
        return "partly", "manual check"
    return "?", "no rule: judge by hand"


def evaluate(script: dict[str, Any], timeout: float, skip_sofa: bool = False) -> dict[str, Any]:
    row: dict[str, Any] = {"id": script["id"], "repo": script["repo"], "path": script["path"]}
    if not skip_sofa:
        row["sofa"] = run_sofa(script, timeout)
    row["probe"] = run_probe(script, timeout)
    summary = row.get("sofa", {}).get("summary") or {}
    verdict = summary.get("verdict") or {}
    steps = summary.get("steps") or {}
    stacks = summary.get("stacks") or {}
    src = _sources(script)
    truth_phase = (row["probe"].get("detail") or {}).get("phase") or script.get("phase")
    matched = sofa_phase(steps, truth_phase)
    frac = matched.get("input_wait_fraction") if matched else steps.get("input_wait_fraction")
    truth = row["probe"].get("fraction")
    truth_detail = ((row["probe"].get("detail") or {}).get("phases") or {}).get(truth_phase or "")
    row["result"] = {
        "verdict": verdict.get("kind"),
        "confidence": verdict.get("confidence"),
        "headline": verdict.get("headline"),
        "evidence": verdict.get("evidence"),
        "steps_count": steps.get("count"),
        "median_step_s": steps.get("median_step_s"),
        "input_wait_fraction": frac,
        "overall_input_wait_fraction": steps.get("input_wait_fraction"),
        "phase": truth_phase,
        "sofa_phase": matched.get("phase") if matched else None,
        "sofa_phases": steps.get("phases"),
        "self_phases": row["probe"].get("phases"),
        "self_host_fraction": (truth_detail or {}).get("host_fraction"),
        "steps_reason": steps.get("reason"),
        "p50_s": steps.get("p50_s"),
        "p99_s": steps.get("p99_s"),
        "self_input_fraction": truth,
        "difference": None if frac is None or truth is None else round(frac - truth, 4),
        "step_sources": row.get("sofa", {}).get("step_sources"),
        "stacks_split": stacks.get("split"),
        "stacks_top": [
            f"{t['function']} ({t['class']}, {t['own_pct']}%)" for t in stacks.get("top", [])[:3]
        ],
        "recommendations": [
            {"text": r, "applies": a, "why": w}
            for r in verdict.get("recommendations", [])
            for a, w in [judge_recommendation(r, script, src)]
        ],
        "frameworks": sorted(frameworks(src)),
    }
    return row


def _fmt(v: Any, pct: bool = True) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1%}" if pct else f"{v:.3f}"
    return str(v)


def render(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        r = row["result"]
        errs = [row.get(k, {}).get("error") for k in ("sofa", "probe")]
        print(f"== {row['id']}  ({row['repo'].split('github.com/')[-1]}: {row['path']})")
        print(
            f"   verdict {r['verdict']} ({_fmt(r['confidence'], False)})"
            f"  steps {_fmt(r['steps_count'])}"
            f"  median {_fmt(r['median_step_s'], False)} s  sources {r['step_sources']}"
        )
        flag = (
            " <-- off" if r["difference"] is not None and abs(r["difference"]) > DIFF_FLAG else ""
        )
        print(
            f"   input wait: sofa-top {_fmt(r['input_wait_fraction'])}"
            f"  self {_fmt(r['self_input_fraction'])}"
            f"  diff {_fmt(r['difference'])}{flag}{_phase_note(r)}"
        )
        if r.get("sofa_phases") or r.get("self_phases"):
            print(f"   phases: sofa-top {_sofa_phases(r)}; self {_self_phases(r)}")
        if r.get("steps_reason"):
            print(f"   no steps: {r['steps_reason']}")
        split = ", ".join(f"{k} {v:.0%}" for k, v in (r["stacks_split"] or {}).items())
        print(f"   stacks: {split or '-'}   top: {'; '.join(r['stacks_top'])}")
        if r["headline"]:
            print(f"   headline: {r['headline']}")
        for rec in r["recommendations"]:
            print(f"   - [{rec['applies']}] {rec['text']}  -- {rec['why']}")
        for e in errs:
            if e:
                print(f"   ! {e}")


def _phase_note(r: dict[str, Any]) -> str:
    """Which phase the two sides are: the truth's, and sofa-top's that was compared."""
    if not r.get("phase"):
        return ""
    sofa = r.get("sofa_phase") or "all steps"
    note = f" [{r['phase']} phase; sofa-top: {sofa}]"
    if r.get("self_host_fraction") is not None:
        note += f" (self host time {_fmt(r['self_host_fraction'])})"
    return note


def _sofa_phases(r: dict[str, Any]) -> str:
    return (
        ", ".join(
            f"{p.get('phase')} {p.get('count')} steps {_fmt(p.get('input_wait_fraction'))}"
            for p in r.get("sofa_phases") or []
        )
        or "-"
    )


def _self_phases(r: dict[str, Any]) -> str:
    return ", ".join(f"{k} {_fmt(v)}" for k, v in (r.get("self_phases") or {}).items()) or "-"


def rejudge(row: dict[str, Any], script: dict[str, Any]) -> None:
    """Recompute the recommendation judgements of a saved row (the rules may have changed)."""
    src = _sources(script)
    row["result"]["recommendations"] = [
        {"text": r["text"], "applies": a, "why": w}
        for r in row["result"]["recommendations"]
        for a, w in [judge_recommendation(r["text"], script, src)]
    ]


def markdown(rows: list[dict[str, Any]]) -> None:
    """The README's results table."""
    print(
        "| id | verdict | steps (sources) | input wait: sofa-top / self (diff) | stacks split "
        "| recommendations [applies?] |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        r = row["result"]
        errs = [row.get(k, {}).get("error") for k in ("sofa", "probe")]
        src = ", ".join(f"{k} {v}" for k, v in (r["step_sources"] or {}).items()) or "none"
        split = ", ".join(f"{k} {v:.0%}" for k, v in (r["stacks_split"] or {}).items())
        recs = "<br>".join(
            f"[{x['applies']}] `{x['text']}` ({x['why']})" for x in r["recommendations"]
        )
        verdict = f"{r['verdict']} ({_fmt(r['confidence'], False)})"
        if any(errs):
            verdict += " **run failed**"
        print(
            f"| {row['id']} | {verdict} | {_fmt(r['steps_count'])} ({src}) "
            f"| {_fmt(r.get('input_wait_fraction'))} / {_fmt(r.get('self_input_fraction'))} "
            f"({_fmt(r.get('difference'))}){_phase_note(r)} | {split or '-'} "
            f"| {recs or '-'} |".replace("\n", " ")
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", help="script id (repeatable)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--save", type=Path, help="also write the JSON document to FILE")
    ap.add_argument("--mirror", type=Path, help="bare mirrors for prepare.py")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per run (default 240)")
    ap.add_argument("--skip-sofa", action="store_true", help="only the instrumented copies")
    ap.add_argument(
        "--from",
        dest="saved",
        type=Path,
        nargs="+",
        help="no runs: re-judge and print saved --save documents (merged, manifest order)",
    )
    ap.add_argument("--markdown", action="store_true", help="with --from: the README table")
    args = ap.parse_args(argv)
    if args.saved:
        by_id = {s["id"]: s for s in prepare.load_manifest()}
        saved = [r for f in args.saved for r in json.loads(f.read_text())["scripts"]]
        latest = {r["id"]: r for r in saved}
        rows = [latest[i] for i in by_id if i in latest]
        for row in rows:
            rejudge(row, by_id[row["id"]])
        if args.json or args.save:
            doc = {"schema": 1, "ran": "merged", "cores": os.cpu_count(), "scripts": rows}
            if args.save:
                args.save.write_text(json.dumps(doc, indent=1) + "\n")
            if args.json:
                print(json.dumps(doc, indent=1))
        elif args.markdown:
            markdown(rows)
        else:
            render(rows)
        return 0
    if not (VENV_BIN / "sofa-top").exists():
        print(f"run: no {VENV_BIN / 'sofa-top'} (make the worktree's .venv first)", file=sys.stderr)
        return 2
    scripts = prepare.load_manifest()
    if args.only:
        unknown = set(args.only) - {s["id"] for s in scripts}
        if unknown:
            print(f"run: unknown script id(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        scripts = [s for s in scripts if s["id"] in args.only]
    rows = []
    for s in scripts:
        if not (SRC / s["id"] / "probe").exists():
            try:
                git_dir = prepare.source_dir(s, args.mirror, SRC / ".git-cache")
                prepare.materialise(s, git_dir, SRC)
            except prepare.PrepareError as e:
                print(f"run: {e}", file=sys.stderr)
                return 1
        if not args.json:
            print(f"running {s['id']} ...", file=sys.stderr, flush=True)
        row = evaluate(s, args.timeout, args.skip_sofa)
        rows.append(row)
        if not args.json:
            render([row])
            sys.stdout.flush()
    doc = {
        "schema": 1,
        "ran": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cores": os.cpu_count(),
        "scripts": rows,
    }
    if args.save:
        args.save.write_text(json.dumps(doc, indent=1) + "\n")
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    shutil.rmtree(SRC / ".tmp", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
