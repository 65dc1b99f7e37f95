"""sofa-top's input fraction against each loop's own measure, per shape of issue 20, over
repeated runs (``tests/workloads/inference_shapes.py``: each loop times its model call against
its whole step with ``perf_counter``; ``tests/workloads/corpus_shapes.py``: the shapes of the
corpus' public inference scripts, each timing its input apart from its host work).

    python benchmarks/inference_shapes.py [--repeats 3] [--seconds 6] [--only SHAPE,...]

Prints per shape: the clock, the verdict kinds seen, sofa-top's ``steps.input_wait_fraction``
and the loop's own ``PREP_FRACTION`` (median, min-max), the median difference, and the advice
of the last run.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "tests" / "workloads"
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
SHAPES = (
    "tf-eager", "pil", "torch-nograd", "keras-predict", "keras-evaluate", "keras-predict-ds",
    "train-inloop", "serving", "torch-compute",
)  # fmt: skip
CORPUS_SHAPES = ("generate", "keras-predict-loop", "persistent")


def run(shape: str, seconds: str, out: Path) -> tuple[dict[str, object], float]:
    """One ``record --json`` of ``shape``: the summary and the loop's own measure."""
    script = "corpus_shapes.py" if shape in CORPUS_SHAPES else "inference_shapes.py"
    cmd = [sys.executable, str(WORKLOADS / script), "--shape", shape, "--seconds", seconds]
    proc = subprocess.run(
        [SOFA_TOP, "record", "--json", "-o", str(out), "--", *cmd],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    summary = json.loads(proc.stdout)
    from sofa_top.recording.reader import SessionReader

    reader = SessionReader(out)
    try:
        lines = [e.message for e in reader.events("log")]
    finally:
        reader.close()
    own = [float(m.group(1)) for x in lines if (m := re.fullmatch(r"PREP_FRACTION=(\S+)", x))]
    return summary, own[-1]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", default="6")
    p.add_argument("--only", default=",".join((*SHAPES, *CORPUS_SHAPES)))
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        for shape in a.only.split(","):
            seen, own, kinds = [], [], []
            summary: dict[str, object] = {}
            for k in range(a.repeats):
                summary, truth = run(shape, a.seconds, Path(tmp) / f"{shape}-{k}.sofa")
                steps = summary["steps"]
                assert isinstance(steps, dict)
                seen.append(float(steps["input_wait_fraction"] or 0.0))
                own.append(truth)
                verdict = summary["verdict"]
                assert isinstance(verdict, dict)
                kinds.append(str(verdict["kind"]))
            diffs = [s - o for s, o in zip(seen, own, strict=True)]
            steps = summary["steps"]
            verdict = summary["verdict"]
            assert isinstance(steps, dict) and isinstance(verdict, dict)
            print(
                f"{shape}: clock {','.join(steps['sources'])}; verdict {sorted(set(kinds))}; "
                f"sofa-top {spread(seen)}, own {spread(own)}, diff {spread(diffs)}"
            )
            for rec in verdict["recommendations"]:
                print(f"    - {rec}")


if __name__ == "__main__":
    main()
