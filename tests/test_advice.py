"""Advice per stage kind and per framework: a recommendation names only parameters of stages the
pipeline has, is written in the workload's framework, and depth-first / torch.compile / thread
counts are offered only where they can apply. Pure functions over the data model (the stage
views are what the agent reports for each shape; tests/test_prescriptions.py checks the agent
reports them on real workloads)."""

from __future__ import annotations

import pytest

from sofa_top.datamodel.samples import PipelineSample, PipelineStage
from sofa_top.datamodel.verdict import InputCause
from sofa_top.datamodel.workload import ModelReport
from sofa_top.optimizers import advice


def tf(*stages: PipelineStage) -> PipelineSample:
    return PipelineSample(0.0, "tf.data", stages)


def torch_loader(kind: str, workers: int) -> PipelineSample:
    stages = [PipelineStage("Stream", kind, max(1, workers), None, None)]
    if workers:
        stages.append(PipelineStage("worker prefetch", "prefetch", workers, None, None))
    return PipelineSample(0.0, "torch", tuple(stages))


GENERATOR = tf(
    PipelineStage("Prefetch", "prefetch", None, 2, None),
    PipelineStage("BatchV2", "batch", None, None, None),
    PipelineStage("read_items", "generator", 1, None, 0.002, is_bottleneck=True),
)
INTERLEAVED = tf(
    PipelineStage("BatchV2", "batch", None, None, None),
    PipelineStage("ParallelInterleaveV4", "interleave", 8, None, None),
    PipelineStage("Range", "source", None, None, None),
    PipelineStage("read_items", "generator", 8, None, 0.002),
)
PY_DATASET = tf(
    PipelineStage("OptionsDataset", "other", None, None, None),
    PipelineStage("PyDataset Batches", "py_dataset", 1, 10, None, is_bottleneck=True),
)
CACHED_MAP = tf(
    PipelineStage("Prefetch", "prefetch", None, 2, None),
    PipelineStage("Cache", "cache", None, None, None),
    PipelineStage("ParallelMap", "map", 2, None, None),
    PipelineStage("TensorSlice", "source", None, None, None),
)


def cause(kind: str, busy: float = 0.1, usable: int = 1) -> InputCause:
    return InputCause(kind, busy, usable, usable, "agent")  # type: ignore[arg-type]


def texts(recs: object) -> str:
    return " | ".join(r.text for r in recs)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["latency", "cpu", "mixed"])
def test_a_generator_source_gets_the_tf_data_guides_fix_never_a_map(kind: str) -> None:
    busy = 0.9 if kind == "cpu" else 0.1
    recs = advice.input_recommendations(cause(kind, busy), GENERATOR, "tensorflow", 2)
    text = texts(recs)
    assert "map(f, num_parallel_calls" not in text and "map: num_parallel_calls" not in text
    assert "read_items" in text  # the user's generator, by name
    if kind == "cpu":  # CPU work in Python: threads share the GIL, TF ops in a map do not
        assert "GIL" in text and "parallel map" in text
    else:  # waiting: one generator per shard, read in parallel
        assert "interleave(lambda i: tf.data.Dataset.from_generator(" in text
    # the prefetch toggle cannot parallelize a generator: that advice names no toggle
    assert all(r.toggle is None for r in recs if "generator" in r.text)


def test_a_generator_already_interleaved_gets_no_generator_advice() -> None:
    text = texts(advice.input_recommendations(cause("latency"), INTERLEAVED, "tensorflow", 2))
    assert "Python generator" not in text
    # the interleave is there: its parallelism is what to raise past the cores
    assert "interleave(..., num_parallel_calls=16)" in text and "map(" not in text


def test_keras_py_dataset_gets_its_own_workers() -> None:
    waits = texts(advice.input_recommendations(cause("latency"), PY_DATASET, "tensorflow", 2))
    assert "PyDataset Batches" in waits and "workers=16" in waits
    assert "use_multiprocessing=True" not in waits  # threads suffice for waiting
    burns = advice.input_recommendations(cause("cpu", 0.95), PY_DATASET, "tensorflow", 2)
    assert "use_multiprocessing=True" in texts(burns)
    for text in (waits, texts(burns)):
        assert "map(" not in text and ".cache()" not in text.replace("ds.cache()", "")
        assert "DataLoader" not in text


def test_a_py_dataset_that_keeps_the_cores_busy_gets_py_dataset_levers() -> None:
    """Its workers already use every core (seen on the corpus' keras-pydataset under load):
    the levers are the PyDataset's own, never tf.data's cache or service."""
    busy = tf(
        PipelineStage("OptionsDataset", "other", None, None, None),
        PipelineStage("PyDataset Batches", "py_dataset", 4, 10, None, is_bottleneck=True),
    )
    text = texts(advice.input_recommendations(cause("cpu", 1.9, usable=2), busy, "tensorflow", 2))
    assert "keeps its producers on the 2 cores" in text and "cannot help" not in text
    assert "PyDataset Batches.__getitem__" in text and "use_multiprocessing=True" in text
    assert "cache()" not in text and "tf.data service" not in text and "map(" not in text


def test_mixed_input_with_nothing_left_to_parallelize_still_gets_advice() -> None:
    """The corpus' keras-pydataset on a quiet machine: partly CPU, its workers already there."""
    busy = tf(
        PipelineStage("OptionsDataset", "other", None, None, None),
        PipelineStage("PyDataset Batches", "py_dataset", 4, 10, None, is_bottleneck=True),
    )
    recs = advice.input_recommendations(cause("mixed", 1.0, usable=2), busy, "tensorflow", 2)
    assert recs and "PyDataset Batches.__getitem__" in texts(recs)


def test_a_pipeline_that_caches_is_not_told_to_cache() -> None:
    recs = advice.input_recommendations(cause("cpu", 1.9, usable=2), CACHED_MAP, "tensorflow", 2)
    text = texts(recs)
    assert "keeps its producers on the 2 cores" in text
    assert "cache after" not in text and "tf.data service" in text


def test_torch_advice_is_written_for_torch() -> None:
    loader = torch_loader("source", 0)
    for kind in ("cpu", "latency", "mixed"):
        text = texts(advice.input_recommendations(cause(kind, 0.95), loader, "torch", 2))
        assert "DataLoader(num_workers=" in text
        assert "ds.map" not in text and "tf.data" not in text and "prefetch(tf" not in text
    cpu = texts(advice.input_recommendations(cause("cpu", 1.9, usable=2), loader, "torch", 2))
    assert "__getitem__" in cpu


def test_cpu_bound_input_beside_busy_neighbours_gets_workers_as_unmeasured() -> None:
    """A serial CPU-bound stage on a machine whose other processes keep a core busy: more
    producers share the cores they hold (compare measured no gain there), so the workers are
    offered as not measured; with the machine to itself they are advised outright."""
    loader = torch_loader("source", 0)
    alone = advice.input_recommendations(cause("cpu", 0.95), loader, "torch", 2)
    workers = [r for r in alone if r.toggle == "prefetch"]
    assert workers and "not measured here" not in workers[0].text
    shared = InputCause("cpu", 0.95, 1, 1, "schedstat", others_cores=0.8)
    recs = advice.input_recommendations(shared, loader, "torch", 2, None, ((9, "make"),))
    more = [r for r in recs if r.toggle == "prefetch"]
    assert more and all("not measured here" in r.text for r in more)
    assert "other processes keep 0.8 of 2 cores busy" in more[0].text
    assert "DataLoader(num_workers=" in more[0].text


def test_an_iterable_dataset_gets_workers_only_with_sharding() -> None:
    text = texts(advice.pipeline_recommendations(torch_loader("iterable", 0), "torch", 2))
    assert "get_worker_info()" in text and "i % info.num_workers == info.id" in text
    assert "each sample is seen N times" in text


def test_no_pipeline_known_names_no_stage_it_cannot_see() -> None:
    text = texts(advice.pipeline_recommendations(None, "torch", 2))
    assert "DataLoader" in text and "get_worker_info()" in text and "tf.data" not in text


# -- compute: only what can apply -----------------------------------------------------------------

LSTM = ModelReport("torch", "LSTMLM", "__main__", 800_000, 0, "", 1)
CNN = ModelReport("torch", "CNN", "__main__", 40_000, 1, "", 1)


def test_depth_first_only_where_chains_were_counted() -> None:
    assert "depth_first" not in {r.toggle for r in advice.compute_recommendations("torch", LSTM)}
    cnn = advice.compute_recommendations("torch", CNN)
    df = [r for r in cnn if r.toggle == "depth_first"]
    assert len(df) == 1 and "1 chain of memory-bound layers in CNN" in df[0].text
    # no count (attach mode, an agent without the probe): not suggested, compile still is
    attach = advice.compute_recommendations("torch", None)
    assert [r.toggle for r in attach] == ["xla"]
    # TensorFlow: XLA, never depth-first, whatever the model
    assert [r.toggle for r in advice.compute_recommendations("tensorflow", CNN)] == ["xla"]
    assert "jit_compile=True" in advice.compute_recommendations("tensorflow", None, True)[0].text


@pytest.mark.parametrize(
    "libraries, module_path, words",
    [
        (("transformers-trainer",), "transformers.models", "TrainingArguments(..., torch_compile"),
        (("lightning",), "__main__", "before trainer.fit(model)"),
        (("keras",), "keras.src.models.sequential", "jit_compile=True"),
        ((), "__main__", "model.compile() (torch.compile) on the Net instance"),
    ],
)  # fmt: skip
def test_torch_compile_in_the_api_that_runs_the_model(
    libraries: tuple[str, ...], module_path: str, words: str
) -> None:
    model = ModelReport("torch", "Net", module_path, 10, 0, "", 2, libraries)
    (rec,) = advice.compute_recommendations("torch", model)
    assert rec.toggle == "xla" and words in rec.text
    # a model report without a model that ran: nothing for torch.compile to take
    none = ModelReport("torch", "", "", None, None, "", 2)
    assert advice.compute_recommendations("torch", none) == ()


def test_toggles_off_say_why() -> None:
    off = advice.toggles_off("tensorflow", "compute-bound", None)
    assert "not offered for TensorFlow" in off["depth_first"]
    assert "does not wait for its input" in off["prefetch"] and "xla" not in off
    assert "outnumber" in off["threads"]
    lstm = advice.toggles_off("torch", "cpu-oversubscribed", LSTM)
    assert "no chain of memory-bound layers" in lstm["depth_first"] and "threads" not in lstm
    assert "depth_first" not in advice.toggles_off("torch", "compute-bound", CNN)


def test_oversubscription_advice_names_the_framework_setting() -> None:
    model = ModelReport("torch", "Net", "__main__", 10, 0, "", 2)
    torch_recs = advice.oversubscribed_recommendations("torch", 2, 0.4, model)
    assert torch_recs[0].toggle == "threads"
    assert "torch.set_num_threads(1) (now 2)" in torch_recs[0].text
    assert "OMP_NUM_THREADS=1" in torch_recs[0].text
    assert "OMP_WAIT_POLICY=PASSIVE" in texts(torch_recs)
    tf_recs = advice.oversubscribed_recommendations("tensorflow", 4, 2.0)
    assert "set_intra_op_parallelism_threads(2)" in tf_recs[0].text


def test_contention_names_the_neighbours_and_does_not_rule_parallelism_out() -> None:
    """Other processes hold the cores: what gives the job its cores comes first, naming them;
    more producers (a larger share under fair scheduling) is offered as not measured."""
    loader = torch_loader("source", 0)
    hog = ((4242, "python"), (77, "make"))
    recs = advice.input_recommendations(cause("contention", 0.3), loader, "torch", 2, None, hog)
    assert recs[0].toggle is None and "python 4242" in recs[0].text
    assert "renice -n 10 -p 4242 77" in recs[0].text
    more = [r for r in recs if r.toggle == "prefetch"]
    assert more and "num_workers=2" in more[0].text and "not measured here" in more[0].text
    assert "cannot help" not in texts(recs)
    # waiting on I/O beside them: the latency fix first, then the cores (only when contended)
    late = InputCause("latency", 0.05, 1, 1, "schedstat", contended=True)
    recs = advice.input_recommendations(late, loader, "torch", 2, None, hog)
    assert "num_workers=16" in recs[0].text and "renice" in texts(recs[1:])
    quiet = advice.input_recommendations(cause("latency"), loader, "torch", 2, None, hog)
    assert "renice" not in texts(quiet)


def test_a_thread_cap_against_neighbours_says_it_is_not_measured() -> None:
    own = advice.oversubscribed_recommendations("torch", 2, 1.0)
    assert own[0].toggle == "threads" and "not measured" not in own[0].text
    theirs = advice.oversubscribed_recommendations("torch", 2, 1.0, neighbours=((9, "hog"),))
    assert theirs[0].toggle is None and "hog 9" in theirs[0].text
    assert theirs[1].toggle == "threads" and "not measured here" in theirs[1].text


def test_compile_for_tiny_per_call_work_is_not_offered_first() -> None:
    """An RNN cell called per letter (0.08 ms a call): torch.compile is known to lose there;
    the fix that gives each call enough work comes first, the compiler only to be measured."""
    from sofa_top.datamodel.workload import ModelReport, merge, model_report

    cell = ModelReport("torch", "RNN", "__main__", 30_000, 0, "", 2, call_s=0.00008)
    recs = advice.compute_recommendations("torch", cell)
    assert recs[0].toggle is None and "RNN takes 0.08 ms per call" in recs[0].text
    assert "a whole sequence through nn.RNN" in recs[0].text
    compile_ = [r for r in recs if r.toggle == "xla"]
    assert compile_ and "likely slower here" in compile_[0].text
    assert "not measured here" in compile_[0].text
    # enough work per call: compile is offered as before
    big = ModelReport("torch", "Net", "__main__", 10**6, 0, "", 2, call_s=0.02)
    assert advice.compute_recommendations("torch", big)[0].toggle == "xla"
    # the timing arrives in a second report of the same model, and a later one keeps it
    assert model_report(cell.as_json()) == cell
    untimed = ModelReport("torch", "RNN", "__main__", 30_000, 0, "", 2)
    assert merge(cell, untimed).call_s == 0.00008


def test_beside_contended_cpus_fewer_threads_is_offered_unmeasured_and_not_off() -> None:
    """The demo beside a hog: its own compute pools compete with its input stage for the CPUs
    the neighbours leave, and threads=1 measured 1.22x; a toggle the advice offers is never
    shown as off in the panel."""
    loader = torch_loader("source", 0)
    late = InputCause("latency", 0.05, 1, 1, "schedstat", others_cores=1.0, contended=True)
    recs = advice.input_recommendations(late, loader, "torch", 2, None, ((9, "hog"),))
    threads = [r for r in recs if r.toggle == "threads"]
    assert threads and "torch.set_num_threads(1)" in threads[0].text
    assert "not measured here" in threads[0].text
    tf_recs = advice.input_recommendations(late, GENERATOR, "tensorflow", 2, None, ((9, "h"),))
    assert any("set_intra_op_parallelism_threads(1)" in r.text for r in tf_recs)
    quiet = advice.input_recommendations(cause("latency"), loader, "torch", 2)
    assert not any(r.toggle == "threads" for r in quiet)
    assert "threads" in advice.toggles_off("torch", "input-bound", None)
    assert "threads" not in advice.toggles_off("torch", "input-bound", None, {"threads"})
