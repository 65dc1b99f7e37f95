"""The GPU device check: sofa-top on three real CUDA loops, one command, at most ~4 minutes.

    python3 benchmarks/gpu_check.py --out benchmarks/results/gpu_check-DATE.txt

Each workload (tests/workloads/cuda_shapes.py) runs under ``sofa-top record --json --no-stacks``
with its own timeout, and the verdict must tell them apart:

- ``input``: a DataLoader reading slow storage: ``input-bound`` with the GPU as the loop's device;
- ``matmul``: large fp32 matmuls: ``compute-bound`` with ``evidence.device == "gpu"``;
- ``tiny``: a hundred tiny layers: ``gpu-underutilized`` with ``evidence.cause == "launch"``;

then ``sofa-top compare`` with the GPU toggles (pin-memory, bf16, compile-mode =
torch.compile reduce-overhead) on the launch-bound one, within what is left of the budget.
Results are written as they come (stdout and ``--out``): first the GPU model and driver from
NVML, then per workload the verdict, the GPU-busy fraction and NVML's readings, then the
comparison. Without an NVIDIA GPU it prints ``no NVIDIA GPU: skipped`` and exits 0.

Needs only what ``record`` and ``compare`` need (no textual, py-spy or perfetto: no stacks are
sampled). ``--cpu-smoke`` runs the same pipeline on the CPU with the tests' modelled GPU
(``--fake``, tests/workloads/fake_cuda.py): a check of this script, not of any GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "tests" / "workloads" / "cuda_shapes.py"
sys.path.insert(0, str(ROOT))  # sofa_top from this checkout when it is not installed

# shape -> (what the verdict must say, the fake GPU shape for --cpu-smoke)
EXPECTED = {
    "input": ("input-bound", "device", "gpu", "input"),
    "matmul": ("compute-bound", "device", "gpu", "compute"),
    "tiny": ("gpu-underutilized", "cause", "launch", "launch"),
}
GPU_CONFIGS = "baseline,pin-memory,bf16,compile-mode"
GIB = 1024**3


class Out:
    """Lines to stdout and the results file, flushed one by one (a kill loses nothing)."""

    def __init__(self, path: str | None) -> None:
        self.file: TextIO | None = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        if self.file is not None:
            self.file.write(line + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="also write the results to this file")
    p.add_argument("--budget", type=float, default=230.0, help="seconds for everything (230)")
    p.add_argument("--record-s", type=float, default=25.0, help="seconds each record runs")
    p.add_argument("--compare-s", type=float, default=5.0, help="measured seconds per run")
    p.add_argument("--configs", default=GPU_CONFIGS, help=f"compare's ({GPU_CONFIGS})")
    p.add_argument("--only", choices=tuple(EXPECTED), action="append", help="these shapes only")
    p.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="no GPU: run on the CPU with the tests' modelled GPU (checks this script only)",
    )
    return p.parse_args(argv)


def _gpu_line() -> tuple[bool, str]:
    from sofa_top.collectors.gpu import probe_gpus

    s = probe_gpus()
    if s.status != "ok" or not s.devices:
        return False, s.message or f"no NVIDIA GPU ({s.status})"
    names = ", ".join(
        f"GPU{d.index} {d.name}" + (f" {d.mem_total / GIB:.0f} GiB" if d.mem_total else "")
        + (" MIG" if d.mig else "")
        for d in s.devices
    )  # fmt: skip
    return True, f"{names}; NVIDIA driver {s.driver or '?'}"


def _run(cmd: list[str], timeout: float, env: dict[str, str]) -> tuple[int | None, str, str]:
    """Run ``cmd`` in its own process group; kill the group at ``timeout``. (rc, out, err)"""
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        out, err = p.communicate(timeout=max(1.0, timeout))
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
                out, err = p.communicate(timeout=10)
                break
            except ProcessLookupError:
                out, err = "", ""
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            out, err = "", ""
        return None, out or "", err or ""


def _pct(v: object) -> str:
    return f"{v:.0%}" if isinstance(v, int | float) else "-"


def _num(v: object, fmt: str = ".0f", unit: str = "") -> str:
    return f"{format(v, fmt)}{unit}" if isinstance(v, int | float) else "-"


def _nvml_lines(summary: dict[str, Any]) -> list[str]:
    gpu = summary.get("gpu") or {}
    out = []
    for d in gpu.get("devices", []):
        scope = " (device totals: NVML's PIDs are not this namespace's)" if d.get(
            "target_from_device"
        ) else ""  # fmt: skip
        mem = d.get("mem_max_bytes")
        tmem = d.get("target_mem_max_bytes")
        out.append(
            f"  NVML GPU{d['index']}: util mean {_num(d.get('util_mean_percent'), '.0f', '%')}, "
            f"mem max {_num(mem / GIB if mem else None, '.1f', ' GiB')}, power mean/max "
            f"{_num(d.get('power_mean_w'))}/{_num(d.get('power_max_w'))} W "
            f"(limit {_num(d.get('power_limit_w'))} W), SM clock mean "
            f"{_num(d.get('sm_clock_mean_mhz'))} MHz, throttle {d.get('throttle_reasons')}, "
            f"target mem {_num(tmem / GIB if tmem else None, '.1f', ' GiB')} util "
            f"{_num(d.get('target_util_mean_percent'), '.0f', '%')}{scope}"
        )
        if d.get("errors"):
            out.append(f"  NVML GPU{d['index']} missing readings: {d['errors']}")
    return out or ["  NVML: no GPU readings in the session"]


def _cuda_lines(summary: dict[str, Any]) -> list[str]:
    c = summary.get("cuda")
    if not c:
        return ["  CUDA (agent): no readings (the agent never saw CUDA initialised)"]
    lines = [
        f"  CUDA (agent): {c.get('device_name')} cc {c.get('capability')} bf16 "
        f"{c.get('bf16_supported')}; windows {c.get('windows')}, window busy "
        f"{_pct(c.get('busy_fraction'))}; allocator max "
        f"{_num((c.get('mem_reserved_max_bytes') or 0) / GIB, '.1f', ' GiB')} reserved, "
        f"{c.get('alloc_retries')} retries, ooms {c.get('ooms')}"
    ]
    w = c.get("last_window")
    if w:
        n = max(1, w["steps"])
        lines.append(
            f"  last window: {w['steps']} steps in {w['wall_s'] * 1e3:.0f} ms, busy "
            f"{w['busy_s'] / max(w['wall_s'], 1e-9):.0%}, {w['kernels'] / n:.0f} kernels/step "
            f"(median {_num((w.get('median_kernel_s') or 0) * 1e6, '.1f', ' us')}), launch gaps "
            f"{w['short_gap_s'] / max(w['wall_s'], 1e-9):.0%}, host gaps "
            f"{w['long_gap_s'] / max(w['wall_s'], 1e-9):.0%}, H2D {w['h2d_copies']} copies "
            f"({w['pageable_h2d']} pageable, {w['blocking_h2d']} blocking), syncs {w['syncs']}"
        )
    for e in c.get("errors") or []:
        lines.append(f"  CUDA reading missing: {e}")
    return lines


def _record(
    shape: str, args: argparse.Namespace, env: dict[str, str], tmp: Path, left: float, say: Out
) -> bool:
    """One workload under ``record --json``; True when its verdict is the expected one."""
    kind, key, value, fake = EXPECTED[shape]
    session = tmp / f"{shape}.sofa"
    duration = min(args.record_s, max(5.0, left - 40.0))
    workload = [sys.executable, str(WORKLOAD), "--shape", shape, "--seconds", str(duration + 60)]
    workload += ["--device", "cpu", "--fake", fake] if args.cpu_smoke else ["--device", "cuda"]
    cmd = [sys.executable, "-m", "sofa_top", "record", "--json", "--no-stacks", "--duration",
           str(duration), "-o", str(session), "--", *workload]  # fmt: skip
    t0 = time.monotonic()
    rc, out, err = _run(cmd, duration + 45.0, env)
    took = time.monotonic() - t0
    if rc is None:
        say(f"{shape}: record timed out after {took:.0f} s; stderr: {err.strip()[-300:]}")
        return False
    try:
        summary = json.loads(out)
    except ValueError:
        say(f"{shape}: record failed (exit {rc}): {err.strip()[-500:]}")
        return False
    v = summary.get("verdict") or {}
    ev = v.get("evidence") or {}
    ok = v.get("kind") == kind and ev.get(key) == value
    say(
        f"{shape}: verdict {v.get('kind')} ({key} {ev.get(key)}) - expected {kind} ({key} "
        f"{value}): {'OK' if ok else 'MISMATCH'}  [{took:.0f} s]"
    )
    say(f"  headline: {v.get('headline')}")
    steps = summary.get("steps") or {}
    median_ms = _num((steps.get("median_step_s") or 0) * 1e3, ".1f", " ms")
    say(
        f"  steps {steps.get('count')}, median {median_ms}, "
        f"input wait {_pct(steps.get('input_wait_fraction'))}, GPU busy "
        f"{_pct(steps.get('gpu_busy_fraction'))} over {steps.get('gpu_busy_steps')} steps "
        f"(verdict: {_pct(ev.get('gpu_busy_fraction'))} from {ev.get('gpu_busy_source')}), "
        f"median GPU span {_num((steps.get('median_gpu_span_s') or 0) * 1e3, '.1f', ' ms')}"
    )  # fmt: skip
    for line in [*_cuda_lines(summary), *_nvml_lines(summary)]:
        say(line)
    recs = v.get("recommendations") or []
    if recs:
        say(f"  first fix: {recs[0]}")
    # a workload sofa-top stopped at --duration ends as a stop does (1, 130, 143): not a failure
    if summary.get("end_reason") == "target exited" and summary.get("exit_code") not in (None, 0):
        say(f"  workload exit code {summary.get('exit_code')}: {err.strip()[-300:]}")
    return ok


def _compare(
    args: argparse.Namespace, env: dict[str, str], tmp: Path, left: float, say: Out
) -> None:
    """compare with the GPU toggles on the launch-bound loop, in what is left of the budget."""
    workload = [sys.executable, str(WORKLOAD), "--shape", "tiny", "--seconds", "600"]
    workload += ["--device", "cpu", "--fake", "launch"] if args.cpu_smoke else ["--device", "cuda"]
    cmd = [sys.executable, "-m", "sofa_top", "compare", "--json", "--configs", args.configs,
           "--repeats", "1", "--seconds", str(args.compare_s), "--warmup-steps", "10",
           "-o", str(tmp / "compare"), "--", *workload]  # fmt: skip
    say(f"compare (tiny, {args.configs}; {left:.0f} s left):")
    t0 = time.monotonic()
    rc, out, err = _run(cmd, left - 5.0, env)
    took = time.monotonic() - t0
    if rc is None:
        say(f"  compare timed out after {took:.0f} s (a cold torch.compile may take longer)")
        for line in err.splitlines():  # the runs that finished (compare's progress lines)
            if line.startswith("  "):
                say(f"  finished before the timeout:{line}")
        return
    try:
        result = json.loads(out)
    except ValueError:
        say(f"  compare failed (exit {rc}): {err.strip()[-500:]}")
        return
    for r in result.get("runs", []):
        tp = r.get("throughput") or {}
        say(
            f"  {r['config']}: {_num(tp.get('median'), '.0f')} {tp.get('unit')}, speedup "
            f"{_num(r.get('speedup'), '.2f', 'x')}, applied {r.get('applied')}, flags "
            f"{r.get('flags')}, compile {_num(r.get('compile_s'), '.1f', ' s')}, loss "
            f"{_num(r.get('loss'), '.4f')}, verdict {r.get('verdict')}"
        )
        for item in r.get("not_applied") or []:
            say(f"    {item['toggle']} not applied: {item['reason']}")
    say(f"  best: {result.get('best')}  [{took:.0f} s]")
    for c in result.get("changes") or []:
        say(f"  change: {c}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the device check (see the module doc)."""
    args = _args(argv)
    t_end = time.monotonic() + args.budget
    has_gpu, line = _gpu_line()
    if not has_gpu and not args.cpu_smoke:
        print("no NVIDIA GPU: skipped", flush=True)
        return 0
    say = Out(args.out)
    try:
        say(line if has_gpu else f"{line} (CPU smoke run: a MODELLED GPU, not a measurement)")
        say(
            f"gpu_check {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on {platform.node()}, python "
            f"{platform.python_version()}, {os.cpu_count()} CPUs"
        )
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with tempfile.TemporaryDirectory(prefix="sofa-top-gpu-check-") as d:
            tmp = Path(d)
            env["SOFA_TOP_DATA_DIR"] = str(tmp / "data")
            told = 0
            shapes = args.only or list(EXPECTED)
            for shape in shapes:
                left = t_end - time.monotonic()
                if left < 20:
                    say(f"{shape}: skipped, {left:.0f} s of the budget left")
                    continue
                told += _record(shape, args, env, tmp, left, say)
            say(f"verdicts told apart: {told}/{len(shapes)}")
            left = t_end - time.monotonic()
            if args.configs and left >= 45:
                _compare(args, env, tmp, left, say)
            elif args.configs:
                say(f"compare: skipped, {left:.0f} s of the budget left")
        say(f"done in {args.budget - (t_end - time.monotonic()):.0f} s")
    finally:
        say.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
