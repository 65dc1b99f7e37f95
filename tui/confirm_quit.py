"""The launch-mode quit question: quitting stops a workload sofa-top started, so ask first:
stop it, leave it running (detach), or go back."""

from __future__ import annotations

from typing import Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

QUESTION = "The workload is still running. Stop it and quit?"
QuitChoice = Literal["stop", "detach", "cancel"]


class ConfirmQuitScreen(ModalScreen[QuitChoice]):
    """Dismisses with ``stop`` (stop the workload: SIGINT, then SIGTERM, then SIGKILL; and
    quit), ``detach`` (quit, leave it running) or ``cancel`` (keep going)."""

    BINDINGS = [
        Binding("y", "answer('stop')", "Stop & quit"),
        Binding("d", "answer('detach')", "Detach"),
        Binding("n", "answer('cancel')", "Cancel"),
        Binding("escape", "answer('cancel')", "Cancel", show=False),
    ]

    def __init__(self, target: str = "", *, can_detach: bool = True) -> None:
        super().__init__()
        self.target = target
        self.can_detach = can_detach

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="-detach" if self.can_detach else ""):
            yield Static(QUESTION, id="confirm-question")
            if self.target:
                yield Static(self.target, id="confirm-target")
            with Horizontal(id="confirm-buttons"):
                # Content, not str: "[y]" would be read as markup and vanish.
                yield Button(Content("[y] stop & quit"), variant="error", id="confirm-yes")
                if self.can_detach:
                    detach = Content("[d] detach: leave it running")
                    yield Button(detach, variant="warning", id="confirm-detach")
                yield Button(Content("[n] cancel"), variant="primary", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-box").border_title = "quit sofa-top"
        # Enter on the default button must be the harmless answer.
        self.query_one("#confirm-no", Button).focus()

    def action_answer(self, choice: QuitChoice) -> None:
        """Close with the answer."""
        if choice == "detach" and not self.can_detach:
            return
        self.dismiss(choice)

    @on(Button.Pressed, "#confirm-yes")
    def _yes(self) -> None:
        self.dismiss("stop")

    @on(Button.Pressed, "#confirm-detach")
    def _detach_pressed(self) -> None:
        self.dismiss("detach")

    @on(Button.Pressed, "#confirm-no")
    def _no(self) -> None:
        self.dismiss("cancel")
