"""Why a recording stopped early: the session's own account and sofa-top's dead threads."""

from __future__ import annotations

import threading

from sofa_top.recording.hub import Session

# Uncaught exceptions of sofa-top's own background threads, one line each.
THREAD_FAILURES: list[str] = []


def on_thread_failure(failure: threading.ExceptHookArgs) -> None:
    """``threading.excepthook``: keep a background thread's death as one line for the end of
    the command, rather than a traceback in the middle of the output (or of the dashboard)."""
    name = failure.thread.name if failure.thread is not None else "a thread"
    THREAD_FAILURES.append(f"{name} failed: {failure.exc_type.__name__}: {failure.exc_value}")


def failed(session: Session) -> bool:
    """Whether sofa-top itself failed while recording ``session``."""
    return bool(THREAD_FAILURES or session.failure)


def thread_failures(session: Session | None = None) -> str:
    """Why recording stopped early: the session's own account first, then dead threads."""
    whys = [session.failure] if session is not None and session.failure else []
    whys += THREAD_FAILURES
    return "; ".join(whys) or "the session ended unexpectedly"
