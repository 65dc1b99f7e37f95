"""Advice: which code change fixes which bottleneck, in the workload's own framework.

This is the optimizer's knowledge, kept apart from how a bottleneck is found
(``sofa_top.analysis.verdicts``) so that the verdicts can ask for it: it reads only the data
model, and every recommendation that an optimizer toggle can try names that toggle.
"""

from __future__ import annotations

from sofa_top.model.samples import PipelineSample
from sofa_top.model.verdict import GpuCause, InputCause, Recommendation

# Stable texts the verdicts also use.
LAUNCH_FOR_STEPS = "run it under `sofa-top launch -- CMD` for exact per-step input wait"


def pipeline_recommendations(p: PipelineSample | None, fw: str) -> list[Recommendation]:
    recs: list[Recommendation] = []
    if p is not None and p.framework == "tf.data":
        kinds = {s.kind for s in p.stages}
        for s in p.stages:
            if s.kind in ("map", "interleave") and (s.parallelism or 1) <= 1:
                recs.append(
                    Recommendation(
                        f"{s.kind}: num_parallel_calls=tf.data.AUTOTUNE "
                        f"(stage {s.name} runs serially)",
                        "prefetch",
                    )
                )
        if "prefetch" not in kinds:
            recs.append(Recommendation("add .prefetch(tf.data.AUTOTUNE) after batch()", "prefetch"))
    elif p is not None and p.framework == "torch":
        workers = next((s.parallelism for s in p.stages if s.kind == "source"), None)
        if not workers:
            recs.append(
                Recommendation(
                    "DataLoader(num_workers=2, persistent_workers=True) "
                    "(it loads in the main process)",
                    "prefetch",
                )
            )
    if not recs:
        if fw == "tensorflow":
            recs = [
                Recommendation("map: num_parallel_calls=tf.data.AUTOTUNE", "prefetch"),
                Recommendation("add .prefetch(tf.data.AUTOTUNE) after batch()", "prefetch"),
            ]
        elif fw == "torch":
            recs = [
                Recommendation("DataLoader(num_workers=2, persistent_workers=True)", "prefetch")
            ]
        else:
            recs = [
                Recommendation(
                    "overlap input with compute: prefetch batches in the "
                    "background and parallelize preprocessing",
                    "prefetch",
                )
            ]
    return recs


def input_recommendations(
    cause: InputCause, p: PipelineSample | None, fw: str, cores: int
) -> list[Recommendation]:
    """What to change for an input bottleneck of this cause; the prefetch toggle's own
    advice comes first."""
    recs = pipeline_recommendations(p, fw)
    if cause.cause == "latency":
        wide = max(16, 4 * cores)
        if fw == "tensorflow":
            recs = [
                Recommendation(
                    f"the input stage waits on I/O, not CPU: raise parallelism past the "
                    f"{cores} cores: map(f, num_parallel_calls={wide}) and "
                    f"options.threading.private_threadpool_size={wide} (AUTOTUNE stops at "
                    "the core count)",
                    "prefetch",
                ),
                *recs,
            ]
        elif fw == "torch":
            recs = [
                Recommendation(
                    f"the input stage waits on I/O, not CPU: DataLoader(num_workers={wide}, "
                    f"persistent_workers=True): workers that mostly wait can outnumber the "
                    f"{cores} cores",
                    "prefetch",
                ),
            ]
        else:
            recs = [
                Recommendation(
                    f"the input stage waits on I/O: overlap more reads than the {cores} cores "
                    "(threads or async I/O), or read fewer, larger files",
                    "prefetch",
                ),
                *recs,
            ]
        recs.append(Recommendation("or keep the data closer: a local copy or cache of the files"))
    elif cause.cause == "cpu":
        if cause.usable_cores >= cores:
            recs = [
                Recommendation(
                    f"preprocessing already keeps the {cores} cores busy: more parallelism "
                    "cannot help here"
                )
            ]
        recs += [
            Recommendation(
                "cache after the expensive step (ds.map(f).cache()) or preprocess offline, once"
            ),
            Recommendation("lighter decoding/augmentation (smaller images, cheaper ops)"),
            Recommendation(
                "more cores for input: a tf.data service, or DataLoader workers on more hosts"
                if fw != "torch"
                else "more cores for input: DataLoader workers on more hosts"
            ),
        ]
    return recs


def compute_recommendations(fw: str) -> tuple[Recommendation, ...]:
    if fw == "tensorflow":
        return (
            Recommendation(
                "compile the step with XLA: model.compile(jit_compile=True) or "
                "@tf.function(jit_compile=True)",
                "xla",
            ),
        )
    if fw == "torch":
        return (
            Recommendation("model.compile() (torch.compile)", "xla"),
            Recommendation(
                "run memory-bound layer chains depth-first: "
                "model = sofa_top.optimizers.depth_first(model)",
                "depth-first",
            ),
        )
    return ()


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


def python_recommendations() -> tuple[Recommendation, ...]:
    """Plain Python holds the training thread."""
    return (Recommendation("move the hot Python function into vectorized framework ops"),)


def launch_recommendations() -> tuple[Recommendation, ...]:
    """Not enough evidence from outside the process: the agent would measure the steps."""
    return (Recommendation(LAUNCH_FOR_STEPS),)


# -- GPU loops (CUDA) ---------------------------------------------------------------------------

PIN_MEMORY = (
    "DataLoader(..., pin_memory=True) and batch.to(device, non_blocking=True): the copy to the "
    "GPU then runs from pinned memory, overlapped with compute, instead of blocking the loop"
)
REDUCE_OVERHEAD = (
    "CUDA graphs: model = torch.compile(model, mode='reduce-overhead') replays each step's "
    "kernels from one launch instead of one Python dispatch per op"
)


def gpu_input_recommendations(
    recs: list[Recommendation], pinned: bool
) -> tuple[Recommendation, ...]:
    """The GPU waits for the next batch: the input fixes (``recs``), and pinned copies."""
    if pinned:
        return tuple(recs)
    return (*recs, Recommendation(PIN_MEMORY, "pin-memory"))


def gpu_compute_recommendations(
    bf16: bool | None, convs: bool, half: bool
) -> tuple[Recommendation, ...]:
    """The GPU is the busy device: make its work cheaper (``bf16``: the card has bf16;
    ``convs``: the step runs convolutions; ``half``: kernels already run in 16 bits)."""
    recs: list[Recommendation] = []
    if not half and bf16 is not False:
        recs.append(
            Recommendation(
                "with torch.autocast('cuda', dtype=torch.bfloat16): around forward and loss "
                "(tensor cores at 16 bits; numerics change: check the loss)",
                "bf16",
            )
        )
    elif not half:
        recs.append(
            Recommendation(
                "this card has no bf16: torch.autocast('cuda', dtype=torch.float16) with "
                "torch.amp.GradScaler('cuda')"
            )
        )
    if convs:
        recs.append(
            Recommendation(
                "convolutions: model = model.to(memory_format=torch.channels_last) and the "
                "inputs too (cuDNN's NHWC kernels, faster on tensor cores)"
            )
        )
    recs.append(Recommendation("model.compile() (torch.compile fuses elementwise kernels)", "xla"))
    return tuple(recs)


def gpu_underused_recommendations(
    cause: GpuCause, pinned: bool, bf16: bool | None
) -> tuple[Recommendation, ...]:
    """The GPU idles for ``cause``: what keeps it fed."""
    if cause == "launch":
        return (
            Recommendation(REDUCE_OVERHEAD, "compile-mode"),
            Recommendation("bigger batches: the same number of kernels does more work each"),
            Recommendation(
                "fewer, larger ops: no Python loops over tensors or layers inside the step"
            ),
        )
    if cause == "copy":
        recs = [] if pinned else [Recommendation(PIN_MEMORY, "pin-memory")]
        return (
            *recs,
            Recommendation(
                "copy less: keep the data set on the GPU when it fits, or augment on the GPU; "
                "send uint8 images and convert there"
            ),
        )
    if cause == "memory-pressure":
        return (
            Recommendation(
                "lower the batch size, or torch.autocast with bf16 (activations take half the "
                "memory)",
                "bf16" if bf16 is not False else None,
            ),
            Recommendation(
                "against fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
            ),
            Recommendation(
                "activation checkpointing (torch.utils.checkpoint) on the largest blocks"
            ),
        )
    return (
        Recommendation(
            "move host work off the training loop: preprocessing into DataLoader workers, no "
            "per-step .item() / .cpu() / print of a tensor (each waits for the GPU)"
        ),
        Recommendation("bigger batches: the host's work per step is spread over more samples"),
    )
