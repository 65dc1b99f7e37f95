"""The agent's step clocks: one table (``TABLE``) from which every other list of them is
derived (stdlib only: the agent's hooks mark steps on them, and ``StepSample.source``, the
verdicts, the report and the panels read them through this one definition).

A clock is what marks a loop's step boundaries: a fetch (a DataLoader's, a tf.data
iterator's, ``api.iterate``'s), a model call, a backward pass, an optimizer step, Keras fit's
train function. What its ``input_wait_s`` means differs (``Wait``): the loop's own wait for a
batch, the step's host time outside the model (which the loop thread's stacks split into
input, python, syncs and output), or nothing measured. ``api.iterate`` and ``api.mark_step``
mark the ``python`` clock under a name the user may choose (``StepSample.name``).

Adding a clock is one row in ``TABLE`` (and one constant for the hook that marks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from sofa_top.agent.toggles import Framework

Clock = Literal[
    "tf-eager",
    "keras-fit",
    "torch-dataloader",
    "torch-optimizer",
    "torch-backward",
    "torch-model-call",
    "keras-model-call",
    "tf-function-call",
    "keras-evaluate",
    "python",
]
# the names, for code that names one clock (typed as the literal)
TF_EAGER: Final = "tf-eager"
KERAS_FIT: Final = "keras-fit"
TORCH_DATALOADER: Final = "torch-dataloader"
TORCH_OPTIMIZER: Final = "torch-optimizer"
TORCH_BACKWARD: Final = "torch-backward"
TORCH_MODEL_CALL: Final = "torch-model-call"
KERAS_MODEL_CALL: Final = "keras-model-call"
TF_FUNCTION_CALL: Final = "tf-function-call"
KERAS_EVALUATE: Final = "keras-evaluate"
PYTHON: Final = "python"

# what a step's ``input_wait_s`` is: the loop's wait for its input ("input"), the step's host
# time outside the model, which the stacks split ("host"), or not measured ("none": 0, never
# read as "no wait")
Wait = Literal["input", "host", "none"]


@dataclass(frozen=True)
class ClockRow:
    """One clock: everything the verdicts, the report and the panels need to know."""

    name: Clock
    text: str  # how people read it: "steps from {text}"
    framework: Framework | None  # whose hook marks it (None: the user's code, api.iterate)
    wait: Wait
    trains: bool = False  # it only ever marks training steps (a backward, an optimizer step)
    keras: bool = False  # a Keras clock: the workload itself uses Keras

    @property
    def sees_input(self) -> bool:
        """Its steps time the input wait (directly or as host time the stacks split)."""
        return self.wait != "none"

    @property
    def model_call(self) -> bool:
        """Its steps run from one model call to the next: the wait is host time, and a step
        runs the model (an inference step unless the session trains)."""
        return self.wait == "host"

    @property
    def hooked(self) -> bool:
        """One of the agent's hooks marks it (its reasons explain a session without steps)."""
        return self.framework is not None


TABLE: tuple[ClockRow, ...] = (
    ClockRow(TF_EAGER, "tf.data iterator fetches", "tensorflow", "input"),
    ClockRow(
        KERAS_FIT, "Keras fit's train function", "tensorflow", "input", trains=True, keras=True
    ),
    ClockRow(TORCH_DATALOADER, "DataLoader fetches", "torch", "input"),
    ClockRow(TORCH_OPTIMIZER, "optimizer.step() calls", "torch", "none", trains=True),
    ClockRow(TORCH_BACKWARD, "backward() calls", "torch", "none", trains=True),
    ClockRow(TORCH_MODEL_CALL, "the model's calls (nn.Module)", "torch", "host"),
    ClockRow(KERAS_MODEL_CALL, "the Keras model's calls", "tensorflow", "host", keras=True),
    ClockRow(TF_FUNCTION_CALL, "tf.function calls", "tensorflow", "host"),
    ClockRow(KERAS_EVALUATE, "Keras evaluation batches", "tensorflow", "none", keras=True),
    ClockRow(PYTHON, "api.iterate fetches / api.mark_step marks", None, "input"),
)  # fmt: skip
CLOCKS: tuple[Clock, ...] = get_args(Clock)


def rows() -> tuple[ClockRow, ...]:
    """The table's rows in order."""
    return TABLE


def row_of(clock: str) -> ClockRow | None:
    """The row of a clock's name; None for a name of the user's (``api.iterate(source=...)``)."""
    return next((r for r in TABLE if r.name == clock), None)


def clock_of(value: object) -> tuple[Clock, str]:
    """A clock's name as sent or stored, as (its clock, the user's name): a name of the
    table's is that clock; any other string names an ``api`` loop's ``python`` clock."""
    row = row_of(value) if isinstance(value, str) else None
    if row is not None:
        return row.name, ""
    return PYTHON, value if isinstance(value, str) else ""


def names(*, wait: Wait | None = None, trains: bool | None = None) -> frozenset[Clock]:
    """The clocks whose rows say ``wait`` / ``trains`` (None: any)."""
    return frozenset(
        r.name
        for r in TABLE
        if (wait is None or r.wait == wait) and (trains is None or r.trains == trains)
    )
