"""Materialise the corpus: the pinned upstream files, with the manifest's edits applied.

    python benchmarks/corpus/prepare.py [--mirror DIR] [--only ID ...] [--out DIR]

For each script of ``manifest.toml`` it takes each file at the pinned commit, from a local
bare mirror (``DIR/<owner>+<name>/repo``, or ``DIR/<owner>+<name>``, or ``DIR/<name>.git``)
or else by ``git fetch --depth 1`` of that commit into ``<out>/.git-cache/`` (network), and
writes two copies under ``benchmarks/corpus/src/<id>/`` (git-ignored: upstream code is never
committed here):

- ``plain/``: the upstream files with ``edit`` applied (CPU, no downloads, short);
- ``probe/``: ``plain`` plus the ``probe`` edits, which add the script's own input-wait
  measure (``corpus_probe``, in ``shims/``), printed as ``SELF_INPUT_FRACTION``.

Notebooks (``.ipynb``) are cut to the manifest's ``cells`` (by cell id), keras-io style
``.py`` guides to its ``chunks`` (the code between the guide's top-level docstrings, counted
from 0). An edit whose ``find`` is not in its file (upstream changed) stops with one line.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.toml"


class PrepareError(Exception):
    """One line for the user: what failed and where."""


def load_manifest(path: Path = MANIFEST) -> list[dict[str, Any]]:
    with path.open("rb") as f:
        data = tomllib.load(f)
    scripts: list[dict[str, Any]] = data["script"]
    return scripts


def _owner_name(url: str) -> tuple[str, str]:
    m = re.search(r"github\.com[/:]([^/]+)/([^/.]+)", url)
    if not m:
        raise PrepareError(f"cannot read owner/name from repo URL {url!r}")
    return m.group(1), m.group(2)


def _git(*args: str, git_dir: Path | None = None) -> bytes:
    cmd = ["git"] + ([f"--git-dir={git_dir}"] if git_dir else []) + list(args)
    res = subprocess.run(cmd, capture_output=True)
    if res.returncode != 0:
        err = res.stderr.decode(errors="replace").strip().splitlines()
        raise PrepareError(f"git {' '.join(args)}: {err[-1] if err else 'failed'}")
    return res.stdout


def _mirror_dir(mirror: Path, owner: str, name: str) -> Path | None:
    for cand in (
        mirror / f"{owner}+{name}" / "repo",
        mirror / f"{owner}+{name}",
        mirror / f"{name}.git",
    ):
        if (cand / "objects").is_dir() or (cand / "HEAD").is_file():
            return cand
    return None


def _has_commit(git_dir: Path, commit: str) -> bool:
    res = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
    )
    return res.returncode == 0


def _fetch_commit(cache: Path, url: str, commit: str) -> Path:
    owner, name = _owner_name(url)
    git_dir = cache / f"{owner}+{name}.git"
    if not git_dir.exists():
        git_dir.parent.mkdir(parents=True, exist_ok=True)
        _git("init", "--bare", "-q", str(git_dir))
    if not _has_commit(git_dir, commit):
        _git("fetch", "-q", "--depth", "1", url, commit, git_dir=git_dir)
    return git_dir


def source_dir(script: dict[str, Any], mirror: Path | None, cache: Path) -> Path:
    """A git dir that holds the script's pinned commit."""
    owner, name = _owner_name(script["repo"])
    commit = script["commit"]
    if mirror is not None:
        d = _mirror_dir(mirror, owner, name)
        if d is not None and _has_commit(d, commit):
            return d
    return _fetch_commit(cache, script["repo"], commit)


def _cells(text: str, ids: list[str], where: str) -> str:
    nb = json.loads(text)
    by_id: dict[str, str] = {}
    for c in nb["cells"]:
        cid = c.get("metadata", {}).get("id") or c.get("id")
        if c.get("cell_type") == "code" and cid:
            src = c["source"]
            by_id[cid] = "".join(src) if isinstance(src, list) else src
    out = []
    for cid in ids:
        if cid not in by_id:
            raise PrepareError(f"{where}: code cell {cid!r} not found (upstream changed?)")
        out.append(f"# --- cell {cid}\n{by_id[cid].rstrip()}\n")
    return "\n".join(out)


def guide_chunks(text: str) -> list[str]:
    """The code chunks of a keras-io style guide: text between top-level docstrings."""
    chunks: list[str] = []
    cur: list[str] = []
    in_doc = False
    for line in text.splitlines(keepends=True):
        if line.startswith('"""'):
            closes_same_line = line.strip() != '"""' and line.rstrip().endswith('"""')
            if not in_doc:
                if "".join(cur).strip():
                    chunks.append("".join(cur))
                cur = []
                in_doc = not closes_same_line
            else:
                in_doc = False
            continue
        if not in_doc:
            cur.append(line)
        elif line.rstrip().endswith('"""'):
            in_doc = False
    if "".join(cur).strip():
        chunks.append("".join(cur))
    return chunks


def _chunks(text: str, idx: list[int], where: str) -> str:
    chunks = guide_chunks(text)
    out = []
    for i in idx:
        if i >= len(chunks):
            raise PrepareError(f"{where}: code chunk {i} not found (the guide has {len(chunks)})")
        out.append(f"# --- chunk {i}\n{chunks[i].strip()}\n")
    return "\n".join(out)


def apply_edits(text: str, edits: list[dict[str, Any]], where: str) -> str:
    for e in edits:
        find, repl = e["find"], e["replace"]
        count = int(e.get("count", 1))
        have = text.count(find)
        if have == 0 or (count > 0 and have < count):
            raise PrepareError(
                f"{where}: edit find {find!r} not found"
                + (f" {count} times (found {have})" if have else "")
                + " (upstream changed?)"
            )
        text = text.replace(find, repl, count if count > 0 else -1)
    return text


def _files(script: dict[str, Any]) -> list[str]:
    return [script["path"], *script.get("extra", [])]


def _target(script: dict[str, Any], path: str) -> str:
    if path == script["path"] and script.get("as"):
        return str(Path(path).parent / script["as"])
    return path


def script_file(script: dict[str, Any]) -> str:
    """The runnable file, relative to a variant's root."""
    return _target(script, script["path"])


def materialise(script: dict[str, Any], git_dir: Path, out: Path) -> dict[str, Path]:
    sid, commit = script["id"], script["commit"]
    texts: dict[str, str] = {}
    for path in _files(script):
        where = f"{sid}: {path}@{commit[:10]}"
        try:
            raw = _git("show", f"{commit}:{path}", git_dir=git_dir).decode()
        except PrepareError as e:
            raise PrepareError(f"{where}: not in the pinned commit ({e})") from None
        if path == script["path"] and "cells" in script:
            raw = _cells(raw, script["cells"], where)
        elif path == script["path"] and "chunks" in script:
            raw = _chunks(raw, script["chunks"], where)
        texts[path] = raw
    roots: dict[str, Path] = {}
    for variant, lists in (("plain", ("edit",)), ("probe", ("edit", "probe"))):
        root = out / sid / variant
        if root.exists():
            shutil.rmtree(root)
        for path, raw in texts.items():
            text = raw
            for key in lists:
                edits = [e for e in script.get(key, []) if e.get("file", script["path"]) == path]
                text = apply_edits(text, edits, f"{sid} ({variant}): {path}@{commit[:10]}")
            dest = root / _target(script, path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
        roots[variant] = root
    return roots


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirror", type=Path, help="folder of bare mirrors (<owner>+<name>/repo)")
    ap.add_argument("--only", action="append", help="script id (repeatable)")
    ap.add_argument("--out", type=Path, default=HERE / "src")
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    args = ap.parse_args(argv)
    try:
        scripts = load_manifest(args.manifest)
    except (OSError, tomllib.TOMLDecodeError, KeyError) as e:
        print(f"prepare: cannot read manifest {args.manifest}: {e}", file=sys.stderr)
        return 2
    if args.only:
        unknown = set(args.only) - {s["id"] for s in scripts}
        if unknown:
            print(f"prepare: unknown script id(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        scripts = [s for s in scripts if s["id"] in args.only]
    try:
        for s in scripts:
            git_dir = source_dir(s, args.mirror, args.out / ".git-cache")
            roots = materialise(s, git_dir, args.out)
            print(f"{s['id']}: {roots['plain']}  {roots['probe']}")
    except PrepareError as e:
        print(f"prepare: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
