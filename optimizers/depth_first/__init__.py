"""Depth-first execution of chains of memory-bound layers (BrainSlug, Weber et al. 2018).

Eager PyTorch runs a model layer by layer: a BatchNorm reads and writes the whole activation
tensor, then a ReLU reads and writes it again, then a pooling layer... For the memory-bound
layers between two convolutions this traffic to DRAM is most of their cost. ``depth_first``
finds maximal runs of such layers and executes each run chunk by chunk, every chunk small
enough to stay in the CPU cache while it goes through the whole run; only the run's input and
output travel to memory.

Public API::

    from sofa_top.optimizers import depth_first, depth_first_report
    model = depth_first(model)          # same object, transformed in place
    for run in depth_first_report(model): print(run)

Modules (each docstring says how its part works)
    ``ops``        the op table: eligible layers, how each is called and run on a chunk
    ``discovery``  fx tracing and the chains of eligible nodes (or Sequential children)
    ``transform``  ``depth_first``/``depth_first_report``: rewrites forwards around runs
    ``run``        ``Run``, the callable replacing a chain: picks its path per input
    ``options``    what a run is configured with, and its shapes
    ``chunked``    how a run is split, and chunk-by-chunk execution
    ``tuner``      the first-call measurement that decides chunk size and threads
    ``pool``       the worker threads that take whole chunks (inference)
    ``report``     ``ChunkDecision`` and ``RunReport``
    ``count``      ``count_chains``: the runs it would take, without transforming (the agent's
                   check that depth-first can apply before it is suggested)

torch.compile
    Mutually exclusive: ``depth_first`` on a compiled module (``torch.compile(m)`` or
    ``m.compile()``) raises ``ValueError``. Inductor already fuses element-wise chains into
    one loop, which is the same idea done by a compiler. Compiling a depth-first model works
    but is pointless: under compilation every run takes its original path.

Limits
    CPU tensors in the default (contiguous) memory format only; anything else (CUDA,
    channels-last, sparse, autocast) takes the original path. Module state the fx code read
    at transform time (Python flags in a forward) is frozen, as with any fx transform; a
    forward whose code differs between train and eval mode is not rewritten. ``torch.save``
    of the whole module object is not supported (save the ``state_dict``; keys are unchanged).

TensorFlow/Keras: not supported (decision)
    Measured with ``benchmarks/depth_first.py --tf`` on the benchmark's BN/ReLU/pool block
    (32x112x112x64, inference, 2-core VM, medians of 5): Keras eager 680 ms, ``tf.function``
    292 ms, depth-first by hand (``tf.split`` into 8 batch chunks + ``tf.concat`` inside
    ``tf.function``) 230 ms, XLA (``jit_compile=True``) 94 ms. Chunking gains 1.27x over a
    plain graph, but XLA already fuses the element-wise chain into one loop and is 2.4x faster
    than the chunked graph, one flag away; an experimental TF version is not worth it.
    sofa-top should suggest ``jit_compile=True`` for TF instead. Details: optimizers/README.md.
"""

from sofa_top.optimizers.depth_first.count import ChainCount, count_chains
from sofa_top.optimizers.depth_first.report import ChunkDecision, RunReport
from sofa_top.optimizers.depth_first.transform import depth_first, depth_first_report

__all__ = [
    "ChainCount",
    "ChunkDecision",
    "RunReport",
    "count_chains",
    "depth_first",
    "depth_first_report",
]
