"""sofa-top's exit status: the workload's when it failed, 128 + N for a signal (the shell's
convention), 130 for Ctrl-C. The table of docs/exit-status.md is the contract."""

from __future__ import annotations

import signal

RECORDING_FAILED = 1  # sofa-top itself failed (a full disk, a dead collector)
# the session's end passed its bound (``launch.FINISH_BOUND_S``): sofa-top failed to finalize it
SESSION_CUT = RECORDING_FAILED
COMPARE_FAILED = 1  # compare: the baseline failed, or every configuration did


def workload_status(code: int | None) -> int:
    """The workload's exit code (``Popen.returncode``: negative for a signal) as a shell
    reports it: 128 + N for death by signal N; 0 when it is not known."""
    if code is None:
        return 0
    return 128 - code if code < 0 else code


def signal_status(name: str) -> int | None:
    """128 + N for a stop reason that names signal N (``"SIGINT"`` -> 130), else None."""
    try:
        return 128 + int(signal.Signals[name])
    except KeyError:
        return None
