"""``pip install sofa-top`` alone (the wheel, no extra): no framework, no test tools, no
textual-serve; from there it launches and attaches to a job in another virtualenv, whose
interpreter has no sofa-top, with the agent inside (steps measured). The README's first
command installs neither pytest nor mypy."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from procs import spawned, wait_until

REPO = Path(__file__).parent.parent
WORKLOAD = Path(__file__).parent / "workloads" / "agent_plain.py"


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)\n```", text, re.S)
    assert block, "README starts with a sh block of two commands"
    return block.group(1).splitlines()


def test_readme_first_command_is_lean() -> None:
    """The demo's install: one framework extra, no test tools; the second command stays
    the tests' (``.ci/run`` takes it)."""
    first, second = readme_commands()
    extras = re.search(r"pip install -e '\.\[([^\]]*)\]'", first)
    assert extras, first
    assert extras.group(1) in ("tf", "torch"), first
    assert "'.[all]'" in second and "pytest" in second


def pyproject_extras() -> dict[str, list[str]]:
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return dict(data["project"]["optional-dependencies"])


def test_extras_keep_test_tools_out_of_the_frameworks() -> None:
    extras = pyproject_extras()
    core = tomllib_core()
    for name in ("tf", "torch", "web"):
        deps = " ".join(extras[name]).lower()
        assert "pytest" not in deps and "mypy" not in deps, name
    assert not any(re.match(r"(pytest|mypy|torch|tensorflow|textual-serve)\b", d) for d in core)
    assert set(extras["all"][0].split("[")[1].rstrip("]").split(",")) >= {"tf", "torch", "web"}


def tomllib_core() -> list[str]:
    import tomllib

    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the wheel of this checkout and its core dependencies only."""
    root = tmp_path_factory.mktemp("lean")
    # Built from a copy of the tracked files: setuptools builds in the source tree's build/,
    # which another build (another xdist worker, CI's own wheel step) may be using.
    source = root / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             check=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"),
         str(source)],
        check=True, timeout=600,
    )  # fmt: skip
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    wheel = next((root / "dist").glob("sofa_top-*.whl"))
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True,
                   timeout=900)  # fmt: skip
    return venv


@pytest.fixture(scope="module")
def other_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another virtualenv, bare: its Python has no sofa-top (nor pip)."""
    venv = tmp_path_factory.mktemp("target") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


@pytest.mark.slow
def test_lean_install_has_no_extras(lean: Path) -> None:
    probe = (
        "import importlib.util as u; print(*[bool(u.find_spec(m)) for m in ("
        "'sofa_top', 'textual', 'torch', 'tensorflow', 'pytest', 'mypy', 'textual_serve')])"
    )
    out = subprocess.run([str(lean / "bin" / "python"), "-c", probe], capture_output=True,
                         text=True, check=True, cwd=lean).stdout.split()  # fmt: skip
    assert out == ["True", "True", "False", "False", "False", "False", "False"]
    web = subprocess.run([str(lean / "bin" / "sofa-top"), "serve"], capture_output=True,
                         text=True, timeout=60, cwd=lean)  # fmt: skip
    assert web.returncode == 2
    assert web.stderr.strip() == (
        "sofa-top: the browser view needs textual-serve: pip install 'sofa-top[web]'"
    )
    demo = subprocess.run([str(lean / "bin" / "sofa-top"), "demo", "torch"], capture_output=True,
                          text=True, timeout=60, cwd=lean)  # fmt: skip
    assert demo.returncode == 2
    assert demo.stderr.strip() == (
        "sofa-top: the torch demo needs PyTorch beside sofa-top: pip install 'sofa-top[torch]'"
    )


@pytest.mark.slow
def test_lean_launches_into_another_env(lean: Path, other_env: Path, tmp_path: Path) -> None:
    probe = "import importlib.util as u; print(u.find_spec('sofa_top'))"
    assert subprocess.check_output([str(other_env), "-c", probe], text=True, cwd=tmp_path) == (
        "None\n"
    )
    r = subprocess.run(
        [str(lean / "bin" / "sofa-top"), "record", "--json", "--", str(other_env), str(WORKLOAD),
         "--steps", "40", "--input-ms", "20", "--compute-ms", "5"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["exit_code"] == 0
    assert s["steps"]["count"] >= 30, s["steps"]
    assert s["steps"]["input_wait_fraction"] > 0.5  # 20 ms of input, 5 of compute


@pytest.mark.slow
def test_lean_attaches_to_another_env(lean: Path, other_env: Path, tmp_path: Path) -> None:
    argv = [str(other_env), str(WORKLOAD), "--steps", "100000", "--input-ms", "20",
            "--compute-ms", "5"]  # fmt: skip
    with spawned(argv, cwd=tmp_path) as job:
        assert wait_until(lambda: job.poll() is None, 5)
        r = subprocess.run(
            [str(lean / "bin" / "sofa-top"), "record", "--json", "--pid", str(job.pid),
             "--duration", "8"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["injected"] is True, r.stderr
    assert "agent injected into PID" in r.stderr
