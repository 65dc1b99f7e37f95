"""Reading a ``Literal`` kind back from untyped data (agent frames, session files)."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K", bound=str)


def one_of(value: object, kinds: tuple[K, ...]) -> K | None:
    """``value`` as one of ``kinds``, or None when it is none of them."""
    for kind in kinds:
        if value == kind:
            return kind
    return None
