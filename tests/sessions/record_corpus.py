"""Re-record the corpus of sessions in this folder (judged by tests/test_recorded_sessions.py).

Usage: ``.venv/bin/python tests/sessions/record_corpus.py [NAME...]`` (no name: every CPU
session, one after the other: never in parallel, a recording beside another is disturbed by
it). Each session is a real workload of ``tests/workloads/`` (or a bundled demo) recorded as
the live tests record it: ``sofa-top record --json -o FILE -- CMD`` (launch),
``sofa-top record --pid PID`` (attach, the agent injected), or ``open_launch`` with short CUDA
profiler windows for the modelled-GPU loops (``cuda_shapes.py --fake``, as
``tests/test_gpu_loop.py`` runs them). It writes ``NAME.sofa.xz`` (the session file as
written, ``xz -9``) and ``NAME.truth.json``: what the workload measured itself (its own input
fraction, steps, ...) and what it was built to be (the verdict kind, its framework and step
clock), never a reading of sofa-top's, and how it was recorded (command, mode, date, load).
"""

from __future__ import annotations

import json
import lzma
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WORKLOADS = ROOT / "tests" / "workloads"
DEMOS = ROOT / "sofa_top" / "demos"
PY = sys.executable
SOFA_TOP = str(Path(PY).with_name("sofa-top"))

Mode = Literal["launch", "attach", "gpu"]
Truth = Callable[[list[str]], dict[str, Any]]


def keys(**names: str) -> Truth:
    """The truth from ``KEY=<x>`` lines (the last of each): ``field=KEY``."""

    def read(lines: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, key in names.items():
            found = [m.group(1) for ln in lines if (m := re.fullmatch(rf"{key}=(\S+)", ln))]
            if found:
                out[name] = float(found[-1])
        return out

    return read


def result_json(lines: list[str]) -> dict[str, Any]:
    """``sofa_case_*.py``: its last stdout line is its result JSON."""
    found = [json.loads(ln) for ln in lines if ln.startswith("{")]
    if not found:
        return {}
    r = found[-1]
    return {"input_fraction": r["input_fraction"], "steps": r["steps"], "result": r}


def demo_fraction(lines: list[str]) -> dict[str, Any]:
    """The demos print ``step N loss X input fraction F`` every few steps (cumulative)."""
    pat = re.compile(r"^step (\d+) loss \S+ input fraction (\S+)$")
    found = [m for ln in lines if (m := pat.match(ln))]
    if not found:
        return {}
    return {"input_fraction": float(found[-1].group(2)), "steps": int(found[-1].group(1))}


def lbfgs(lines: list[str]) -> dict[str, Any]:
    found = [ln.split() for ln in lines if ln.startswith("STEPS ")]
    return {"steps": int(found[-1][1]), "seconds": float(found[-1][2])} if found else {}


def nothing(_lines: list[str]) -> dict[str, Any]:
    return {}


FRACTION = keys(input_fraction="SELF_INPUT_FRACTION", steps_per_s="SELF_STEPS_PER_S")
PREP = keys(input_fraction="PREP_FRACTION", steps="STEPS")


@dataclass(frozen=True)
class Spec:
    """One session: the workload, how it is recorded, and what it was built to be."""

    name: str
    argv: tuple[str, ...]  # the command (a script of tests/workloads or a demo, its args)
    kind: str  # the verdict kind the workload is built to have
    framework: str | None  # the model's framework ("torch", "tensorflow"; None: no model)
    clock: str | None  # the step clock its loop has (None: no step the agent can time)
    about: str
    mode: Mode = "launch"
    truth: Truth = nothing
    seconds: float = 10.0  # attach: how long sofa-top records; gpu: how long the loop runs
    extra: dict[str, Any] = field(default_factory=dict)  # more truth by construction


def w(script: str, *args: str) -> tuple[str, ...]:
    return (PY, str(WORKLOADS / script), *args)


INF = "inference_shapes.py"
_S = ("--seconds", "10")
SPECS: tuple[Spec, ...] = (
    # (--warmup 0: the workload's own fraction covers every step, as the report's does; the
    # first holds the step's tracing, a second of compute beside 12 ms steps)
    Spec("tf-data-input-bound",
         w("agent_tf_eager.py", "--mode", "input", "--loop", "next", "--warmup", "0",
           "--steps", "300"),
         "input-bound", "tensorflow", "tf-eager", "a slow serial tf.data map, next(it)",
         truth=FRACTION),
    Spec("tf-data-compute-bound",
         w("agent_tf_eager.py", "--mode", "compute", "--loop", "for", "--threads", "1",
           "--steps", "60"),
         "compute-bound", "tensorflow", "tf-eager",
         "a cheap prefetched tf.data pipeline, a heavy compiled step, for x in ds",
         truth=FRACTION),
    # (the workload's fraction leaves out the first batch, Keras' compile, which the report's
    # steps hold: 300 batches make it a small part of the run)
    Spec("keras-fit-input-bound",
         w("agent_keras_fit.py", "--mode", "input", "--warmup", "1", "--steps", "300"),
         "input-bound", "tensorflow", "keras-fit", "Keras fit on a serial 25 ms/batch pipeline",
         truth=keys(input_fraction="SELF_INPUT_FRACTION",
                    input_fraction_lower="SELF_INPUT_FRACTION_LOWER",
                    input_fraction_upper="SELF_INPUT_FRACTION_UPPER")),
    Spec("torch-dataloader-input-bound", w("agent_torch.py", "--mode", "input", "--steps", "60"),
         "input-bound", "torch", "torch-dataloader",
         "DataLoader(num_workers=0), slow pure-Python __getitem__", truth=FRACTION),
    Spec("torch-dataloader-compute-bound",
         w("agent_torch.py", "--mode", "compute", "--steps", "60"),
         "compute-bound", "torch", "torch-dataloader",
         "a cheap __getitem__, a model a hundred times heavier", truth=FRACTION),
    Spec("torch-optimizer-loop", w("agent_torch.py", "--mode", "optimizer", "--steps", "60"),
         "compute-bound", "torch", "torch-model-call",
         "no DataLoader: one preloaded batch, optimizer.step() per step",
         truth=keys(input_fraction="SELF_INPUT_FRACTION", step_ms="SELF_STEP_MS")),
    Spec("inference-tf-eager-preprocess", w(INF, "--shape", "tf-eager", *_S),
         "input-bound", "tensorflow", "keras-model-call",
         "tf.io decode/resize per image in the loop body, then a Keras CNN", truth=PREP),
    Spec("inference-pil-torch", w(INF, "--shape", "pil", *_S),
         "input-bound", "torch", "torch-model-call",
         "PIL decode/resize in the loop body, a torch CNN in eval() (autograd on)", truth=PREP),
    Spec("inference-keras-predict-ds", w(INF, "--shape", "keras-predict-ds", *_S),
         "input-bound", "tensorflow", "tf-eager",
         "one model.predict(ds) over a serial decoding tf.data map", truth=PREP),
    Spec("inference-torch-compute", w(INF, "--shape", "torch-compute", *_S),
         "compute-bound", "torch", "torch-model-call",
         "a wide torch CNN on a batch decoded once", truth=PREP),
    Spec("inference-torch-eval", w(INF, "--shape", "torch-eval", *_S),
         "input-bound", "torch", "torch-model-call",
         "train-inloop with an eval() + no_grad pass every 20 training steps: two phases",
         truth=keys(input_fraction="PREP_FRACTION", steps="STEPS",
                    eval_input_fraction="EVAL_PREP_FRACTION", eval_steps="EVAL_STEPS"),
         extra={"phases": ["train", "eval"]}),
    Spec("corpus-persistent-workers",
         w("corpus_shapes.py", "--shape", "persistent", "--seconds", "8"),
         "input-bound", "torch", "torch-dataloader",
         "DataLoader(num_workers=2, persistent_workers=True), 8 ms reads, 20 model calls a batch",
         truth=keys(input_fraction="PREP_FRACTION", host_fraction="HOST_FRACTION",
                    steps="STEPS")),
    Spec("tf-input-latency", w("input_shapes_tf.py", "--shape", "latency", "--seconds", "8"),
         "input-bound", "tensorflow", "tf-eager",
         "serial tf.data map waiting 5 ms an element (numpy_function sleep)",
         extra={"input_causes": ["latency"]}),
    Spec("torch-input-cpu", w("input_shapes_torch.py", "--shape", "cpu", "--seconds", "8"),
         "input-bound", "torch", "torch-dataloader",
         "DataLoader(num_workers=0), an FFT and matmuls per __getitem__",
         extra={"input_causes": ["cpu", "contention"]}),
    Spec("keras-pydataset", w("keras_pydataset.py", "--seconds", "8"),
         "input-bound", "tensorflow", "keras-fit",
         "Keras fit on a PyDataset waiting 5 ms a batch, workers=1"),
    Spec("demo-torch-input-bound", (PY, str(DEMOS / "torch_input_bound.py"), "--seconds", "16"),
         "input-bound", "torch", "torch-dataloader",
         "the bundled torch demo (simulated storage latency)", truth=demo_fraction),
    Spec("demo-tf-input-bound", (PY, str(DEMOS / "tf_input_bound.py"), "--seconds", "8"),
         "input-bound", "tensorflow", "tf-eager", "the bundled TensorFlow demo",
         truth=demo_fraction),
    Spec("lbfgs-oversubscribed",
         ("taskset", "-c", "0", *w("lbfgs_threads.py", "--threads", "4", "--hidden", "512",
                                   "--seconds", "12")),
         "cpu-oversubscribed", "torch", "torch-optimizer",
         "LBFGS with a 4-thread OpenMP pool on one core (taskset)", truth=lbfgs),
    Spec("tf-function-call", w("tf_function_loop.py", "--warmup", "0", "--seconds", "8"),
         "input-bound", "tensorflow", "tf-function-call",
         "NumPy decoding in the loop body, then one tf.function (forward, gradient, update)",
         truth=PREP),
    Spec("busy-python", w("busy_python.py", "8"), "python-overhead", None, None,
         "a pure-Python loop, no framework"),
    Spec("failed-to-start", (PY, str(WORKLOADS / "no_such_train.py")), "unknown", None, None,
         "a script that does not exist: exit code 2 before any step",
         extra={"exit_code": 2}),
    Spec("ddp-straggler",
         (PY, "-m", "torch.distributed.run", "--nproc_per_node=2",
          str(WORKLOADS / "ddp_ranks.py"), "10", "--slow-rank", "1", "--sleep-ms", "4"),
         "straggler", "torch", "torch-dataloader",
         "torchrun, 2 gloo ranks, rank 1 sleeps 4 ms a sample", extra={"slow_rank": 1}),
    Spec("ddp-balanced",
         (PY, "-m", "torch.distributed.run", "--nproc_per_node=2",
          str(WORKLOADS / "ddp_ranks.py"), "10"),
         "balanced", "torch", "torch-dataloader", "torchrun, 2 gloo ranks, none slowed"),
    # -- attached (the agent injected into the running loop) --------------------------------
    Spec("attach-serving", w(INF, "--shape", "serving"), "input-bound", "torch",
         "torch-model-call", "a serving loop: one request at a time, decode, a CNN on one",
         mode="attach", truth=PREP, seconds=8),
    Spec("attach-train-inloop", w(INF, "--shape", "train-inloop"), "input-bound", "torch",
         "torch-model-call", "a torch training loop decoding/augmenting in its body",
         mode="attach", truth=PREP, seconds=8),
    Spec("attach-tf-eager-preprocess", w(INF, "--shape", "tf-eager"), "input-bound",
         "tensorflow", "keras-model-call", "inference-tf-eager-preprocess, attached",
         mode="attach", truth=PREP, seconds=8),
    Spec("attach-torch-dataloader", w("attach_jobs.py", "--job", "torch"), "input-bound",
         "torch", "torch-dataloader", "for x, y in loader over a slow pure-Python __getitem__",
         mode="attach", truth=FRACTION, seconds=8),
    Spec("attach-keras-fit", w("attach_jobs.py", "--job", "keras"), "input-bound",
         "tensorflow", "keras-fit", "model.fit over a serial tf.py_function pipeline",
         mode="attach", truth=FRACTION, seconds=8),
    Spec("attach-idle", w("sleeper.py", "600"), "idle", None, None,
         "a process that sleeps (its helper thread waits on an event)", mode="attach",
         seconds=6),
    # -- a modelled GPU (tests/workloads/fake_cuda.py: NO hardware) ----------------------------
    Spec("gpu-fake-compute",
         w("cuda_shapes.py", "--shape", "matmul", "--fake", "compute", "--size", "64"),
         "compute-bound", "torch", "torch-model-call",
         "MODELLED GPU: 60 ms of kernels a step, the host waiting", mode="gpu",
         extra={"device": "gpu"}),
    Spec("gpu-fake-launch",
         w("cuda_shapes.py", "--shape", "tiny", "--fake", "launch", "--layers", "20"),
         "gpu-underutilized", "torch", "torch-dataloader",
         "MODELLED GPU: 2 us kernels every 25 us (launch-bound)", mode="gpu",
         extra={"device": "gpu", "cause": "launch"}),
    Spec("gpu-fake-input", w("cuda_shapes.py", "--shape", "input", "--fake", "input"),
         "input-bound", "torch", "torch-dataloader",
         "MODELLED GPU: 3 ms of kernels, then idle while the DataLoader sleeps", mode="gpu",
         extra={"device": "gpu"}),
    Spec("gpu-fake-copy",
         w("cuda_shapes.py", "--shape", "tiny", "--fake", "copy", "--layers", "5"),
         "gpu-underutilized", "torch", "torch-dataloader",
         "MODELLED GPU: a 10 ms pageable blocking H2D copy a step", mode="gpu",
         extra={"device": "gpu", "cause": "copy"}),
    # (the allocator's pressure is a cause of an underused GPU; the kind memory-pressure is
    # the host's RAM, 95% used, which no recording may do to a shared machine)
    Spec("gpu-fake-memory",
         w("cuda_shapes.py", "--shape", "matmul", "--fake", "memory", "--size", "256"),
         "gpu-underutilized", "torch", "torch-model-call",
         "MODELLED GPU: 4 ms of kernels a step beside ~30 ms of host compute, the allocator "
         "holding 97% of the card and retrying", mode="gpu",
         extra={"device": "gpu", "cause": "memory-pressure"}),
    Spec("gpu-fake-launch-oom",
         w("cuda_shapes.py", "--shape", "tiny", "--fake", "launch", "--layers", "20",
           "--fail-at-step", "150", "--fail-with", "oom"),
         "gpu-underutilized", "torch", "torch-dataloader",
         "gpu-fake-launch whose own step 150 raises CUDA out of memory: a failed workload",
         mode="gpu", extra={"device": "gpu", "cause": "launch", "exit_code": 1,
                            "error": "OutOfMemoryError: CUDA out of memory"}),
)  # fmt: skip
BY_NAME = {s.name: s for s in SPECS}
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
GPU_SETTINGS = {"cuda_first_window_s": 0.5, "cuda_window_s": 2.0, "cuda_window_steps": 4}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def stdout_of(session: Path) -> list[str]:
    """The workload's stdout lines, as the session kept them (launch mode)."""
    from sofa_top.recording.reader import SessionReader

    reader = SessionReader(session)
    try:
        logs = reader.events("log")
    finally:
        reader.close()
    return [e.message for e in logs if e.data.get("stream") == "stdout"]


def launch(spec: Spec, out: Path) -> tuple[list[str], list[str]]:
    cmd = [SOFA_TOP, "record", "--json", "-o", str(out), "--", *spec.argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=ENV,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    try:  # it exits with the workload's own status: a summary says it recorded
        json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(
            f"{spec.name}: sofa-top exited {proc.returncode}: {proc.stderr[-800:]}"
        ) from None
    return cmd, stdout_of(out)


def attach(spec: Spec, out: Path, tmp: Path) -> tuple[list[str], list[str]]:
    """Start the loop, attach once it is warm (``READY``), record ``spec.seconds``: the loop
    counts only the steps run while its ``--window`` file exists (those sofa-top saw)."""
    window, stop, log = tmp / "window", tmp / "stop", tmp / "stdout"
    argv = list(spec.argv)
    windowed = "--shape" in argv or "--job" in argv  # a window and a stop file
    if windowed:
        argv += ["--seconds", "600", "--window", str(window), "--stop", str(stop)]
    with log.open("w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.DEVNULL, env=ENV,
                                stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        ready = not windowed  # the sleeper: once its interpreter is up
        if ready:
            time.sleep(3.0)
        while not ready and time.monotonic() < deadline and proc.poll() is None:
            ready = "READY" in log.read_text().split()
            time.sleep(0.2)
        if not ready:
            raise RuntimeError(f"{spec.name}: the loop never printed READY")
        window.touch()
        cmd = [SOFA_TOP, "record", "--pid", str(proc.pid), "--duration", str(spec.seconds),
               "--inject-timeout", "60", "--json", "-o", str(out)]  # fmt: skip
        rec = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
        window.unlink()
        if rec.returncode != 0 or not json.loads(rec.stdout).get("injected"):
            raise RuntimeError(f"{spec.name}: record --pid: {rec.returncode} {rec.stderr[-800:]}")
        stop.touch()
        if not windowed:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return cmd, log.read_text().splitlines()


def gpu(spec: Spec, out: Path) -> tuple[list[str], list[str]]:
    """A modelled-GPU loop launched as ``tests/test_gpu_loop.py`` launches it (short CUDA
    profiler windows; with stacks here, for the host split), run for ``spec.seconds``; it
    ends by itself."""
    from sofa_top.launch import LaunchRequest, Sampling, open_launch

    argv = (*spec.argv, "--seconds", str(spec.seconds))
    run = open_launch(
        LaunchRequest(cmd=argv, mode="record", output=str(out), settings=GPU_SETTINGS,
                      sampling=Sampling(interval_s=0.2))
    )  # fmt: skip
    exited = threading.Event()
    run.start(lambda s: exited.set() if s.target_exited else None)
    try:
        exited.wait(spec.seconds + 180)
        run.session.wait(30.0)
    finally:
        run.finish("corpus recording done")
    return ["open_launch", *argv], stdout_of(out)


def record(spec: Spec) -> None:
    load_before = uptime()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{spec.name}.sofa"
        if spec.mode == "launch":
            cmd, lines = launch(spec, out)
        elif spec.mode == "attach":
            cmd, lines = attach(spec, out, Path(tmp))
        else:
            cmd, lines = gpu(spec, out)
        data = out.read_bytes()
    measured = spec.truth(lines)
    truth = {
        "name": spec.name,
        "about": spec.about,
        "kind": spec.kind,
        "framework": spec.framework,
        "clock": spec.clock,
        **spec.extra,
        "measured": measured,  # the workload's own measures (its stdout)
        "recorded": {
            "mode": spec.mode,
            "command": [str(c).replace(str(ROOT) + "/", "").replace(PY, "python") for c in cmd],
            "date": started,
            "load_before": load_before,
            "load_after": uptime(),
            "seconds": spec.seconds if spec.mode != "launch" else None,
        },
    }
    (HERE / f"{spec.name}.sofa.xz").write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    (HERE / f"{spec.name}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"{spec.name}: {len(data) // 1024} KiB, truth {measured}", flush=True)


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"record_corpus: no such session: {', '.join(unknown)}", file=sys.stderr)
        return 2
    failed = 0
    for spec in [BY_NAME[n] for n in names] if names else SPECS:
        try:
            record(spec)
        except Exception as e:  # one failed recording does not stop the others
            failed += 1
            print(f"{spec.name}: FAILED: {e}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
