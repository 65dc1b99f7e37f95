"""The workload's own source lines, for what a native call on them does (stdlib).

py-spy shows no frame for a native call (``torch.multinomial``, ``.cpu()``): the sample's
innermost frame is the user's line that made it, so the line's text says what it was
(``analysis.host``, ``classify``). The files are the workload's, on this machine.
"""

from __future__ import annotations

import functools
import linecache
import os
import re
from collections.abc import Sequence

# a line that works on the model's output: samples or picks from it, decodes it
OUTPUT_LINE = re.compile(
    r"\b(multinomial|argmax|argmin|topk|top_k|argsort|softmax|log_softmax|batch_decode)\("
)

# a line that waits for the device or copies a tensor out: the loop syncs with the model
SYNC_LINE = re.compile(r"\.(item|cpu|numpy|tolist)\(\s*\)|\.to\(\s*['\"]cpu['\"]|synchronize\(")

# Where the workload's own files are: py-spy names a file relative to the workload's
# ``sys.path`` (a script as ``train.py``: its folder is ``sys.path[0]``), not to sofa-top's
_SOURCE_DIRS: list[str] = []


def add_source_dirs(cmdline: Sequence[str], cwd: str | None = None) -> None:
    """Look for the workload's files (``cmdline``, started in ``cwd``: sofa-top's own by
    default) in its script's folder and its working directory."""
    base = cwd or os.getcwd()
    script = next((a for a in cmdline[1:] if a.endswith(".py")), None)
    dirs = [os.path.dirname(os.path.join(base, script))] if script else []
    new = [d for d in dict.fromkeys((*dirs, base)) if d not in _SOURCE_DIRS]
    if new:
        _SOURCE_DIRS.extend(new)
        source_line.cache_clear()


@functools.lru_cache(maxsize=1 << 14)
def source_line(filename: str, line: int) -> str:
    """The text of ``line`` of the workload's ``filename`` ("" when it cannot be read)."""
    try:
        text = linecache.getline(filename, line)
        if text or os.path.isabs(filename) or filename.startswith("<"):
            return text
        for d in _SOURCE_DIRS:
            text = linecache.getline(os.path.join(d, filename), line)
            if text:
                return text
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    return ""
