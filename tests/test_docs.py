"""The docs cannot drift: the README's first block still holds the two commands, every picture
it shows is there, the CLI reference and the man page are what the parser says now, and the
site's config names only pages that exist."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).parent.parent
README = REPO / "README.md"


def gen_cli_docs() -> ModuleType:
    path = REPO / "scripts" / "gen_cli_docs.py"
    spec = importlib.util.spec_from_file_location("gen_cli_docs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_starts_with_exactly_the_two_commands() -> None:
    """``.ci/run`` runs the second line of the first ```sh block; the first installs the demo."""
    text = README.read_text(encoding="utf-8")
    first_fence = re.search(r"^```.*$", text, re.M)
    assert first_fence is not None and first_fence.group(0) == "```sh", "the first block is ```sh"
    block = re.search(r"^```sh\n(.*?)\n```$", text, re.S | re.M)
    assert block is not None
    lines = block.group(1).split("\n")
    assert len(lines) == 2, lines
    demo, tests = lines
    assert demo.startswith("python3 -m venv .venv && ") and demo.endswith("sofa-top demo torch")
    assert tests.startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[all]'")
    assert "pytest" in tests and ".venv/bin/lint-imports" in tests
    # .ci/run's own reading of the block gives the same second line
    awk = r"/^```sh$/{inblock=1; next} inblock && /^```$/{exit} inblock{print}"
    read = subprocess.run(["awk", awk, str(README)], capture_output=True, text=True, check=True)
    assert read.stdout.splitlines() == lines


def test_readme_is_short_and_its_pictures_exist() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    images += re.findall(r"<img [^>]*src=\"([^\"]+)\"", text)
    assert images, "the README shows the dashboard"
    for image in images:
        path = REPO / image
        assert path.is_file() and path.stat().st_size > 0, image
        if path.suffix == ".svg":
            head = path.read_text(encoding="utf-8")[:400]
            assert "<svg" in head, image


def test_readme_links_point_at_files() -> None:
    """Relative links (docs pages, LICENSE, CONTRIBUTING.md...) name files of the repository;
    SECURITY.md is the one written elsewhere, and may be missing on a branch."""
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"(?<!!)\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
        if target.startswith(("http://", "https://")) or target == "SECURITY.md":
            continue
        assert (REPO / target).exists(), target


def test_cli_reference_is_what_the_parser_says() -> None:
    gen = gen_cli_docs()
    committed = gen.CLI_MD.read_text(encoding="utf-8")
    written_under = re.search(re.escape(gen.MARKER) + r"(\d+\.\d+)", committed)
    assert written_under is not None, "docs/reference/cli.md says which Python wrote it"
    # every subcommand `sofa-top --help` lists has its section, whatever the Python
    listed = list(gen.subcommands(gen._parser()))
    assert len(listed) >= 12, listed
    for name in listed:
        assert f"\n## sofa-top {name}\n" in committed, name
    if written_under.group(1) != gen.PYTHON:
        pytest.skip(f"argparse's layout is Python {written_under.group(1)}'s, this is {gen.PYTHON}")
    assert committed == gen.cli_markdown(), (
        "--help changed: run .venv/bin/python scripts/gen_cli_docs.py"
    )


def test_cli_reference_matches_the_real_help() -> None:
    """The console script's own ``--help`` (a real process) is in the reference."""
    gen = gen_cli_docs()
    sofa_top = Path(sys.executable).with_name("sofa-top")
    env = {**os.environ, "COLUMNS": gen.WIDTH}
    out = subprocess.run(
        [str(sofa_top), "attach", "--help"], capture_output=True, text=True, env=env, check=True
    ).stdout
    committed = gen.CLI_MD.read_text(encoding="utf-8")
    if gen.MARKER + gen.PYTHON not in committed:
        pytest.skip("the reference was written under another Python")
    assert out.rstrip() in committed


def test_man_page_is_what_the_parser_says() -> None:
    pytest.importorskip("argparse_manpage", reason="argparse-manpage (the test and docs extras)")
    gen = gen_cli_docs()
    committed = gen.MAN_PAGE.read_text(encoding="utf-8")
    if gen.MARKER + gen.PYTHON not in committed:
        pytest.skip("the man page was written under another Python")
    assert committed == gen.man_page(), (
        "--help changed: run .venv/bin/python scripts/gen_cli_docs.py"
    )
    assert ".SH" in committed and "attach" in committed


def test_site_nav_names_pages_that_exist() -> None:
    """mkdocs --strict checks this too; this says it without installing mkdocs."""
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") :]
    pages = re.findall(r":\s+([\w/.-]+\.md)\s*$", nav, re.M)
    assert len(pages) >= 15, pages
    for page in pages:
        assert (REPO / "docs" / page).is_file(), page
    for page in (REPO / "docs").rglob("*.md"):
        assert page.relative_to(REPO / "docs").as_posix() in pages, f"{page} is in no nav"


def test_verdicts_page_names_every_verdict_kind() -> None:
    from sofa_top.datamodel.verdict import VERDICT_KINDS

    page = (REPO / "docs" / "verdicts.md").read_text(encoding="utf-8")
    missing = [kind for kind in VERDICT_KINDS if f"`{kind}`" not in page]
    assert not missing, f"docs/verdicts.md does not explain {missing}"


def test_dashboard_page_names_every_key() -> None:
    """A key the dashboard binds (a letter, a digit, a bracket, tab) is on its page."""
    from sofa_top.tui.app import DashboardApp

    page = (REPO / "docs" / "dashboard.md").read_text(encoding="utf-8")
    keys = set()
    for binding in DashboardApp.BINDINGS:
        assert not isinstance(binding, tuple)
        shown = binding.key_display or binding.key
        if len(shown) == 1 or shown == "tab":
            keys.add(shown)
    assert {"p", "z", "s", "o", "q", "?", "tab", "1"} <= keys, keys
    missing = sorted(k for k in keys if f"`{k}`" not in page)
    assert not missing, f"docs/dashboard.md does not say what {missing} do"
