"""Where a session's steps come from, and why a session has none (pure functions).

The agent marks steps with one of several clocks (``StepSample.source``); the verdict names
the one it read (``evidence.step_source``), and a session without steps says why, from what it
knows: the mode, whether sofa-top launched the workload with its agent, what the agent
reported about its hooks, and how the workload ended.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sofa_top.agent import clocks
from sofa_top.agent.clocks import Clock
from sofa_top.agent.toggles import Framework
from sofa_top.datamodel.samples import AgentInfo, AgentState, StepSample, agent_state
from sofa_top.datamodel.snapshot import Mode

# host-time stack samples that can split it (fewer: all of it is input). Ten give a share within
# about +-0.3 (95%), closer than "all of it" whenever the host time is mostly not input: a short
# run beside busy neighbours, whose sampler's CPU budget buys 5-10 Hz, has 10-20 of them
MIN_HOST_SAMPLES = 10

# What the agent can time, for the reason a launched loop showed no step.
HOOKED = (
    "a model call (nn.Module, Keras model, tf.function), a DataLoader, a tf.data iterator, "
    "Keras fit, optimizer.step() or backward()"
)


# What each clock is, read from its row of the clock table (``agent.clocks.TABLE``) when asked:
# a clock of the user's (``api.iterate(source="...")``), or none, has no row.
def model_call(source: str | None) -> bool:
    """Whether ``source``'s steps run between model calls (their wait is host time)."""
    row = clocks.row_of(source) if source is not None else None
    return row is not None and row.model_call


def trains(source: str) -> bool:
    """Whether ``source`` only ever marks training steps."""
    row = clocks.row_of(source)
    return row is not None and row.trains


def framework_of(source: str | None) -> Framework | None:
    """The framework whose hook marks ``source`` (None: the user's clock, or none)."""
    row = clocks.row_of(source) if source is not None else None
    return None if row is None else row.framework


def clock_text(source: str | None) -> str | None:
    """How people read ``source``: "steps from {text}" (None: no row)."""
    row = clocks.row_of(source) if source is not None else None
    return None if row is None else row.text


def keras_clock(source: str) -> bool:
    """Whether ``source`` is a Keras clock (the workload itself uses Keras)."""
    row = clocks.row_of(source)
    return row is not None and row.keras


def step_hook(hook: str) -> bool:
    """Whether the agent's hook ``hook`` marks steps: only their reasons explain a session
    without steps (a CUDA or collectives hook that did not apply says nothing of them)."""
    row = clocks.row_of(hook)
    return row is not None and row.hooked


Phase = Literal["train", "eval", "inference"]
PHASES: tuple[Phase, ...] = ("train", "eval", "inference")
MARK_STEPS = (
    "mark the loop's steps: `from sofa_top.agent import api`, then "
    "`for batch in api.iterate(batches):` (times each fetch) or `api.mark_step()` after each step"
)


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What is known of the run besides its samples (for the reasons)."""

    mode: Mode | None = None
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


def valid_steps(steps: Sequence[StepSample], agent: AgentInfo | None) -> list[StepSample]:
    """``steps`` less those of a clock the agent stopped for a reason of the loop's (the
    model called from several threads): what it marked before it knew is no loop's steps."""
    stopped = {
        hook
        for hook, reason in (agent.hooks_skipped if agent is not None else ())
        if model_call(hook) and reason.startswith("the model is called")
    }
    return [s for s in steps if s.source not in stopped] if stopped else list(steps)


def label(step: StepSample) -> str:
    """The name a step's clock goes by: the user's for an ``api`` loop, else the clock's."""
    return step.name or step.source


def step_sources(steps: Iterable[StepSample]) -> dict[str, int]:
    """Steps per clock (by ``label``), most first."""
    return dict(Counter(label(s) for s in steps).most_common())


def _main(steps: Iterable[StepSample]) -> tuple[Clock, str] | None:
    counts = Counter((s.source, s.name) for s in steps)
    return next((key for key, _n in counts.most_common(1)), None)


def main_source(steps: Sequence[StepSample]) -> Clock | None:
    """The clock with the most steps (the loop's), None without steps."""
    main = _main(steps)
    return None if main is None else main[0]


def main_label(steps: Sequence[StepSample]) -> str | None:
    """``label`` of the loop's clock (``main_source``), None without steps."""
    main = _main(steps)
    return None if main is None else main[1] or main[0]


def wait_measured(source: str | None) -> bool:
    """Whether the steps of ``source`` time the input wait (not 0 by construction)."""
    row = clocks.row_of(source) if source is not None else None
    return row is not None and row.sees_input


def trained(steps: Iterable[StepSample]) -> bool:
    """Whether any step shows training (a backward, an optimizer step, Keras fit)."""
    return any(s.phase_hint == "train" or trains(s.source) for s in steps)


def _infers(step: StepSample) -> bool:
    """A model ran in the step, and it did not train."""
    return step.phase_hint == "eval" or (
        step.phase_hint == "" and (step.autograd is not None or model_call(step.source))
    )


def phase_of(step: StepSample, training: bool, inferring: bool = False) -> Phase:
    """A step's phase. ``training``: the session trains, so a step that cannot train is an
    evaluation; ``inferring``: the session runs a model without training (then a step with
    no evidence is inference too). With nothing known at all (a ``tf.function`` step over
    tf.data, whose graph may train) a step stays what a step always was: training."""
    if step.phase_hint == "train" or trains(step.source):
        return "train"
    if training:
        return "eval" if step.phase_hint == "eval" else "train"
    return "inference" if inferring or _infers(step) else "train"


def by_phase(
    steps: Sequence[StepSample], training: bool | None = None
) -> dict[Phase, list[StepSample]]:
    """The steps of each phase, in order (``training``: known of the session; None: from
    ``steps``)."""
    t = trained(steps) if training is None else training
    inferring = not t and any(_infers(s) for s in steps)
    out: dict[Phase, list[StepSample]] = {}
    for s in steps:
        out.setdefault(phase_of(s, t, inferring), []).append(s)
    return out


def main_phase(phases: Mapping[Phase, Sequence[StepSample]], least: int = 1) -> Phase | None:
    """The phase the numbers are about: training when it has ``least`` steps, else the phase
    with the most."""
    if len(phases.get("train", ())) >= least:
        return "train"
    return max(phases, key=lambda p: len(phases[p]), default=None)


def input_share(host_split: Mapping[str, float] | None, host_samples: int) -> float:
    """The input share of the host time: input over input, python, syncs and output work (the
    compute class, a loss between the forward and the backward, is not in the clock's host
    time); all of it when the stacks cannot split it."""
    if host_split is None or host_samples < MIN_HOST_SAMPLES:
        return 1.0
    known = sum(float(host_split.get(k, 0.0)) for k in ("input", "python", "sync", "output"))
    return float(host_split.get("input", 0.0)) / known if known > 0 else 1.0


def input_fraction(
    steps: Sequence[StepSample],
    host_split: Mapping[str, float] | None = None,
    host_samples: int = 0,
) -> float | None:
    """Input wait over step time; a model-call step's wait is its host time's input share;
    None when the steps' clock cannot see input (or there is no step time)."""
    total = sum(s.duration_s for s in steps)
    if total <= 0 or not wait_measured(main_source(steps)):
        return None
    share = input_share(host_split, host_samples)
    wait = sum(s.input_wait_s * (share if model_call(s.source) else 1.0) for s in steps)
    return min(1.0, wait / total)


def output_fraction(
    steps: Sequence[StepSample],
    host_split: Mapping[str, float] | None,
    host_samples: int = 0,
) -> float | None:
    """The share of the model-call steps' time the loop spends on the model's output outside
    the model (the host split's ``output``: sampling, argmax, writing); None unsplit."""
    total = sum(s.duration_s for s in steps)
    if total <= 0 or host_split is None or host_samples < MIN_HOST_SAMPLES:
        return None
    host = sum(s.input_wait_s for s in steps if model_call(s.source))
    return min(1.0, host / total) * float(host_split.get("output", 0.0))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by linear interpolation between ranks; None when empty."""
    if not values:
        return None
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def compute_split(steps: Iterable[StepSample]) -> dict[str, float] | None:
    """Forward / backward / optimizer / collective as fractions of the steps' timed compute;
    None when no step's compute was split (Keras fit, a tf.function: one opaque span)."""
    f = b = o = c = 0.0
    for s in steps:
        if s.forward_s is None or s.backward_s is None or s.optimizer_s is None:
            continue
        f += s.forward_s
        b += s.backward_s
        o += s.optimizer_s
        c += s.collective_s or 0.0
    total = f + b + o + c
    if total <= 0:
        return None
    return {
        "forward": f / total,
        "backward": b / total,
        "optimizer": o / total,
        "collective": c / total,
    }


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
        if step_hook(hook)
        and reason not in ("not imported by the workload", "disabled in settings")
    ]
    if skipped:
        return "no step measured: " + "; ".join(skipped)
    called = [source for source, _note in agent.step_notes if model_call(source)]
    if called:
        return (
            f"no step measured: the model was called once ({called[0]}); a step runs from one "
            "model call to the next, and a run that calls its model once has no loop to time"
        )
    imported = {name for name, _version in agent.frameworks}
    if not imported & {"tensorflow", "torch", "keras"}:
        return "no step measured: the workload imported neither TensorFlow nor PyTorch"
    return f"no step measured: the loop used none of {HOOKED}: it never called a model"


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
