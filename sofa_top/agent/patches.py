"""What the agent changed in the workload, so that detaching can undo it (stdlib only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MISSING = object()


class Patches:
    """Every change the agent makes to the workload's objects, with what was there before.

    Hooks patch only through ``set`` (and register other undo steps with ``on_detach``), so that
    detaching (attach mode) can put every function back exactly as it was: an attribute the
    object had of its own is set back, one it inherited is deleted again.
    """

    def __init__(self) -> None:
        self._undo: list[tuple[str, Callable[[], None]]] = []

    def set(self, obj: Any, name: str, value: Any) -> None:
        """``setattr(obj, name, value)``, remembering the original."""
        try:
            own = vars(obj)
        except TypeError:  # no __dict__ (slots): whatever getattr sees is the original
            own = None
        # own: the raw descriptor (not a bound method); no __dict__: whatever getattr sees
        old = getattr(obj, name, _MISSING) if own is None else own.get(name, _MISSING)
        setattr(obj, name, value)

        def undo() -> None:
            current = vars(obj).get(name) if own is not None else getattr(obj, name, None)
            if current is not value:
                return  # someone patched over us: theirs stays, and so does ours below it
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)

        self._undo.append((f"{getattr(obj, '__qualname__', type(obj).__name__)}.{name}", undo))

    def on_detach(self, what: str, undo: Callable[[], None]) -> None:
        """Run ``undo`` at detach (e.g. remove a framework hook handle)."""
        self._undo.append((what, undo))

    def __len__(self) -> int:
        return len(self._undo)

    def restore(self) -> list[str]:
        """Undo everything, newest first; returns what could not be undone (and why)."""
        problems: list[str] = []
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except Exception as e:
                problems.append(f"{what}: {e!r}")
        return problems
