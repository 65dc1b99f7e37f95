"""Advice for a loop that prepares its input in its own body, then calls its model.

The model-call clock found the steps: no DataLoader or tf.data pipeline feeds the loop, and
its host time between model calls is input preparation (decoding, resizing, tokenising in a
Python loop). The fix the SOFA study measured first: move that work into the framework's input
pipeline, where it runs in parallel and overlaps the model (``tf.data`` map with
``num_parallel_calls`` and ``prefetch``; a ``Dataset`` read by ``DataLoader`` workers), then
batch, then drop autograd from an inference loop. Every text is written for the framework of
the *model* (a torch model whose images TensorFlow decodes gets the DataLoader).
"""

from __future__ import annotations

from sofa_top.datamodel.verdict import InputCause, Recommendation
from sofa_top.optimizers.advice.inputs import default_workers, n_cores


def loop_input_recommendations(
    fw: str,
    phase: str,
    batch_size: int | None,
    cores: int,
    cause: InputCause | None = None,
    autograd: bool | None = None,
) -> list[Recommendation]:
    """What to change when a loop body's input preparation dominates its steps.

    ``phase``: "train", "eval" or "inference"; ``batch_size``: the model calls' batch (None:
    unknown); ``autograd``: the torch model ran with autograd on (None: not known)."""
    recs: list[Recommendation] = []
    saturated = cause is not None and cause.cause == "cpu" and cause.usable_cores >= cores
    if saturated:
        recs.append(
            Recommendation(
                f"the preprocessing already keeps the {n_cores(cores)} busy: parallelism cannot "
                "help here; decode less (smaller stored images, `draft`/reduced decoding), cache "
                "decoded inputs, or preprocess once offline"
            )
        )
    if fw == "tensorflow":
        recs.append(
            Recommendation(
                "move the loop body's per-item preprocessing into tf.data: `ds = "
                "tf.data.Dataset.from_tensor_slices(files).map(load, num_parallel_calls="
                "tf.data.AUTOTUNE).batch(B).prefetch(tf.data.AUTOTUNE)` with `load` in TF ops "
                "(tf.io.decode_jpeg, tf.image.resize), then `for x in ds: model(x)`: the "
                "items are prepared in parallel while the model runs"
            )
        )
    elif fw == "torch":
        w = default_workers(cores)
        recs.append(
            Recommendation(
                "move the loop body's per-item preprocessing into a `torch.utils.data.Dataset` "
                "(its `__getitem__` decodes and transforms one item) and iterate `DataLoader("
                f"ds, batch_size=B, num_workers={w}, persistent_workers=True)`: the workers "
                "prepare the next batches while the model runs"
            )
        )
    else:
        recs.append(
            Recommendation(
                "prepare the next inputs in parallel while the model runs (a pool of worker "
                "processes), instead of one after the other in the loop body"
            )
        )
    if batch_size == 1:
        stack = "tf.stack" if fw == "tensorflow" else "torch.stack" if fw == "torch" else "stack"
        recs.append(
            Recommendation(
                f"batch the inputs: the model runs on one item per call; {stack} several per "
                "call (a serving loop: gather the requests that wait, up to a size or a few ms)"
            )
        )
    if fw == "torch" and phase != "train" and autograd is not False:
        recs.append(
            Recommendation(
                "run the loop under `with torch.inference_mode():` (the model's calls record "
                "autograd state they never use)"
                if autograd
                else "run the loop under `with torch.inference_mode():` (no autograd state)"
            )
        )
    return recs
