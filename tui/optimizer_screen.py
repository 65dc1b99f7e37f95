"""The ``o`` screen: re-run the launched command under optimizer toggles and compare throughput.

On an attached session it re-runs a *copy* of the running job (its command line, working
directory and environment, read from /proc), after a confirmation that says so: the copy
shares the machine with the job and may write where it writes; the job itself is not touched.

The comparison itself is ``sofa_top.optimizers.compare.run_compare`` (every run is a real
session file); it runs in a thread worker and reports typed progress events, which this screen
turns into a progress bar and a table that fills in as the runs finish. The final
``CompareResult`` then replaces the live rows, highlights the best configuration and lists the
code changes that reproduce it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.validation import Number
from textual.widgets import Button, Checkbox, Footer, Input, Label, ProgressBar, Static

from sofa_top.agent.toggles import EXCLUSIVE_NOTE, OptimizeSpec, excluded, rows, toggle_of
from sofa_top.analysis.framework import snapshot_framework
from sofa_top.collectors.discovery import JobCopy, job_copy
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.snapshot import Snapshot, TargetInfo
from sofa_top.datamodel.source import MeasuredSink, SnapshotSource, measured_sink, target_of
from sofa_top.datamodel.verdict import Measured, Verdict
from sofa_top.datamodel.workload import ModelReport
from sofa_top.optimizers.advice import toggles_off
from sofa_top.optimizers.compare import (
    CompareEvent,
    CompareResult,
    ConfigResult,
    OnProgress,
    RunFinished,
    RunStarted,
    SearchLevelStarted,
    plan,
    run_compare,
)
from sofa_top.optimizers.compare.record import note_measured
from sofa_top.optimizers.compare.text import diagnosis_lines, progress_line, ranking_line
from sofa_top.optimizers.headroom import headroom_line, headroom_short
from sofa_top.tui.formatting import cmdline_text, truncate

SCREEN_NAME = "sofa-top-optimizer"
ATTACH_MESSAGE = (
    "attached: Re-run & compare runs a copy of this job (its command, directory and "
    "environment; you confirm first); the running job is not touched"
)
NO_COMMAND_MESSAGE = "no command line to re-run: sofa-top launch -- CMD"
DEFAULT_REPEATS = 3
DEFAULT_STEPS = 50
MAX_REPEATS = 20
MAX_STEPS = 100_000


class Runner(Protocol):
    """``run_compare``'s signature, as far as this screen uses it."""

    def __call__(
        self,
        cmd: Sequence[str],
        configs: Sequence[str] = ...,
        repeats: int = ...,
        steps: int | None = ...,
        seconds: float | None = ...,
        warmup_steps: int = ...,
        on_progress: OnProgress | None = ...,
        out_dir: str | Path | None = ...,
        timeout_s: float = ...,
        optimize: Mapping[str, OptimizeSpec] | None = ...,
        *,
        like: JobCopy | None = ...,
    ) -> CompareResult: ...


class ConfirmCopy(ModalScreen[bool]):
    """Says what re-running a copy of a running job means; True when the user goes ahead."""

    CSS = """
    ConfirmCopy { align: center middle; }
    #copy-box { width: 80%; height: auto; padding: 1 2; border: thick $warning; }
    #copy-buttons { height: auto; margin-top: 1; }
    #copy-buttons Button { margin-right: 2; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="copy-box"):
            yield Static(Text(self.text), id="copy-text")
            with Horizontal(id="copy-buttons"):
                yield Button("Re-run a copy", id="copy-yes", variant="warning", compact=True)
                yield Button("Cancel", id="copy-no", compact=True)

    @on(Button.Pressed, "#copy-yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#copy-no")
    def _no(self) -> None:
        self.dismiss(False)

    def action_cancel(self) -> None:
        """Escape: nothing runs."""
        self.dismiss(False)


class CompareProgress(Message):
    """One ``on_progress`` event from the worker thread."""

    def __init__(self, event: CompareEvent) -> None:
        super().__init__()
        self.event = event


class CompareDone(Message):
    """The comparison finished (``result``, and what it measured) or failed (``error``)."""

    def __init__(
        self, result: CompareResult | None, error: str | None = None, m: Sequence[Measured] = ()
    ) -> None:
        super().__init__()
        self.result = result
        self.error = error
        self.measured = tuple(m)


@runtime_checkable
class DashboardLike(Protocol):
    """The dashboard the panel opens over (``tui.app.DashboardApp``, not imported: it opens
    this module lazily)."""

    source: SnapshotSource
    latest: Snapshot | None
    optimizer_runner: Runner | None  # what runs a comparison (tests: a fake), None: compare's
    optimizer_copier: Callable[[int], JobCopy] | None  # how an attached job is copied


@dataclass
class LiveRow:
    """What the progress events told about one configuration so far."""

    rates: list[float] = field(default_factory=list)
    unit: str = ""
    failures: int = 0
    running: bool = False


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _throughput(median: float | None, lo: float | None, hi: float | None, unit: str) -> str:
    if median is None:
        return "-"
    return f"{median:.1f} ({lo:.1f}-{hi:.1f}) {unit}".rstrip()


def _notes(r: ConfigResult) -> tuple[str, str]:
    applied = ", ".join(r.applied) or "-"
    if r.not_applied:
        applied += "; not: " + "; ".join(f"{t}: {why}" for t, why in r.not_applied)
    flags: list[str] = list(r.flags)
    if r.effect == "unclear":
        flags.append("unclear")
    return applied, ", ".join(flags) or "-"


def results_table(
    configs: Sequence[str],
    live: dict[str, LiveRow],
    result: CompareResult | None,
) -> Table:
    """The comparison table: live rows from the progress lines, final rows from ``result``."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    t.add_column("config", no_wrap=True)
    t.add_column("throughput median (min-max)", no_wrap=True, max_width=30)
    t.add_column("speedup", justify="right", no_wrap=True)
    t.add_column("headroom", no_wrap=True)
    t.add_column("verdict", min_width=11)
    # compile time only where some run compiled: the table is tight at 100 columns
    compiled = result is None or any(r.compile_s is not None for r in result.runs)
    if compiled:
        t.add_column("compile", justify="right", no_wrap=True)
    t.add_column("applied", min_width=8)
    t.add_column("flags", min_width=5)
    if result is not None:
        for r in result.runs:
            tp = r.throughput
            best = r.config == result.best
            sp = "-" if r.speedup is None else f"{r.speedup:.2f}x"
            applied, flags = _notes(r)
            compile_ = ["-" if r.compile_s is None else f"{r.compile_s:.1f}s"] if compiled else []
            t.add_row(
                f"★ {r.config}" if best else f"  {r.config}",
                _throughput(tp.median, tp.min, tp.max, tp.unit),
                sp,
                headroom_short(r.headroom),
                r.verdict or "-",
                *compile_,
                applied,
                Text(flags, style="yellow" if r.flags else ""),
                style="bold black on green" if best else None,
            )
        return t
    base = live.get("baseline")
    base_med = statistics.median(base.rates) if base and base.rates else None
    for c in configs:
        row = live.get(c, LiveRow())
        med = statistics.median(row.rates) if row.rates else None
        lo = min(row.rates) if row.rates else None
        hi = max(row.rates) if row.rates else None
        sp = "-" if med is None or not base_med else f"{med / base_med:.2f}x"
        state = "running…" if row.running else ("pending" if not row.rates else "…")
        flags = f"{row.failures} failed" if row.failures else "-"
        t.add_row(
            f"  {c}", _throughput(med, lo, hi, row.unit) if med is not None else state, sp,
            "…", "…", "…", "…", Text(flags, style="red" if row.failures else ""),
        )  # fmt: skip
    return t


def winner_text(result: CompareResult) -> RenderableType:
    """The best configuration, the code changes that reproduce it and its session files."""
    parts: list[RenderableType] = [Text(line) for line in diagnosis_lines(result)]
    if result.stopped is not None:
        parts.append(Text(f"stopped: {result.stopped}", style="bold red"))
    elif result.best is None:
        note = result.best_note or "no configuration produced a usable throughput"
        parts.append(Text(f"best: none: {note}", style="bold"))
    elif result.best == "baseline":
        parts.append(Text("best: baseline: no optimizer toggle was faster", style="bold"))
    else:
        best_run = next(r for r in result.runs if r.config == result.best)
        parts.append(
            Text(
                f"best: {result.best}: {headroom_line(best_run.speedup, best_run.headroom)}",
                style="bold",
            )
        )
        parts.append(Text("code changes that reproduce it:"))
        if not result.changes:
            parts.append(Text("  (no code change identified: see the applied column)"))
        for c in result.changes:
            parts.append(Text(f"  - {c}"))
    if (ranked := ranking_line(result)) is not None:
        parts.append(Text(ranked, style="yellow"))
    best = next((r for r in result.runs if r.config == result.best), None)
    if best is not None and best.sessions:
        parts.append(Text("sessions:", style="bold"))
        for s in best.sessions:
            parts.append(Text(f"  {s}", style="grey62"))
    for r in result.runs:
        if r.data_change:
            parts.append(Text(f"{r.config}: data changed: {r.data_change}", style="yellow"))
        for a in r.advice:
            parts.append(Text(f"{r.config}: to apply it: {a}"))
        for e in r.errors:
            parts.append(Text(f"{r.config}: {e}", style="red"))
    return Group(*parts)


class OptimizerScreen(Screen[None]):
    """Pick toggles, re-run the launched command under each and compare throughput."""

    CSS = """
    OptimizerScreen { layout: vertical; }
    #opt-title { height: 1; text-style: bold; padding: 0 1; }
    #opt-toggles { height: 1; padding: 0 1; }
    #opt-gpu-toggles { height: 1; padding: 0 1; }
    #opt-toggles Checkbox, #opt-gpu-toggles Checkbox { margin-right: 3; }
    #opt-toggles Checkbox > .toggle--button, #opt-gpu-toggles Checkbox > .toggle--button {
        color: $text-disabled;
    }
    #opt-toggles Checkbox.-on > .toggle--button, #opt-gpu-toggles Checkbox.-on > .toggle--button {
        color: $success; text-style: bold;
    }
    #opt-note { height: auto; padding: 0 1; color: $text-muted; }
    #opt-note.-conflict { color: $warning; text-style: bold; }
    #opt-form { height: 1; padding: 0 1; margin-top: 1; }
    #opt-form Label { margin-right: 1; }
    #opt-form Input { width: 8; margin-right: 2; }
    #opt-form Input.-invalid { color: $error; }
    #opt-status { height: auto; padding: 0 1; }
    #opt-status.-error { color: $error; }
    #opt-progress-row { height: 1; padding: 0 1; }
    #opt-progress-row ProgressBar { width: 40; }
    #opt-current { margin-left: 2; }
    #opt-results { height: 1fr; padding: 0 1; }
    #opt-winner { margin-top: 1; }
    """
    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(
        self,
        target: TargetInfo | None,
        verdict: Verdict | None = None,
        *,
        runner: Runner = run_compare,
        out_dir: str | Path | None = None,
        copier: Callable[[int], JobCopy] = job_copy,
        cuda: bool = False,
        framework: str = "",
        model: ModelReport | None = None,
    ) -> None:
        super().__init__()
        self.target = target
        self.copier = copier
        self.verdict = verdict
        self.cuda = cuda  # the workload uses CUDA: the GPU toggles are offered
        # the checkboxes: the toggle table's rows, the GPU ones where the workload uses CUDA
        self.toggles = rows(gpu=False) + (rows(gpu=True) if cuda else ())
        # why each toggle that cannot help or apply here is off (shown, never pre-ticked)
        recs = verdict.recommendations if verdict else ()
        self.off = toggles_off(
            framework, verdict.kind if verdict else None, model, {r.toggle for r in recs}
        )
        self.runner = runner
        self.out_dir = out_dir
        self.running = False
        self.configs: list[str] = []
        self.live: dict[str, LiveRow] = {}
        self.result: CompareResult | None = None
        self.done_runs = 0
        self.total_runs = 0
        wanted = {r.toggle for r in (verdict.recommendations if verdict else ()) if r.toggle}
        self.preselected = {
            r.key for r in self.toggles if r.key in wanted and r.key not in self.off
        }

    @property
    def can_run(self) -> bool:
        """A comparison re-runs the command (of an attached job: a copy of it)."""
        return self.target is not None and bool(self.target.cmdline)

    @property
    def attached(self) -> bool:
        """The job was not started by sofa-top: a comparison runs a copy of it."""
        return self.target is not None and not self.target.launched

    def compose(self) -> ComposeResult:
        cmd = "-"
        if self.target is not None:
            cmd = cmdline_text(self.target.cmdline, self.target.name)
        yield Static(Text(truncate(f"Optimizer · {cmd}", 200)), id="opt-title")
        with Horizontal(id="opt-toggles"):
            for r in rows(gpu=False):
                yield Checkbox(r.label, r.key in self.preselected, id=f"opt-{r.name}", compact=True)
        if self.cuda:
            with Horizontal(id="opt-gpu-toggles"):
                for r in rows(gpu=True):
                    checked = r.key in self.preselected
                    yield Checkbox(r.label, checked, id=f"opt-{r.name}", compact=True)
        yield Static(EXCLUSIVE_NOTE, id="opt-note")
        with Horizontal(id="opt-form"):
            yield Label("repeats")
            yield Input(
                str(DEFAULT_REPEATS), type="integer", id="opt-repeats", compact=True,
                validators=[Number(minimum=1, maximum=MAX_REPEATS)],
            )  # fmt: skip
            yield Label("steps")
            yield Input(
                str(DEFAULT_STEPS), type="integer", id="opt-steps", compact=True,
                validators=[Number(minimum=1, maximum=MAX_STEPS)],
            )  # fmt: skip
            yield Button(
                "Re-run & compare", id="opt-run", variant="primary", compact=True,
                disabled=not self.can_run,
            )  # fmt: skip
        yield Static(id="opt-status")
        with Horizontal(id="opt-progress-row"):
            yield ProgressBar(total=None, show_eta=False, id="opt-progress")
            yield Static("", id="opt-current")
        with VerticalScroll(id="opt-results"):
            yield Static(id="opt-table")
            yield Static(id="opt-winner")
        yield Footer()

    def on_mount(self) -> None:
        self._update_note()
        if not self.can_run:
            self._status(NO_COMMAND_MESSAGE, error=True)
        elif self.attached:
            self._status(ATTACH_MESSAGE)
        else:
            self._status("tick the toggles to try, then Re-run & compare")
        self.query_one("#opt-progress-row").display = False

    # -- form -----------------------------------------------------------------------------------

    def selected(self) -> list[str]:
        """The ticked toggles by the names people type, in the toggle table's order."""
        return [r.name for r in self.toggles if self.query_one(f"#opt-{r.name}", Checkbox).value]

    @on(Checkbox.Changed)
    def _toggled(self) -> None:
        self._update_note()

    def _update_note(self) -> None:
        chosen = [t for n in self.selected() if (t := toggle_of(n)) is not None]
        conflict = bool(excluded(chosen))
        note = self.query_one("#opt-note", Static)
        text = EXCLUSIVE_NOTE
        if conflict:
            text = "⚠ both ticked: " + EXCLUSIVE_NOTE.replace("a run with both", "the combined run")
        off = [f"{r.name}: {why}" for r in rows(gpu=False) if (why := self.off.get(r.key))]
        if off:
            text += "\noff here: " + "; ".join(off)
        note.update(Text(text))
        note.set_class(conflict, "-conflict")

    def _status(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#opt-status", Static)
        status.update(Text(text))
        status.set_class(error, "-error")

    def _field(self, widget_id: str, name: str) -> int | None:
        field_ = self.query_one(widget_id, Input)
        check = field_.validate(field_.value)
        if check is not None and not check.is_valid:
            why = "; ".join(check.failure_descriptions) or "not a number"
            self._status(f"invalid {name} {field_.value!r}: {why}", error=True)
            field_.focus()
            return None
        try:
            return int(field_.value)
        except ValueError:
            self._status(f"invalid {name} {field_.value!r}: not a whole number", error=True)
            field_.focus()
            return None

    @on(Button.Pressed, "#opt-run")
    def _run_pressed(self) -> None:
        self.start_compare()

    def start_compare(self) -> bool:
        """Validate the form and start the comparison worker (attached: ask first); False when
        nothing started or was asked."""
        if self.running:
            self._status("a comparison is already running")
            return False
        if not self.can_run or self.target is None:
            self._status(NO_COMMAND_MESSAGE, error=True)
            return False
        repeats = self._field("#opt-repeats", "repeats")
        if repeats is None:
            return False
        steps = self._field("#opt-steps", "steps")
        if steps is None:
            return False
        if not self.attached:
            self._begin(list(self.target.cmdline), repeats, steps, None)
            return True
        try:
            copy = self.copier(self.target.pid)
        except UserError as e:
            self._status(f"cannot copy the job: {e}", error=True)
            return False

        def answered(yes: bool | None) -> None:
            if yes:
                self._begin(list(copy.cmd), repeats, steps, copy)
            else:
                self._status("not confirmed: nothing was run")

        self.app.push_screen(ConfirmCopy(copy.describe()), answered)
        return True

    def _begin(self, cmd: list[str], repeats: int, steps: int, like: JobCopy | None) -> None:
        self.configs, extra = plan(self.selected())
        self.live = {c: LiveRow() for c in self.configs}
        self.result = None
        self.done_runs = 0
        self.total_runs = repeats * len(self.configs)
        self.running = True
        self.query_one("#opt-run", Button).disabled = True
        self.query_one("#opt-progress-row").display = True
        self.query_one("#opt-progress", ProgressBar).update(total=self.total_runs, progress=0)
        self.query_one("#opt-winner", Static).update("")
        self._status(
            f"running {len(self.configs)} configurations x {repeats} repeats, {steps} steps "
            "each (interleaved); every run is a session file"
        )
        self._draw_table()
        self._compare(cmd, list(self.configs), repeats, steps, extra, like)

    # -- worker ---------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="optimizer-compare")
    def _compare(
        self,
        cmd: list[str],
        configs: list[str],
        repeats: int,
        steps: int,
        extra: dict[str, OptimizeSpec],
        like: JobCopy | None = None,
    ) -> None:
        # Launches the workload again and again: never on the UI thread.
        try:
            out_dir = self.out_dir
            if out_dir is None:
                from sofa_top.recording.paths import sessions_dir

                out_dir = sessions_dir()
            result = self.runner(
                cmd,
                configs,
                repeats=repeats,
                steps=steps,
                on_progress=self._report,
                out_dir=out_dir,
                optimize=extra or None,
                like=like,
            )
        except Exception as exc:  # shown on the screen; the dashboard must survive it
            self.post_message(CompareDone(None, f"{type(exc).__name__}: {exc}"))
            return
        try:
            measured = note_measured(result)  # into the comparison's own session files
        except Exception:  # the result stands without it
            measured = []
        self.post_message(CompareDone(result, m=measured))

    def _report(self, event: CompareEvent) -> None:
        """``on_progress``, called on the worker thread: post_message is thread-safe."""
        self.post_message(CompareProgress(event))

    @on(CompareProgress)
    def _progress(self, message: CompareProgress) -> None:
        event = message.event
        if isinstance(event, RunStarted):
            if self.done_runs >= self.total_runs:
                # a round past the repeats: the noise hid a result
                self.total_runs = self.done_runs + 1
                self.query_one("#opt-progress", ProgressBar).update(total=self.total_runs)
            self.live.setdefault(event.config, LiveRow())
            for name, row in self.live.items():
                row.running = name == event.config
            self.query_one("#opt-current", Static).update(
                Text(f"run {event.repeat}/{event.repeats} {event.config}  "
                     f"({self.done_runs + 1} of {self.total_runs})")
            )  # fmt: skip
            self._draw_table()
        elif isinstance(event, RunFinished):
            row = self.live.setdefault(event.config, LiveRow())
            row.running = False
            if event.outcome.rate is not None:
                row.rates.append(event.outcome.rate)
                row.unit = event.outcome.unit
            if event.outcome.failed:
                row.failures += 1
            self.done_runs += 1
            self.query_one("#opt-progress", ProgressBar).update(progress=self.done_runs)
            self._draw_table()
        else:
            # the baseline's diagnosis and the parallelism search, before the other runs
            self.query_one("#opt-current", Static).update(Text(_search_text(event)))

    @on(CompareDone)
    def _done(self, message: CompareDone) -> None:
        self.running = False
        self.query_one("#opt-run", Button).disabled = not self.can_run
        for row in self.live.values():
            row.running = False
        if message.result is None:
            self._status(f"compare failed: {message.error}", error=True)
            self._draw_table()
            return
        self.show_result(message.result)
        sink = live_session(self.app)
        if sink is not None and message.measured:
            # the dashboard's verdict quotes it from the next judgement on
            sink.note_measured(message.measured)

    def show_result(self, result: CompareResult) -> None:
        """Fill the table from a finished comparison and show the winner's code changes."""
        self.result = result
        self.configs = [r.config for r in result.runs]
        bar = self.query_one("#opt-progress", ProgressBar)
        total = self.total_runs or result.repeats * len(result.runs)
        bar.update(total=total, progress=total)
        self.query_one("#opt-progress-row").display = True
        self.query_one("#opt-current", Static).update(Text("done"))
        self._status(
            f"done: {len(result.runs)} configurations x {result.repeats} repeats"
            + (f"; best {result.best}" if result.best else "")
        )
        self._draw_table()
        self.query_one("#opt-winner", Static).update(winner_text(result))

    def _draw_table(self) -> None:
        self.query_one("#opt-table", Static).update(
            results_table(self.configs, self.live, self.result)
        )

    def action_close(self) -> None:
        """Back to the dashboard (a running comparison carries on; o shows it again)."""
        self.app.pop_screen()


def _search_text(event: CompareEvent) -> str:
    """The current-activity line for the diagnosis and search events (no session paths)."""
    if isinstance(event, SearchLevelStarted):
        return f"search parallelism {event.parallelism}"
    return progress_line(event).strip()


def uses_cuda(snapshot: Snapshot) -> bool:
    """The agent saw the workload use CUDA (its readings, or its torch-cuda hook applied)."""
    agent = snapshot.agent
    return snapshot.cuda is not None or (agent is not None and "torch-cuda" in agent.hooks_applied)


def live_session(app: App[Any]) -> MeasuredSink | None:
    """The live session behind the dashboard (a launch's or an attach's), None for a replay."""
    return measured_sink(app.source) if isinstance(app, DashboardLike) else None


def _dashboard_target(app: App[Any]) -> tuple[TargetInfo | None, Snapshot | None]:
    if not isinstance(app, DashboardLike):
        return None, None
    snapshot = app.latest
    if snapshot is not None:
        return snapshot.target, snapshot
    return target_of(app.source), None


def open_optimizer(app: App[Any], runner: Runner | None = None) -> None:
    """Show the optimizer screen over the dashboard ``app``.

    The screen is installed, so a comparison keeps running (and is shown again) when the user
    goes back to the dashboard; an idle one is rebuilt from the latest snapshot."""
    if isinstance(app.screen, OptimizerScreen):
        return
    if app.is_screen_installed(SCREEN_NAME):
        screen = app.get_screen(SCREEN_NAME)
        if isinstance(screen, OptimizerScreen) and (screen.running or screen.result):
            app.push_screen(SCREEN_NAME)
            return
        app.uninstall_screen(SCREEN_NAME)
    target, snapshot = _dashboard_target(app)
    dash = app if isinstance(app, DashboardLike) else None
    chosen: Runner = runner or (dash.optimizer_runner if dash else None) or run_compare
    copier = (dash.optimizer_copier if dash else None) or job_copy
    screen = OptimizerScreen(
        target,
        None if snapshot is None else snapshot.verdict,
        runner=chosen,
        copier=copier,
        cuda=snapshot is not None and uses_cuda(snapshot),
        framework="" if snapshot is None else snapshot_framework(snapshot),
        model=None if snapshot is None else snapshot.model,
    )
    app.install_screen(screen, SCREEN_NAME)
    app.push_screen(SCREEN_NAME)
