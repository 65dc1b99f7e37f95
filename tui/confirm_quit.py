"""The launch-mode quit question: quitting stops a workload sofa-top started, so ask first."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

QUESTION = "The workload is still running. Stop it and quit?"


class ConfirmQuitScreen(ModalScreen[bool]):
    """Dismisses with True (stop the workload and quit) or False (keep going)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Stop & quit"),
        Binding("n", "answer(False)", "Cancel"),
        Binding("escape", "answer(False)", "Cancel", show=False),
    ]

    def __init__(self, target: str = "") -> None:
        super().__init__()
        self.target = target

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(QUESTION, id="confirm-question")
            if self.target:
                yield Static(self.target, id="confirm-target")
            with Horizontal(id="confirm-buttons"):
                # Content, not str: "[y]" would be read as markup and vanish.
                yield Button(Content("[y] stop & quit"), variant="error", id="confirm-yes")
                yield Button(Content("[n] cancel"), variant="primary", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-box").border_title = "quit sofa-top"
        # Enter on the default button must be the harmless answer.
        self.query_one("#confirm-no", Button).focus()

    def action_answer(self, stop: bool) -> None:
        """Close with the answer."""
        self.dismiss(stop)

    @on(Button.Pressed, "#confirm-yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#confirm-no")
    def _no(self) -> None:
        self.dismiss(False)
