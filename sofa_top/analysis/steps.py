"""Where a session's steps come from, and why a session has none (pure functions).

The agent marks steps with one of several clocks (``StepSample.source``); the verdict names
the one it read (``evidence.step_source``), and a session without steps says why, from what it
knows: the mode, whether sofa-top launched the workload with its agent, what the agent
reported about its hooks, and how the workload ended.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sofa_top.model.samples import AgentInfo, AgentState, StepSample, agent_state

# Clocks that see step boundaries but not the fetch of a batch: their input wait is 0 by
# construction, not measured.
UNTIMED_SOURCES = frozenset({"torch-optimizer", "torch-backward"})

# How each clock is described to people.
SOURCE_TEXT = {
    "tf-eager": "tf.data iterator fetches",
    "keras-fit": "Keras fit's train function",
    "torch-dataloader": "DataLoader fetches",
    "torch-optimizer": "optimizer.step() calls",
    "torch-backward": "backward() calls",
}

# The framework each of the agent's own clocks belongs to (``api.iterate``/``mark_step`` clocks
# are named by the user and say nothing of it).
SOURCE_FRAMEWORK = {
    "tf-eager": "tensorflow",
    "keras-fit": "tensorflow",
    "torch-dataloader": "torch",
    "torch-optimizer": "torch",
    "torch-backward": "torch",
}

# What the agent can time, for the reason a launched loop showed no step.
HOOKED = "a DataLoader, a tf.data iterator, Keras fit, optimizer.step() or backward()"
MARK_STEPS = (
    "mark the loop's steps: `from sofa_top.agent import api`, then "
    "`for batch in api.iterate(batches):` (times each fetch) or `api.mark_step()` after each step"
)


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What is known of the run besides its samples (for the reasons)."""

    mode: str | None = None  # "launch", "attach", "record"
    launched: bool = False  # sofa-top started the workload, with its agent injected
    agent: AgentInfo | None = None  # the agent's last report (None: it never connected)
    exit_code: int | None = None
    workload_error: str | None = None  # the last line of its stderr, when it failed
    stopped: bool | None = None  # sofa-top stopped the workload (None: not known, older files)

    @property
    def agent_state(self) -> AgentState:
        """Whether the workload has the agent (``samples.agent_state``)."""
        return agent_state(self.launched, self.agent)

    def mode_text(self) -> str:
        """The session's mode as people read it."""
        state = self.agent_state
        if state in ("launched", "waiting"):
            return f"{self.mode or 'launch'} mode, sofa-top's agent injected"
        if state == "injected":
            return f"{self.mode or 'attach'} mode, attached, sofa-top's agent injected"
        return f"{self.mode or 'attach'} mode, attached to a running process (no agent)"


def step_sources(steps: Iterable[StepSample]) -> dict[str, int]:
    """Steps per source, most first."""
    return dict(Counter(s.source for s in steps).most_common())


def main_source(steps: Sequence[StepSample]) -> str | None:
    """The source with the most steps (the loop's clock), None without steps."""
    counts = step_sources(steps)
    return next(iter(counts), None)


def wait_measured(source: str | None) -> bool:
    """Whether the steps of ``source`` time the input wait (not 0 by construction)."""
    return source is not None and source not in UNTIMED_SOURCES


# the last line of a Python traceback: "ValueError: ...", "torch.OutOfMemoryError", ...
RAISED = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit))\b")
ERROR_LINE_MAX = 300


def error_line(stderr: Iterable[str]) -> str | None:
    """The line that names a failed workload's error: the last exception line of its stderr
    (libraries log on after a traceback: TensorFlow's "Local rendezvous is aborting"), else its
    last non-empty line."""
    last: str | None = None
    raised: str | None = None
    for line in stderr:
        text = line.strip()
        if text:
            last = text
            if RAISED.match(text):
                raised = text
    out = raised or last
    return None if out is None else out[:ERROR_LINE_MAX]


def failed(facts: RunFacts) -> bool:
    """Whether the workload ended with an error of its own (not stopped by sofa-top)."""
    code = facts.exit_code
    if code is None or code == 0 or facts.stopped:
        return False
    # a file that does not say whether sofa-top stopped the job: its SIGTERM did
    return facts.stopped is not None or code not in (-15, 143)


def no_steps_reason(facts: RunFacts) -> str:
    """Why no step was recorded, in one line."""
    if failed(facts):
        why = f": {facts.workload_error}" if facts.workload_error else ""
        return f"the workload exited with code {facts.exit_code} before any step{why}"
    if facts.agent_state == "none":
        return (
            f"no step telemetry in {facts.mode_text()}: only an agent inside the process "
            "can time steps"
        )
    agent = facts.agent
    if agent is None:
        return (
            "sofa-top's agent never connected (the workload is not a Python that runs "
            "sitecustomize, or it ran with -S / -I)"
        )
    skipped = [
        f"{hook}: {reason}"
        for hook, reason in agent.hooks_skipped
        if reason not in ("not imported by the workload", "disabled in settings")
    ]
    if skipped:
        return "no step measured: " + "; ".join(skipped)
    imported = {name for name, _version in agent.frameworks}
    if not imported & {"tensorflow", "torch", "keras"}:
        return "no step measured: the workload imported neither TensorFlow nor PyTorch"
    return f"no step measured: the loop used none of {HOOKED}"


def failure_text(facts: RunFacts) -> str:
    """How a failed workload ended, in one line: its exit code and its error line."""
    why = f": {facts.workload_error}" if facts.workload_error else ""
    return f"the workload failed (exit code {facts.exit_code}){why}"


def next_step(facts: RunFacts) -> str:
    """What to do to get steps, possible in this session's mode."""
    if failed(facts):
        return "fix the workload's error (its output is in the session's log) and run it again"
    if facts.agent_state == "none":
        return "run it under `sofa-top launch -- CMD` for exact per-step input wait"
    return MARK_STEPS
