"""The framework of a workload's *model*, decided once (the verdict's advice and the optimizer
panel's toggles both read it): a torch model fed by TensorFlow's image ops is torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from sofa_top.analysis import steps as step_facts
from sofa_top.datamodel.samples import PipelineSample, StepSample
from sofa_top.datamodel.snapshot import Snapshot, StackSummary
from sofa_top.datamodel.workload import ModelFramework, ModelReport

# "" when nothing says it yet
Known = ModelFramework | Literal[""]
_TORCH_MODULE = "torch/nn/modules/module.py"  # nn.Module.__call__: a torch model ran


def model_framework(
    steps: Sequence[StepSample],
    model: ModelReport | None,
    pipeline: PipelineSample | None,
    frameworks: Sequence[str],
    stacks: StackSummary | None,
) -> Known:
    """The model-call clock's framework, the agent's model report, the pipeline's, the
    frameworks the workload imported, any step clock's, then the stacks' files."""
    source = step_facts.main_source(steps)
    model_clock = step_facts.framework_of(source) if step_facts.model_call(source) else None
    if model_clock is not None:
        return model_clock
    if model is not None and model.module:
        return model.framework
    if pipeline is not None:
        return "tensorflow" if pipeline.framework == "tf.data" else "torch"
    for fw in frameworks:
        if fw in ("tensorflow", "torch"):
            return "tensorflow" if fw == "tensorflow" else "torch"
    # a step's hook names its framework: known from the first step, before the agent's status
    # or enough stack samples arrive (the first verdict's fix would otherwise be generic)
    for s in reversed(steps[-50:]):
        hooked = step_facts.framework_of(s.source)
        if hooked is not None:
            return hooked
    if stacks is not None:
        # a torch model's calls, whatever decodes its input: looked for in every function, as
        # they run little of their own (the hot functions can all be the input's: TensorFlow's
        # image ops decoding for a torch model rank them below 30th)
        if any(_TORCH_MODULE in f.filename for f in stacks.functions):
            return "torch"
        files = " ".join(f.filename for f in stacks.functions[:30])
        if "tensorflow" in files or "keras" in files:
            return "tensorflow"
        if "torch" in files:
            return "torch"
    return ""


def snapshot_framework(snapshot: Snapshot) -> Known:
    """``model_framework`` of a snapshot's recent steps, reports and stacks."""
    agent = snapshot.agent
    return model_framework(
        snapshot.steps,
        snapshot.model,
        snapshot.pipeline,
        tuple(name for name, _v in agent.frameworks) if agent is not None else (),
        snapshot.stacks,
    )
