"""Input-pipeline advice per stage kind and per framework.

Rules: a recommendation names only a parameter of a stage the pipeline has (``map`` gets
``num_parallel_calls`` only where there is a map; a ``from_generator`` source gets the tf.data
guide's interleave over shards or a parallel map instead); it is written in the workload's own
framework (no ``ds.map(f).cache()`` for a torch loop); a DataLoader over an ``IterableDataset``
gets workers only together with the ``get_worker_info()`` sharding that keeps every sample seen
once; and a recommendation the ``prefetch`` toggle can try names it.
"""

from __future__ import annotations

from sofa_top.agent import toggles as tg
from sofa_top.datamodel.verdict import InputCause, Recommendation, unmeasured
from sofa_top.optimizers.advice.stages import PipelineView

IOWAIT_EVIDENCE = 5.0  # % iowait: the waits are on local storage (files worth copying closer)
SHARD_RECIPE = (
    "shard it per worker first: in its __iter__, `info = torch.utils.data.get_worker_info()`, "
    "then yield only the items where `info is None or i % info.num_workers == info.id`"
)
SHARD_WHY = "unsharded, every worker replays the whole stream: each sample is seen N times"


def n_cores(n: int) -> str:
    """``1 core``, ``2 cores``: the workload's core count, as every text writes it."""
    return f"{n} core{'' if n == 1 else 's'}"


def _calls(n: int | None) -> str:
    return "tf.data.AUTOTUNE" if n is None else str(n)


def default_workers(cores: int) -> int:
    """DataLoader workers the advice (and the prefetch toggle) start from."""
    return max(2, cores - 1)


def generator_text(name: str, cause: str | None, n: int | None) -> str:
    """The fix for a serial ``from_generator`` source (the tf.data guide's own)."""
    if cause == "cpu":
        return (
            f"the source {name} is a Python generator doing CPU work under the GIL (threads "
            "cannot run it in parallel): move the work into TF ops in a parallel map, "
            "`tf.data.Dataset.range(n).map(load_one, num_parallel_calls=tf.data.AUTOTUNE)`, "
            "or precompute it once"
        )
    return (
        f"the source {name} is a Python generator that yields one element at a time: read "
        "shards of the input in parallel, one generator per file or index range: "
        "`tf.data.Dataset.range(N).interleave(lambda i: tf.data.Dataset.from_generator(gen, "
        f"args=(i,), output_signature=...), cycle_length=N, num_parallel_calls={_calls(n)})`"
        + (f" and options.threading.private_threadpool_size={n}" if n is not None else "")
        + "; or move the work into a parallel map"
    )


def _tf_stage_recs(v: PipelineView, n: int | None) -> list[Recommendation]:
    """num_parallel_calls for the map and interleave stages that run below ``n`` (or serially)."""
    recs: list[Recommendation] = []
    for s in v.of("map", "interleave"):
        if not (s.parallelism == 1 or (n is not None and (s.parallelism or 0) < n)):
            continue
        now = "serially" if s.parallelism == 1 else f"at parallelism {s.parallelism}"
        if s.kind == "map":
            text = f"map: num_parallel_calls={_calls(n)} (stage {s.name} runs {now})"
        else:
            text = f"interleave(..., num_parallel_calls={_calls(n)}) (stage {s.name} runs {now})"
        recs.append(Recommendation(text, tg.PREFETCH))
    return recs


def _tf_source_recs(v: PipelineView, cause: str | None, n: int | None) -> list[Recommendation]:
    """A serial generator source, a PyDataset's workers, and the final prefetch."""
    recs = [Recommendation(generator_text(s.name, cause, n)) for s in v.serial("generator")]
    for s in v.of("py_dataset"):
        if (s.parallelism or 1) <= 1 or (n is not None and (s.parallelism or 1) < n):
            recs.append(py_dataset_rec(s.name, cause, n))
    if not v.has("prefetch", "py_dataset"):
        where = "after batch()" if v.has("batch") else "as the pipeline's last step"
        recs.append(Recommendation(f"add .prefetch(tf.data.AUTOTUNE) {where}", tg.PREFETCH))
    return recs


def py_dataset_rec(name: str, cause: str | None, n: int | None) -> Recommendation:
    """Keras PyDataset: its own workers (threads, or processes past the GIL)."""
    workers = n or 4
    if cause == "cpu":
        how = (
            f"workers={workers}, use_multiprocessing=True (processes: a CPU-bound "
            "__getitem__ holds the GIL)"
        )
    else:
        how = f"workers={workers} (threads suffice while __getitem__ waits)"
    return Recommendation(
        f"Keras {name}: pass {how} to super().__init__(...) in its __init__", tg.PREFETCH
    )


def _torch_parallel(v: PipelineView, cores: int, n: int | None) -> list[Recommendation]:
    src = v.source
    workers = v.workers
    want = n or default_workers(cores)
    if src is None or workers >= want or (n is None and workers > 0):
        return []
    now = "it loads in the loop's process" if workers == 0 else f"now {workers}"
    if src.kind == "iterable":
        return [
            Recommendation(
                f"DataLoader(num_workers={want}, persistent_workers=True) over the "
                f"IterableDataset {src.name} only after you {SHARD_RECIPE} ({SHARD_WHY})",
                tg.PREFETCH,
            )
        ]
    return [
        Recommendation(
            f"DataLoader(num_workers={want}, persistent_workers=True) ({now})", tg.PREFETCH
        )
    ]


def parallelize(
    v: PipelineView, fw: str, cores: int, cause: str | None = None, n: int | None = None
) -> list[Recommendation]:
    """Run the pipeline's serial stages in parallel (``n``: a parallelism past the cores)."""
    if v.framework == "tf.data":
        return _tf_stage_recs(v, n) + _tf_source_recs(v, cause, n)
    if v.framework == "torch":
        return _torch_parallel(v, cores, n)
    if fw == "tensorflow":
        return [
            Recommendation(
                f"tf.data: num_parallel_calls={_calls(n)} on the pipeline's map/interleave "
                "stages and .prefetch(tf.data.AUTOTUNE) last (sofa-top launch shows which "
                "stages it has)",
                tg.PREFETCH,
            )
        ]
    if fw == "torch":
        w = n or default_workers(cores)
        return [
            Recommendation(
                f"DataLoader(num_workers={w}, persistent_workers=True) (an IterableDataset "
                "must shard by get_worker_info() first)",
                tg.PREFETCH,
            )
        ]
    return [
        Recommendation(
            "overlap input with compute: prefetch batches in the background and parallelize "
            "preprocessing",
            tg.PREFETCH,
        )
    ]


def _latency(v: PipelineView, fw: str, cores: int, iowait: float | None) -> list[Recommendation]:
    wide = max(16, 4 * cores)
    head = f"the input stage waits on I/O, not CPU: raise parallelism past the {n_cores(cores)}"
    recs: list[Recommendation]
    if v.framework == "tf.data" or (not v.framework and fw == "tensorflow"):
        parts = []
        if v.has("map") or not v.framework:
            parts.append(f"map(f, num_parallel_calls={wide})")
        if v.has("interleave"):
            parts.append(f"interleave(..., num_parallel_calls={wide})")
        recs = []
        if parts:
            recs.append(
                Recommendation(
                    f"{head}: {' and '.join(parts)} and options.threading."
                    f"private_threadpool_size={wide} (AUTOTUNE stops at the core count)",
                    tg.PREFETCH,
                )
            )
        recs += _tf_source_recs(v, "latency", wide)
    elif v.framework == "torch" or fw == "torch":
        recs = [
            Recommendation(
                f"{head}: {r.text}: workers that mostly wait can outnumber the cores", r.toggle
            )
            for r in parallelize(v, "torch", cores, "latency", wide)
        ]
    else:
        recs = [
            Recommendation(
                f"{head}: overlap more reads (threads or async I/O), or read fewer, larger files",
                tg.PREFETCH,
            )
        ]
    if iowait is not None and iowait >= IOWAIT_EVIDENCE:
        recs.append(
            Recommendation(
                f"or keep the data closer ({iowait:.0f}% iowait): a local copy or cache of "
                "the files"
            )
        )
    return recs


def _py_dataset_levers(name: str) -> list[Recommendation]:
    # a Keras PyDataset is no tf.data pipeline: no ds.cache(), no tf.data service
    return [
        Recommendation(
            f"lighter work in {name}.__getitem__: vectorize it per batch (numpy), or "
            "preprocess offline once and load the result"
        ),
        Recommendation(
            f"Keras {name}: use_multiprocessing=True in super().__init__(...) where it is not "
            "set: its workers are threads, and CPU-bound Python in __getitem__ holds the GIL"
        ),
    ]


def _cpu_levers(v: PipelineView, fw: str) -> list[Recommendation]:
    tf = v.framework == "tf.data" or (not v.framework and fw == "tensorflow")
    py_datasets = v.of("py_dataset")
    if tf and py_datasets:
        return _py_dataset_levers(py_datasets[0].name)
    if tf:
        recs: list[Recommendation] = []
        if not v.has("cache"):
            if v.has("map"):
                recs.append(
                    Recommendation(
                        "cache after the expensive map: ds = ds.map(f).cache() (in memory, or "
                        "cache(filename) on local disk), or preprocess offline once "
                        "(tf.data.Dataset.save)"
                    )
                )
            else:
                recs.append(
                    Recommendation(
                        "cache what the source yields: ds = ds.cache() before the random "
                        "augmentation, or preprocess offline once (tf.data.Dataset.save)"
                    )
                )
        if v.has("map") or not v.framework:
            recs.append(Recommendation("lighter work in map (smaller images, cheaper ops)"))
        if v.has("generator"):
            recs.append(Recommendation("vectorize the generator's Python work (numpy per batch)"))
        recs.append(
            Recommendation("more cores for input: a tf.data service (tf.data.experimental.service)")
        )
        return recs
    if v.framework == "torch" or fw == "torch":
        where = "the stream" if v.has("iterable") else "__getitem__"
        return [
            Recommendation(
                f"cache decoded samples once (in memory or on local disk) instead of decoding "
                f"in every {where} call, or preprocess offline"
            ),
            Recommendation(f"lighter work in {where} (smaller images, cheaper transforms)"),
            Recommendation("more cores for input: DataLoader workers on more hosts"),
        ]
    return [
        Recommendation("cache the expensive preprocessing, or do it offline once"),
        Recommendation("more cores for input: preprocessing on more hosts"),
    ]


def give_cores(neighbours: tuple[tuple[int, str], ...]) -> Recommendation:
    """What helps when other processes hold the cores: less of them, or cores of its own."""
    named = ", ".join(f"{name} {pid}" for pid, name in neighbours[:3]) or "them"
    pids = " ".join(str(pid) for pid, _ in neighbours[:3]) or "PID"
    return Recommendation(
        f"other processes keep the CPUs busy ({named}): lower their priority (`renice -n 10 -p "
        f"{pids}`), pin the job and them to separate CPUs (`taskset -c`), or run it "
        "on a machine that is not shared"
    )


def fewer_threads(
    fw: str,
    cores: int,
    others: float | None,
    lead: str = "fewer compute threads leave the contended CPUs to the input stage",
) -> list[Recommendation]:
    """Beside contended CPUs, the job's own compute pools compete with its input stage (or with
    the neighbours: ``lead`` says which) for what the neighbours leave: fewer threads may leave
    more to it (or slow the compute: unmeasured)."""
    n = max(1, min(cores, int(cores - (others or 0.0) + 0.25)))
    if n >= cores:
        return []  # nothing left to cap
    if fw == "torch":
        how = f"torch.set_num_threads({n})"
    elif fw == "tensorflow":
        how = (
            f"tf.config.threading.set_intra_op_parallelism_threads({n}) and "
            f"set_inter_op_parallelism_threads({n})"
        )
    else:
        return []
    text = f"{lead}: {how}"
    return [Recommendation(text + unmeasured("it depends on what the neighbours run"), tg.THREADS)]


def _contention(
    v: PipelineView, fw: str, cores: int, neighbours: tuple[tuple[int, str], ...]
) -> list[Recommendation]:
    more = [
        Recommendation(
            f"more producers get a larger share of the contended CPUs (fair scheduling gives "
            f"each runnable thread its turn, at the neighbours' cost): {r.text}{unmeasured()}",
            r.toggle,
        )
        for r in parallelize(v, fw, cores, "cpu")
    ]
    return [give_cores(neighbours), *more, *_cpu_levers(v, fw)]


def input_recommendations(
    cause: InputCause | None,
    v: PipelineView,
    fw: str,
    cores: int,
    iowait: float | None = None,
    neighbours: tuple[tuple[int, str], ...] = (),
) -> list[Recommendation]:
    """What to change for an input bottleneck of this cause (None: not measured); the prefetch
    toggle's own advice comes first (for contention, after what gives the job its cores).
    ``neighbours``: (pid, name) of the busiest other processes."""
    kind = None if cause is None else cause.cause
    framework = "tensorflow" if v.framework == "tf.data" else v.framework or fw
    if kind == "latency":
        recs = _latency(v, fw, cores, iowait)
        if cause is not None and cause.contended:
            recs.append(give_cores(neighbours))
            recs += fewer_threads(framework, cores, cause.others_cores)
        return recs
    if kind == "contention" and cause is not None:
        return _contention(v, fw, cores, neighbours) + fewer_threads(
            framework, cores, cause.others_cores
        )
    recs = parallelize(v, fw, cores, kind)
    if cause is not None and kind == "cpu":
        if cause.usable_cores >= cores:
            # a physical bound, not a measurement: compare can still try it
            recs = [
                Recommendation(
                    f"preprocessing keeps its producers on the {n_cores(cores)}: cheaper work "
                    f"per sample is the lever; more parallelism than the cores shares them"
                    + unmeasured()
                )
            ]
        elif cause.shared:
            # beside busy neighbours a new producer gets its fair share of the cores they hold,
            # not a core of its own: compare measured no gain (DataLoader workers, 2-core VM,
            # another job's test suite alongside: 1585 vs 1627 items/s, ranges overlapping)
            recs = [
                Recommendation(
                    f"other processes keep {min(cause.others_cores or 0.0, cores):.1f} of "
                    f"{n_cores(cores)} busy, so more producers get only a share of them: "
                    f"{r.text}{unmeasured()}",
                    r.toggle,
                )
                for r in recs
            ]
        recs += _cpu_levers(v, fw)
    if not recs:
        # nothing left to parallelize (a PyDataset with its workers, say): what makes each
        # item cheaper, rather than an input-bound verdict with no advice at all
        recs = _cpu_levers(v, fw)
    return recs
