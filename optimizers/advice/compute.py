"""Compute-side advice: compilers, depth-first chains and thread pools, only where they apply.

``depth_first`` is suggested only when the agent counted chains it would take in the model
(none, or no count: not suggested; never for TensorFlow, where XLA already fuses such chains);
``torch.compile`` only for a model the workload ran, in the API of the library that runs it (a
Hugging Face ``Trainer``, Lightning, a Keras model on the torch backend). Thread-count advice
names the framework's own setting and the OpenMP environment.
"""

from __future__ import annotations

from sofa_top.agent import toggles as tg
from sofa_top.datamodel.verdict import Recommendation, unmeasured
from sofa_top.datamodel.workload import ModelReport
from sofa_top.optimizers.advice.inputs import give_cores

NOT_FOR_TF = "not offered for TensorFlow: XLA (jit_compile=True) already fuses such chains"
# A model whose forward takes less than this per call (an RNN cell called per letter) gives a
# compiler too little to fuse: its guards and launches cost as much (the char-RNN tutorial ran
# 0.40-0.55x under torch.compile)
TINY_CALL_S = 0.001


def xla_text(keras: bool) -> str:
    """TensorFlow's compiler, where the workload writes its step."""
    if keras:
        return "compile the step with XLA: model.compile(..., jit_compile=True)"
    return (
        "compile the step with XLA: @tf.function(jit_compile=True) on the train step "
        "(Keras: model.compile(..., jit_compile=True))"
    )


def torch_compile_text(model: ModelReport | None) -> str | None:
    """``torch.compile`` in the workload's API; None when no model ran that it could compile."""
    if model is None:
        return "model.compile() (torch.compile) before the loop"
    if not model.module:
        return None
    if "transformers-trainer" in model.libraries:
        return "TrainingArguments(..., torch_compile=True) (the Hugging Face Trainer compiles it)"
    if "lightning" in model.libraries:
        return (
            f"model = torch.compile(model) on the {model.module} LightningModule before "
            "trainer.fit(model)"
        )
    if model.keras_model:
        return (
            f"Keras on torch: model.compile(..., jit_compile=True) for fit, or "
            f"torch.compile({model.module} instance) in a torch loop"
        )
    return f"model.compile() (torch.compile) on the {model.module} instance before the loop"


def depth_first_text(model: ModelReport | None) -> str | None:
    """The depth-first suggestion, only with chains counted in the model."""
    if model is None or not model.depth_first_chains:
        return None
    n = model.depth_first_chains
    chains = f"{n} chain{'s' if n != 1 else ''}"
    return (
        f"run the {chains} of memory-bound layers in {model.module} depth-first: "
        "model = sofa_top.optimizers.depth_first(model)"
    )


CALL_SETUP_SHARE = 0.3  # a Keras call spending this share of itself on its own setup


OUTPUT_SHARE = 0.2  # a loop spending this share of its steps on the model's output


def compute_recommendations(
    fw: str,
    model: ModelReport | None = None,
    keras: bool = False,
    call_setup: float | None = None,
    output: float | None = None,
) -> tuple[Recommendation, ...]:
    """What to try on a compute-bound loop of framework ``fw``; ``call_setup``: the share of
    the loop's Keras calls spent building their own data adapter (``predict`` per sample);
    ``output``: the share of its steps spent on the model's output outside the model."""
    recs = _compiler_recommendations(fw, model, keras, call_setup)
    if output is None or output < OUTPUT_SHARE:
        return recs
    ops = "torch" if fw == "torch" else "TensorFlow" if fw == "tensorflow" else "framework"
    return (
        Recommendation(
            f"{output:.0%} of each step is the loop's work on the model's output, outside "
            "the model (sampling, argmax, decoding, writing): the model's compiler does not "
            f"touch it; keep it in {ops} ops on the model's side (sample from the logits "
            "before any `.cpu()`/`.numpy()`), or handle several sequences or requests per call"
        ),
        *recs,
    )


def _compiler_recommendations(
    fw: str, model: ModelReport | None, keras: bool, call_setup: float | None
) -> tuple[Recommendation, ...]:
    if fw == "tensorflow" and keras and call_setup is not None and call_setup >= CALL_SETUP_SHARE:
        return (
            Recommendation(
                "call the model without predict's per-call setup: `model.predict_on_batch(x)` "
                f"(or `model(x, training=False)`) in the loop: {call_setup:.0%} of each "
                "`predict` builds a data adapter and an iterator for the arrays it is given"
            ),
        )
    if fw == "tensorflow":
        return (Recommendation(xla_text(keras), tg.XLA),)
    if fw == "torch":
        recs: list[Recommendation] = []
        compile_ = torch_compile_text(model)
        call_s = None if model is None else model.call_s
        tiny = call_s is not None and call_s < TINY_CALL_S
        if compile_ is not None and not tiny:
            recs.append(Recommendation(compile_, tg.XLA))
        df = depth_first_text(model)
        if df is not None:
            recs.append(Recommendation(df, tg.DEPTH_FIRST))
        if tiny and model is not None and call_s is not None:
            # known to lose at this size: the real lever first, the compiler only to measure
            recs.insert(0, Recommendation(batch_calls_text(model.module, call_s)))
            if compile_ is not None:
                recs.append(
                    Recommendation(
                        f"{compile_}: likely slower here, at {call_s * 1e3:.2f} ms per call"
                        + unmeasured("its guards and launches cost about what it saves"),
                        tg.XLA,
                    )
                )
        return tuple(recs)
    return ()


def batch_calls_text(module: str, call_s: float) -> str:
    """The fix for a model called many times a step on tiny inputs."""
    return (
        f"{module or 'the model'} takes {call_s * 1e3:.2f} ms per call: call it on more at once "
        "(a whole sequence through nn.RNN/nn.LSTM, not a cell per token or letter; a larger "
        "batch), so each call does enough work"
    )


def thread_count(cores: int, busy: float) -> int:
    """Threads for a pool that must not outnumber the cores it gets (``busy``: cores it got)."""
    return max(1, min(cores, int(busy + 0.25)))


def oversubscribed_recommendations(
    fw: str,
    cores: int,
    busy: float,
    model: ModelReport | None = None,
    neighbours: tuple[tuple[int, str], ...] | None = None,
    own: bool = False,
    processes: int = 1,
) -> tuple[Recommendation, ...]:
    """Thread pools that wait for cores: fewer threads, and idle OpenMP threads that sleep.
    ``neighbours`` (pid, name): other processes hold cores too. ``own``: the job's own pools
    outnumber its cores, so the thread cap comes first (it is the fix, whatever they do), and
    what gives the job its cores after it; else the latter comes first, and a thread cap
    (whose effect then depends on what they do) says it is not measured. ``processes``: the
    job's processes that each run a pool (spawned trainers): the cores are shared among them."""
    n = max(1, thread_count(cores, busy) // max(1, processes))
    env = f"OMP_NUM_THREADS={n}"
    recs: list[Recommendation] = []
    if neighbours is not None and not own:
        recs.append(give_cores(neighbours))
    guess = "" if neighbours is None or own else unmeasured("it depends on what they run")
    each = f" in each of the job's {processes} training processes" if processes > 1 else ""
    if fw == "tensorflow":
        recs.append(
            Recommendation(
                f"tf.config.threading.set_intra_op_parallelism_threads({n}) and "
                f"set_inter_op_parallelism_threads({n}){each} before the first op (or {env})"
                f"{guess}",
                tg.THREADS,
            )
        )
    else:
        now = (
            f" (now {model.intra_op_threads})"
            if model is not None and model.intra_op_threads
            else ""
        )
        recs.append(
            Recommendation(
                f"torch.set_num_threads({n}){now}{each} at the start of the script, or {env} "
                f"in its environment{guess}",
                tg.THREADS,
            )
        )
    recs.append(
        Recommendation(
            "OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of spinning on the "
            "cores the busy ones need"
        )
    )
    if neighbours is not None and own:
        recs.append(give_cores(neighbours))
    return tuple(recs)


def depth_first_off(fw: str, model: ModelReport | None) -> str | None:
    """Why depth-first cannot apply here (None: it can)."""
    if fw == "tensorflow":
        return NOT_FOR_TF
    if model is None:
        return "no model report yet (the agent counts the chains when the model first runs)"
    if not model.module:
        return "no model with parameters has run yet"
    if model.depth_first_chains is None:
        why = f": {model.chain_reason}" if model.chain_reason else ""
        return f"the chains in {model.module} could not be counted{why}"
    if model.depth_first_chains == 0:
        return (
            f"{model.module} has no chain of memory-bound layers (BatchNorm/activation/pooling "
            "runs) that depth-first could take"
        )
    return None
