"""The agent changes nothing a program does: every test workload and corpus script, run without
sofa-top and under ``sofa-top record``, ends the same way (exit status, the error's type, the
last loss it logged, where its loss is deterministic), and ``record`` exits with the workload's
status. ``tests/test_differential.py`` runs the cheap shapes in the suite; this is the sweep.

Usage::

    python benchmarks/differential.py [--only NAME ...] [--no-workloads] [--corpus]
        [--corpus-only ID ...] [--mirror DIR] [--timeout 300]

``--corpus`` adds ``benchmarks/corpus``'s scripts (materialised by its ``prepare.py``; a script
whose libraries are not installed fails the same way in both runs, and says so). Prints one row
per case and, last, how many agreed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
W = ROOT / "tests" / "workloads"
sys.path.insert(0, str(ROOT / "tests"))

from differential import Outcome, clean_env, run_plain, run_recorded  # noqa: E402

PY = sys.executable


@dataclass(frozen=True)
class Case:
    name: str
    cmd: tuple[str, ...]
    loss: bool = False  # its last loss is deterministic (fixed steps, seeded): compare it
    cwd: Path | None = None
    env: tuple[tuple[str, str], ...] = ()


def _w(script: str, *args: str, loss: bool = False, name: str = "") -> Case:
    label = name or " ".join([script.removesuffix(".py"), *args])
    return Case(label, (PY, str(W / script), *args), loss)


def _torchrun(*args: str) -> Case:
    cmd = (
        PY, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        "--master_port=29731", str(W / "ddp_ranks.py"), *args,
    )  # fmt: skip
    return Case("ddp_ranks (torchrun, 2 ranks) " + " ".join(args), cmd)


def workload_cases(tmp: Path) -> list[Case]:
    """Every runnable script of ``tests/workloads``, bounded (``fake_cuda.py`` is a backend,
    ``printer.py``, ``proc_tree.py`` and ``patched_callables.py`` wait for a test to drive
    them, ``sofa_case_common.py`` is the case study's library: not workloads on their own)."""
    never = str(tmp / "never")  # a file that never appears: jobs run their --seconds
    s = "5"
    return [
        _w("agent_keras_fit.py", "--mode", "input"),
        _w("agent_keras_fit.py", "--mode", "compute"),
        _w("agent_keras_fit.py", "--steps-per-execution", "8", "--warmup", "8", "--steps", "16"),
        _w("agent_keras_fit.py", "--source", "memory", "--steps-per-execution", "4"),
        _w("agent_plain.py"),
        _w("agent_plain.py", "--crash"),
        _w("agent_plain.py", "--exit-code", "3"),
        _w("agent_tf_eager.py", "--mode", "input"),
        _w("agent_tf_eager.py", "--mode", "compute", "--loop", "for"),
        _w("agent_torch.py", "--mode", "input"),
        _w("agent_torch.py", "--mode", "compute", "--workers", "2"),
        _w("agent_torch.py", "--mode", "optimizer"),
        *(
            _w("attach_jobs.py", "--job", j, "--window", never, "--stop", never, "--seconds", s)
            for j in ("tf-eager", "keras", "torch")
        ),
        *(
            _w("bad_loops.py", "--case", c)
            for c in ("lying-length", "worker-raises", "generator-ends")
        ),
        _w("busy_python.py", "3"),
        *(_w("cuda_shapes.py", "--shape", c, "--seconds", s) for c in ("input", "matmul", "tiny")),
        _torchrun("0", "--steps", "20"),
        _torchrun("3600", "--die-rank", "1", "--die-after", "3"),
        _w("forker.py", "3", "2"),
        *(_w("input_shapes_tf.py", "--shape", c, "--seconds", s) for c in ("cpu", "latency")),
        _w("input_shapes_tf.py", "--shape", "cpu", "--autotune", "--seconds", s),
        *(_w("input_shapes_torch.py", "--shape", c, "--seconds", s) for c in ("cpu", "latency")),
        _w("iterable_stream.py", "--seconds", s),
        _w("iterable_stream.py", "--workers", "2", "--shard", "worker", "--seconds", s),
        _w("keras_fit_plain.py", "--epochs", "2"),
        _w("keras_pydataset.py", "--seconds", s),
        _w("keras_pydataset.py", "--workers", "2", "--seconds", s),
        _w("keras_unknown_shape.py", name="keras_unknown_shape (keras-io 3D CT shape)"),
        _w("keras_unknown_shape.py", "--steps-per-execution", "4"),
        _w("keras_unknown_shape.py", "--static", loss=True),
        _w("keras_unknown_shape.py", "--static", "--steps-per-execution", "3", loss=True),
        _w("keras_unknown_shape.py", "--static", "--late-determinism", loss=True),
        _w("lbfgs_threads.py", "--seconds", s),
        *(_w("loop_frameworks.py", "--framework", f, "--steps", "20") for f in ("hf", "lightning")),
        *(
            _w("loop_shapes_torch.py", "--shape", shape, "--seconds", "3")
            for shape in (
                "forward-forward",
                "layerwise",
                "upfront",
                "hand-sgd",
                "lbfgs",
                "compile",
                "generator",
                "mm",
            )
        ),
        _w("proc_busy.py", "2"),
        _w("proc_dataloader.py", "3"),
        _w("proc_sleep.py", "1", "3"),
        _w("sleeper.py", "2"),
        *(
            _w("tf_generator.py", "--source", c, "--seconds", s)
            for c in ("generator", "interleave")
        ),
        _w("tf_input_bound.py", s),
        _w("torch_compute_bound.py", s),
        _w("torch_input_bound.py", s),
        *(_w("torch_models.py", "--model", m, "--seconds", s) for m in ("lstm", "cnn", "mlp")),
        *(
            _w(f"sofa_case_{fw}.py", "--method", m, "--images", "64", "--seconds", "3")
            for fw in ("tf", "torch")
            for m in ("loop", "serial", "parallel", "compiled")
        ),
        _w("torch_seeded.py", loss=True),
        _w("torch_seeded.py", "--workers", "2", loss=True),
        Case("python -c 'import a missing module'", (PY, "-c", "import no_such_module_sofa")),
        Case(
            "python -c 'killed by SIGTERM'",
            (PY, "-c", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)"),
        ),
    ]


def corpus_cases(only: Sequence[str], mirror: Path | None) -> list[Case]:
    """The corpus scripts' plain copies as its runner starts them (``prepare.py`` first)."""
    sys.path.insert(0, str(HERE / "corpus"))
    import prepare
    import run as corpus

    cases = []
    for script in prepare.load_manifest():
        if only and script["id"] not in only:
            continue
        root = corpus.SRC / script["id"] / "plain"
        if not root.exists():
            try:
                git_dir = prepare.source_dir(script, mirror, corpus.SRC / ".git-cache")
                prepare.materialise(script, git_dir, corpus.SRC)
            except prepare.PrepareError as e:  # no mirror of it, no network
                print(f"SKIPPED   corpus {script['id']}: cannot prepare it: {e}", flush=True)
                continue
        env = corpus._env(script, root)
        corpus._setup(script, root, env, 600)
        extra = tuple((k, v) for k, v in env.items() if os.environ.get(k) != v)
        cmd = tuple(corpus._cmd(script, root))
        cases.append(Case(f"corpus {script['id']}", cmd, cwd=corpus._cwd(script, root), env=extra))
    return cases


def compare(case: Case, tmp: Path, timeout: float) -> tuple[bool, str]:
    env = {**clean_env(), **dict(case.env)}
    if case.env:  # a corpus script's PYTHONPATH (its shims): kept, unlike an outer agent's
        env["PYTHONPATH"] = dict(case.env).get("PYTHONPATH", "")
    t0 = time.monotonic()
    plain = run_plain(case.cmd, env, case.cwd, timeout)
    rec = run_recorded(case.cmd, env, tmp / f"{abs(hash(case.name))}.sofa", case.cwd, timeout)
    took = time.monotonic() - t0
    want = plain if case.loss else Outcome(plain.status, plain.error, None)
    got = rec.workload if case.loss else Outcome(rec.workload.status, rec.workload.error, None)
    same = want == got
    # record exits as the workload did (its status, as a shell reports it)
    ok = same and rec.record_status == rec.workload.status and not rec.agent_errors
    text = (
        f"{'same' if ok else 'DIFFERENT':9s} {case.name[:60]:60s} plain {_fmt(plain, case.loss)}"
        f" | recorded {_fmt(rec.workload, case.loss)} | record exit {rec.record_status}"
        f" | {took:.0f} s"
    )
    if rec.agent_errors:
        text += f" | agent errors: {rec.agent_errors}"
    return ok, text


def _fmt(o: Outcome, loss: bool) -> str:
    return f"exit {o.status}, {o.error or '-'}" + (f", loss {o.loss}" if loss else "")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=[], help="cases whose name contains one of these")
    p.add_argument("--no-workloads", action="store_true")
    p.add_argument("--corpus", action="store_true")
    p.add_argument("--corpus-only", nargs="*", default=[], metavar="ID")
    p.add_argument("--mirror", type=Path, help="bare mirrors for the corpus's prepare.py")
    p.add_argument("--timeout", type=float, default=300.0)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sofa-differential-"))
    os.environ["SOFA_TOP_DATA_DIR"] = str(tmp / "data")
    cases = [] if a.no_workloads else workload_cases(tmp)
    if a.corpus or a.corpus_only:
        cases += corpus_cases(a.corpus_only, a.mirror)
    if a.only:
        cases = [c for c in cases if any(o in c.name for o in a.only)]
    print(f"load average {os.getloadavg()[0]:.1f}; {len(cases)} cases", flush=True)
    agreed = 0
    for case in cases:
        try:
            ok, text = compare(case, tmp, a.timeout)
        except Exception as e:  # a timeout, a corpus script that cannot be prepared
            ok, text = False, f"ERROR     {case.name}: {type(e).__name__}: {e}"
        agreed += ok
        print(text, flush=True)
    print(f"{agreed} of {len(cases)} ended the same with and without sofa-top", flush=True)
    return 0 if agreed == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
