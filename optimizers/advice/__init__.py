"""Advice: which code change fixes which bottleneck, in the workload's own framework.

This is the optimizer's knowledge, kept apart from how a bottleneck is found
(``sofa_top.analysis.verdicts``) so that the verdicts can ask for it: it reads only the data
model, and every recommendation that an optimizer toggle can try names that toggle.

``inputs``: input pipelines, per stage kind (generator, flat_map, interleave, map, batch, cache,
Keras PyDataset, torch Dataset / IterableDataset) and framework; ``compute``: compilers,
depth-first chains and thread pools, only where the agent's model report says they apply;
``gpu``: CUDA loops (pinned copies, CUDA graphs, bf16); ``loops``: a loop that prepares its
input in its own body (no pipeline); ``stages``: the pipeline as the advice reads it.
"""

from __future__ import annotations

from collections.abc import Collection

from sofa_top.agent import toggles as tg
from sofa_top.agent.toggles import Toggle
from sofa_top.datamodel.samples import PipelineSample
from sofa_top.datamodel.verdict import InputCause, Recommendation
from sofa_top.datamodel.workload import ModelReport
from sofa_top.optimizers.advice import inputs
from sofa_top.optimizers.advice.compute import (
    compute_recommendations,
    depth_first_off,
    oversubscribed_recommendations,
    thread_count,
    torch_compile_text,
)
from sofa_top.optimizers.advice.gpu import (
    PIN_MEMORY,
    REDUCE_OVERHEAD,
    gpu_compute_recommendations,
    gpu_input_recommendations,
    gpu_underused_recommendations,
)
from sofa_top.optimizers.advice.loops import loop_input_recommendations
from sofa_top.optimizers.advice.stages import PipelineView, view

__all__ = [
    "LAUNCH_FOR_STEPS",
    "PIN_MEMORY",
    "REDUCE_OVERHEAD",
    "PipelineView",
    "compute_recommendations",
    "gpu_compute_recommendations",
    "gpu_input_recommendations",
    "gpu_recommendations",
    "gpu_underused_recommendations",
    "input_recommendations",
    "launch_recommendations",
    "loop_input_recommendations",
    "memory_pressure_recommendations",
    "oversubscribed_recommendations",
    "pipeline_recommendations",
    "python_recommendations",
    "shared_cores_recommendations",
    "thread_count",
    "toggles_off",
    "view",
]

# Stable texts the verdicts also use.
LAUNCH_FOR_STEPS = "run it under `sofa-top launch -- CMD` for exact per-step input wait"


def pipeline_recommendations(
    p: PipelineSample | None, fw: str, cores: int = 2
) -> list[Recommendation]:
    """Input advice when the cause (CPU or waiting) is not known."""
    return inputs.input_recommendations(None, view(p), fw, cores)


def input_recommendations(
    cause: InputCause,
    p: PipelineSample | None,
    fw: str,
    cores: int,
    iowait: float | None = None,
    neighbours: tuple[tuple[int, str], ...] = (),
) -> list[Recommendation]:
    """What to change for an input bottleneck of this cause; the prefetch toggle's own
    advice comes first. ``neighbours``: (pid, name) of the busiest other processes."""
    return inputs.input_recommendations(cause, view(p), fw, cores, iowait, neighbours)


def memory_pressure_recommendations() -> tuple[Recommendation, ...]:
    """Memory nearly full: what takes less of it."""
    return (
        Recommendation(
            "lower the batch size or the DataLoader prefetch_factor / tf.data buffer sizes"
        ),
    )


def gpu_recommendations() -> tuple[Recommendation, ...]:
    """Compute on the host while a GPU idles."""
    return (Recommendation("move the model and batches to the GPU, raise the batch size"),)


def python_recommendations(writer: str | None = None) -> tuple[Recommendation, ...]:
    """Plain Python holds the loop's thread; ``writer``: the hot function writes a result out
    (an image encoder), the host's work after the model."""
    if writer is not None:
        return (
            Recommendation(
                f"the time is writing results ({writer}: encoding, after the model): encode "
                "less (a faster format or compression level, smaller outputs), or write them "
                "from a background thread or process while the next input is handled"
            ),
        )
    return (Recommendation("move the hot Python function into vectorized framework ops"),)


def shared_cores_recommendations(
    fw: str, cores: int, others_cores: float, around: str
) -> tuple[Recommendation, ...]:
    """Other processes keep cores busy (``around``: the neighbours as the verdict says them): a
    compute pool as wide as the cores they leave may stop waiting for them, or lose to them (it
    depends on what they run: unmeasured)."""
    lead = f"{around}: a pool of the cores they leave"
    return tuple(inputs.fewer_threads(fw, cores, others_cores, lead))


def launch_recommendations() -> tuple[Recommendation, ...]:
    """Not enough evidence from outside the process: the agent would measure the steps."""
    return (Recommendation(LAUNCH_FOR_STEPS),)


def toggles_off(
    fw: str,
    verdict_kind: str | None,
    model: ModelReport | None,
    offered: Collection[Toggle | None] = (),
) -> dict[Toggle, str]:
    """Why each toggle that cannot help (or cannot apply) here is off; the others are absent.
    A toggle the verdict's advice ``offered`` (its recommendations' toggles) is not said to be
    of no help (what cannot apply stays off)."""
    off = _off(fw, verdict_kind, model)
    return {t: why for t, why in off.items() if t not in offered or t not in JUDGED_OFF}


# toggles that are off by a judgement of the verdict (not by what the workload is)
JUDGED_OFF: tuple[Toggle, ...] = (tg.PREFETCH, tg.THREADS)


def _off(fw: str, verdict_kind: str | None, model: ModelReport | None) -> dict[Toggle, str]:
    off: dict[Toggle, str] = {}
    if verdict_kind not in (None, "input-bound", "unknown"):
        off[tg.PREFETCH] = f"{verdict_kind}: the loop does not wait for its input"
    if fw == "torch" and torch_compile_text(model) is None:
        off[tg.XLA] = "no model with parameters has run that torch.compile could take"
    df = depth_first_off(fw, model)
    if df is not None:
        off[tg.DEPTH_FIRST] = df
    if verdict_kind != "cpu-oversubscribed":
        off[tg.THREADS] = "the thread pools do not outnumber the cores the workload gets"
    return off
