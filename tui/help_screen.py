"""The ``?`` screen: key bindings and what each pane shows."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

PANES: tuple[tuple[str, str], ...] = (
    (
        "verdict",
        "Why the workload is slow, judged over the last ~10 s: input-bound (red, amber when "
        "moderate), compute-bound (green), python-overhead, idle, unknown (grey). Below it the "
        "numbers behind it (input wait per step, bottleneck stage, CPU saturation = share of "
        "all cores, GPU utilisation, steps/s) and the code change to try first.",
    ),
    (
        "header",
        "Target pid and command line, elapsed time, ● REC while the session is being "
        "recorded (or 'paused view'), and the session file the recording goes to.",
    ),
    (
        "timelines",
        "The last 30 s / 60 s / 5 min / 15 min (z): CPU of the whole process tree "
        "(100% = one core), one bar per core, resident memory, disk read/write rate, "
        "and per GPU utilisation, memory and power.",
    ),
    (
        "processes",
        "The target and its children (e.g. DataLoader workers): CPU, RSS, threads, "
        "state (narrow terminals: R running, S sleeping, D disk wait, Z zombie). "
        "Exited processes are struck through and marked ✗.",
    ),
    (
        "hot functions",
        "Sampled Python stacks of the last few seconds: own % = innermost frame, "
        "total % = anywhere on the stack. Pick a thread above the table; the bar shows "
        "how sampled time splits into input pipeline / compute / Python / idle.",
    ),
    (
        "2 steps",
        "Launch mode: one bar per step (training, evaluation or inference: a model call "
        "marks the steps of a loop no fetch does), newest at the right, the input wait "
        "(yellow) under the compute (green); steps/s, samples/s, median and p90/p99 step "
        "time; per phase its steps, input wait and median; the compute split into forward, "
        "backward, optimizer and collectives. Below: the "
        "tf.data / DataLoader stages (parallelism, buffer, time per element, ◀ bottleneck) "
        "and which hooks the in-process agent applied or skipped, and why.",
    ),
    (
        "3 log",
        "Launch mode: the workload's stdout and stderr (stderr in red), the last 1000 lines; "
        "lines dropped by flood protection are counted at the top.",
    ),
    (
        "replay",
        "sofa-top replay: ◆ REPLAY in the header and the cursor time; ←/→ move it 1 s "
        "(shift: 10 s), [ and ] jump between verdict changes; every pane shows the recording "
        "at the cursor.",
    ),
)


def help_text(bindings: Iterable[tuple[str, str]]) -> Table:
    """The help content: a keys table followed by pane descriptions."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row(Text("keys", style="bold underline"), "")
    for key, description in bindings:
        table.add_row(key, description)
    table.add_row("ctrl+p", "command palette (pause, zoom, sort, help, quit)")
    table.add_row("", "")
    table.add_row(Text("panes", style="bold underline"), "")
    for name, description in PANES:
        table.add_row(name, description)
    table.add_row("", "")
    table.add_row("", Text("esc, ? or q closes this screen", style="italic grey62"))
    return table


class HelpScreen(ModalScreen[None]):
    """Lists the bindings and explains the panes."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def __init__(self, bindings: Iterable[tuple[str, str]]) -> None:
        super().__init__()
        self._key_help = tuple(bindings)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_text(self._key_help), id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help-box").border_title = "sofa-top help"
