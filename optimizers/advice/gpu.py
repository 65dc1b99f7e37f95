"""Advice for CUDA loops: what keeps a GPU fed, or makes its work cheaper."""

from __future__ import annotations

from sofa_top.agent import toggles as tg
from sofa_top.datamodel.verdict import GpuCause, Recommendation

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
    return (*recs, Recommendation(PIN_MEMORY, tg.PIN_MEMORY))


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
                tg.BF16,
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
    recs.append(Recommendation("model.compile() (torch.compile fuses elementwise kernels)", tg.XLA))
    return tuple(recs)


def gpu_underused_recommendations(
    cause: GpuCause, pinned: bool, bf16: bool | None
) -> tuple[Recommendation, ...]:
    """The GPU idles for ``cause``: what keeps it fed."""
    if cause == "launch":
        return (
            Recommendation(REDUCE_OVERHEAD, tg.COMPILE_MODE),
            Recommendation("bigger batches: the same number of kernels does more work each"),
            Recommendation(
                "fewer, larger ops: no Python loops over tensors or layers inside the step"
            ),
        )
    if cause == "copy":
        recs = [] if pinned else [Recommendation(PIN_MEMORY, tg.PIN_MEMORY)]
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
                tg.BF16 if bf16 is not False else None,
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
            "move host work off the loop's thread: preprocessing into DataLoader workers, no "
            "per-step .item() / .cpu() / print of a tensor (each waits for the GPU)"
        ),
        Recommendation("bigger batches: the host's work per step is spread over more samples"),
    )
