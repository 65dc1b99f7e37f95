"""Human-readable numbers and strings for the dashboard (pure functions, no Textual)."""

from __future__ import annotations

from sofa_top.recording.series import BYTES

_BYTE_UNITS = (BYTES, "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: float | None) -> str:
    """Format a byte count with binary units: ``1536`` -> ``"1.5 KiB"``; None -> ``"-"``."""
    if n is None:
        return "-"
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _BYTE_UNITS:
        if value < 1024 or unit == _BYTE_UNITS[-1]:
            if unit == BYTES:
                return f"{sign}{value:.0f} B"
            # Three significant digits keep the column width stable as values grow.
            digits = 0 if value >= 100 else 1
            return f"{sign}{value:.{digits}f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_rate(bytes_per_s: float | None) -> str:
    """Format a byte rate: ``2_500_000`` -> ``"2.4 MiB/s"``."""
    if bytes_per_s is None:
        return "-"
    return f"{human_bytes(bytes_per_s)}/s"


def human_duration(seconds: float) -> str:
    """Format an elapsed time as ``M:SS`` or ``H:MM:SS`` (negative clamps to zero)."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def window_label(seconds: int) -> str:
    """Name a zoom window: ``30`` -> ``"30 s"``, ``300`` -> ``"5 min"``."""
    if seconds < 60:
        return f"{seconds} s"
    if seconds % 60 == 0 and seconds < 3600:
        minutes = seconds // 60
        return "60 s" if minutes == 1 else f"{minutes} min"
    return human_duration(seconds)


def percent(value: float | None, digits: int = 0) -> str:
    """Format a percentage; None -> ``"-"``."""
    if value is None:
        return "-"
    return f"{value:.{digits}f}%"


def truncate(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` cells, marking the cut with an ellipsis at the end."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return "…"
    return text[: width - 1] + "…"


def truncate_left(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` cells keeping its end (paths: the file name matters most)."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return "…"
    return "…" + text[len(text) - width + 1 :]


def cmdline_text(cmdline: tuple[str, ...], fallback: str = "") -> str:
    """Join a command line for one display line (the name when the command line is unknown).

    Newlines and tabs (``python -c "..."`` scripts) would break the header apart, so every
    run of whitespace becomes one space.
    """
    return " ".join(" ".join(cmdline).split()) if cmdline else fallback


def human_bytes_short(n: float | None) -> str:
    """Compact byte count for narrow columns: ``1288490188`` -> ``"1.2G"``."""
    text = human_bytes(n)
    if text == "-":
        return text
    number, _, unit = text.partition(" ")
    return number + unit[0] if unit != BYTES else number + BYTES
