"""Every benchmark script still imports (they run by hand, so nothing else would tell that a
module they use moved: the corpus runner imported ``sofa_top.store`` after it had moved)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

_IMPORT_ALL = """
import importlib.util, sys
from pathlib import Path
failed = []
for path in sys.argv[1:]:
    sys.path.insert(0, str(Path(path).parent))
    spec = importlib.util.spec_from_file_location("bench_" + Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        failed.append(f"{path}: {type(e).__name__}: {e}")
    finally:
        sys.path.pop(0)
print("\\n".join(failed))
"""


def test_every_benchmark_imports() -> None:
    scripts = sorted([*REPO.glob("benchmarks/*.py"), *REPO.glob("benchmarks/corpus/*.py")])
    assert len(scripts) > 10
    r = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, *map(str, scripts)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "", r.stdout
