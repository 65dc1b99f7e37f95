"""The architecture's checks that import-linter's contracts (``lint-imports``) do not make:
no import cycle between any two modules, lazy and ``TYPE_CHECKING`` imports counted, and no
source file over 700 lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("sofa_top", "collectors", "optimizers", "tui")
MAX_LINES = 700


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [
            (root, sorted(graph.find_modules_directly_imported_by(root)))
        ]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.find_modules_directly_imported_by(nxt))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph("sofa_top", exclude_type_checking_imports=False)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.b", imported="p.c")
    assert _cycles(graph) == [["p.a", "p.b"]]


def test_no_source_file_over_700_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for d in SOURCE_DIRS
        for p in (REPO / d).rglob("*.py")
        if not p.is_symlink() and (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_import_contracts_hold() -> None:
    """The layers in pyproject.toml ([tool.importlinter]); CI also runs ``lint-imports``."""
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:]


def _packages_on_disk() -> set[str]:
    found = set()
    roots = {"sofa_top": "sofa_top", "collectors": "sofa_top.collectors"}
    roots |= {"optimizers": "sofa_top.optimizers", "tui": "sofa_top.tui"}
    for folder, name in roots.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            if any(
                p.is_symlink() for p in [init.parent, *init.parent.parents] if REPO in p.parents
            ):
                continue
            found.add(".".join([name, *rel.parts]))
    return found


def test_every_package_reaches_a_regular_install() -> None:
    """pyproject.toml lists the packages one by one (the root folders are mapped into
    ``sofa_top``): a subpackage missing there works in the editable checkout and is absent from
    the wheel."""
    import tomllib

    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    assert _packages_on_disk() - listed == set()
