"""Which of a loop's lines work on its model's output, by data flow over its sampled lines.

The host split (``analysis.host``) calls a line ``input`` when it is on the input path: what
the loop feeds the model next, from outside the model. A generation loop feeds the model its
own output (``logits = model(idx)``, ``probs = softmax(logits[:, -1])``, ``tok =
multinomial(probs)``, ``idx = torch.cat((idx, tok))``): those lines consume the model's
output, whatever op they call. What the stacks give are the loop function's lines: the model
call's (its samples inside the call) and the host lines sampled between calls. From them:

- the loop's body is read as the lines from the first to the last of those (in each file);
- the names a model call's line assigns are the model's output (``out, hidden = model(x, h)``);
- a line whose right-hand side reads an output name assigns output names too (to a fixpoint);
  a sampled line that reads one (``inp.fill_(tok)``, ``out.append``) consumes the output;
- a read sees the last assignment of its name above it in the body, else (the loop going
  round) those below it: ``x = load(path)`` then ``x = x / 255`` then ``x = model(x)`` reads
  the file, not the model, on the second line.

A line that cannot be parsed alone (a line of a statement split over several) reads nothing.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from sofa_top.analysis.sources import ABSOLUTE_ONLY, Lines


@dataclass(frozen=True, slots=True)
class LineFlow:
    """The names one source line assigns and reads (dotted for attributes: ``self.out``)."""

    targets: frozenset[str]
    reads: frozenset[str]
    assigns: bool  # an assignment (its targets take what it reads)


_NOTHING = LineFlow(frozenset(), frozenset(), False)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _reads(node: ast.AST | None) -> set[str]:
    out: set[str] = set()
    if node is None:
        return out
    for n in ast.walk(node):
        if isinstance(n, (ast.Name, ast.Attribute)):
            name = _dotted(n)
            if name is not None:
                out.add(name)
    return out


def _targets(node: ast.expr) -> tuple[set[str], set[str]]:
    """(names bound, names read) of an assignment target: ``a[i] = v`` binds ``a``, reads
    ``i``; ``a, b = v`` binds both."""
    if isinstance(node, (ast.Tuple, ast.List)):
        bound: set[str] = set()
        read: set[str] = set()
        for elt in node.elts:
            b, r = _targets(elt.value if isinstance(elt, ast.Starred) else elt)
            bound |= b
            read |= r
        return bound, read
    if isinstance(node, ast.Subscript):
        base = _dotted(node.value)
        return ({base} if base else set()), _reads(node.slice) | ({base} if base else set())
    name = _dotted(node)
    return ({name} if name else set()), set()


@functools.lru_cache(maxsize=1 << 12)
def line_flow(text: str) -> LineFlow:
    """What the line ``text`` assigns and reads; nothing when it does not parse alone."""
    src = text.strip()
    if not src or src.startswith("#"):
        return _NOTHING
    tree = None
    for candidate in (src, src + " pass"):  # a compound statement's header: `for x in y:`
        try:
            tree = ast.parse(candidate)
            break
        except (SyntaxError, ValueError):
            continue
    if tree is None or not tree.body:
        return _NOTHING
    stmt = tree.body[0]
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        bound: set[str] = set()
        read = _reads(stmt.value)
        for t in targets:
            b, r = _targets(t)
            bound |= b
            read |= r
        if isinstance(stmt, ast.AugAssign):
            read |= bound
        return LineFlow(frozenset(bound), frozenset(read), True)
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        bound, _ = _targets(stmt.target)
        return LineFlow(frozenset(bound), frozenset(_reads(stmt.iter)), True)
    if isinstance(stmt, (ast.While, ast.If)):
        return LineFlow(frozenset(), frozenset(_reads(stmt.test)), False)
    if isinstance(stmt, (ast.Expr, ast.Return)):
        return LineFlow(frozenset(), frozenset(_reads(stmt.value)), False)
    return _NOTHING


_SPAN = 300  # the most lines read of one loop's file (its body, between its sampled lines)


def _prefixes(name: str) -> list[str]:
    """``out.logits.max`` -> ``out``, ``out.logits``, ``out.logits.max``: a read of an
    attribute reads the object too."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


class _Body:
    """The lines of one loop's body in one file, ``lo`` to ``hi``, and the flow between them:
    a read at line ``p`` sees the last assignment before ``p`` in the body, else (the loop
    goes round) those after it."""

    def __init__(self, flows: dict[int, LineFlow], calls: set[int]) -> None:
        self.flows = flows
        self.defs: dict[str, list[int]] = {}
        for n in sorted(flows):
            for t in flows[n].targets if flows[n].assigns else ():
                self.defs.setdefault(t, []).append(n)
        # the model calls' assignments are the model's output; then whatever reads it
        self.tainted = {(t, n) for n in calls for t in flows[n].targets}
        changed = True
        while changed:
            changed = False
            for n, f in flows.items():
                if n in calls or not f.assigns:
                    continue
                new = {(t, n) for t in f.targets} - self.tainted
                if new and self.reads_output(n):
                    self.tainted |= new
                    changed = True

    def _reaching(self, name: str, at: int) -> list[int]:
        lines = self.defs.get(name, [])
        before = [d for d in lines if d < at]
        return before[-1:] if before else [d for d in lines if d >= at]

    def reads_output(self, at: int) -> bool:
        """Whether line ``at`` reads a value the model returned (or one made from it)."""
        for r in self.flows[at].reads:
            for name in _prefixes(r):
                if any((name, d) in self.tainted for d in self._reaching(name, at)):
                    return True
        return False


def output_lines(
    calls: Iterable[tuple[str, int]],
    host: Iterable[tuple[str, int]],
    lines: Lines = ABSOLUTE_ONLY,
) -> frozenset[tuple[str, int]]:
    """The ``host`` lines ((file, line) of the loops' functions, sampled between their model
    calls) that work on the model's output, given the model calls' lines ``calls``: the
    lines between them are read as the loop's body."""
    calls, host = set(calls), set(host)
    out: set[tuple[str, int]] = set()
    for filename in {f for f, _ in calls}:
        mine = {n for f, n in calls if f == filename}
        seen = mine | {n for f, n in host if f == filename}
        lo, hi = min(seen), max(seen)
        if hi - lo > _SPAN:
            continue  # not one loop's body: no flow read
        flows = {n: line_flow(lines.line(filename, n)) for n in range(lo, hi + 1)}
        body = _Body(flows, mine)
        out |= {(filename, n) for n in seen - mine if body.reads_output(n)}
    return frozenset(out)
