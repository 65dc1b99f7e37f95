"""A command line as people name what they ran: the script and its arguments
(``train.py --epochs 3``), not the interpreter that runs it (``python``)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

# python, python3, python3.11, python3.13t, pypy3 (the interpreter: not what the user ran)
_INTERPRETER = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?t?$")
# interpreter options that take the next argument as their value
_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def command_text(cmdline: Sequence[str], fallback: str = "") -> str:
    """The script and its arguments, on one line: ``python -u /x/train.py --epochs 3`` ->
    ``train.py --epochs 3``; ``python -m torch.distributed.run ...`` -> ``-m
    torch.distributed.run ...``; ``python -c CODE`` -> ``-c CODE``; any other program keeps
    its own name (``sh -c ...`` -> ``sh -c ...``). ``fallback`` when there is no command line."""
    args = list(cmdline)
    if not args:
        return fallback
    prog = os.path.basename(args[0])
    if not _INTERPRETER.match(prog):
        return _one_line([prog, *args[1:]])
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("-m", "-c"):
            return _one_line(args[i:])
        if a == "-" or not a.startswith("-"):
            return _one_line([os.path.basename(a), *args[i + 1 :]])
        i += 2 if a in _WITH_VALUE else 1
    return prog  # the interpreter alone (a REPL)


def _one_line(args: Sequence[str]) -> str:
    # ``-c`` code spans lines: every run of whitespace becomes one space
    return " ".join(" ".join(args).split())
