"""The classifier's model-call context and the host time's split (``analysis.classify``,
``analysis.host``) on stacks as py-spy reports them from the inference-shape workloads."""

from __future__ import annotations

from pathlib import Path

from sofa_top.analysis.classify import classify_stack, reconcile_gil
from sofa_top.analysis.host import host_class, host_counts, loop_frame
from sofa_top.analysis.sources import SourceDirs
from sofa_top.analysis.stackstats import summarize
from sofa_top.collectors.gil import GilShares
from sofa_top.collectors.pyspy_raw import RawStack
from sofa_top.collectors.stacks import build_stacks
from sofa_top.datamodel.samples import Frame, StackCount, StackWindow

LOOP = Frame("run_torch.<locals>.step", "inference_shapes.py", 210)
MAIN = (
    Frame("<module>", "inference_shapes.py", 380),
    Frame("timed_loop", "inference_shapes.py", 166),
)
# TensorFlow decoding and resizing in the loop body (torch-nograd)
TF_RESIZE = (
    *MAIN,
    LOOP,
    Frame("tf_batch", "inference_shapes.py", 124),
    Frame("resize_images_v2", "tensorflow/python/ops/image_ops_impl.py", 1796),
    Frame("resize_bilinear", "tensorflow/python/ops/gen_image_ops.py", 3918),
)
# the torch model's own call
TORCH_MODEL = (
    *MAIN,
    LOOP,
    Frame("Module._call_impl", "torch/nn/modules/module.py", 1789),
    Frame("Conv2d.forward", "torch/nn/modules/conv.py", 548),
    Frame("Conv2d._conv_forward", "torch/nn/modules/conv.py", 543),
)
BACKWARD = (
    *MAIN,
    LOOP,
    Frame("Tensor.backward", "torch/_tensor.py", 623),
    Frame("_engine_run_backward", "torch/autograd/graph.py", 979),
)
PIL_DECODE = (
    *MAIN,
    LOOP,
    Frame("pil_batch", "inference_shapes.py", 110),
    Frame("ImageFile.load", "PIL/ImageFile.py", 300),
)


def count(frames: tuple[Frame, ...], n: int, klass: str) -> StackCount:
    return StackCount(1, 7, "MainThread", frames, n, klass)  # type: ignore[arg-type]


def test_framework_ops_outside_the_model_are_preprocessing_in_its_context() -> None:
    assert classify_stack(TF_RESIZE) == "compute"  # no model seen: as before
    assert classify_stack(TF_RESIZE, model_context=True) == "input"
    assert classify_stack(TORCH_MODEL, model_context=True) == "compute"
    assert classify_stack(BACKWARD, model_context=True) == "compute"  # training, not input
    assert classify_stack(PIL_DECODE) == "input"  # a decoding library: input anywhere


def test_native_work_in_the_loop_body_is_input_in_the_model_context() -> None:
    """A NumPy or tensor call on a loop line holds no GIL: without a model, compute; in the
    loop of a model, its input preparation."""
    numpy_line = (*MAIN, LOOP)
    stacks = [count(numpy_line, 10, "python"), count(TORCH_MODEL, 10, "compute")]
    plain = {s.klass for s in reconcile_gil(stacks, 0.0) if s.frames == numpy_line}
    context = {s.klass for s in reconcile_gil(stacks, 0.0, True) if s.frames == numpy_line}
    assert plain == {"compute"} and context == {"input"}


def test_a_window_sampled_before_the_first_model_call_is_read_in_its_context() -> None:
    """The collector classifies a window as it comes: a loop's first batches are decoded before
    its model is first called (or a slow sampler misses the short calls for a while), so the
    TensorFlow ops and the native work on its loop line read ``compute`` there. Once a later
    window sees the thread inside its model, the summary reads them as its input."""
    numpy_line = (*MAIN, LOOP)
    gil = GilShares({}, 20, 0.0)  # the thread never held the GIL: its loop line ran native code
    raw = [RawStack(TF_RESIZE, 8, 7, "MainThread"), RawStack(numpy_line, 4, 7, "MainThread")]
    early, _ = build_stacks(raw, 1, gil=gil)
    assert {s.klass for s in early} == {"compute"}
    later, _ = build_stacks([*raw, RawStack(TORCH_MODEL, 3, 7, "MainThread")], 1, gil=gil)
    windows = [StackWindow(0.0, 1.0, 12.0, 12, early), StackWindow(1.0, 2.0, 15.0, 15, later)]
    s = summarize(windows)
    assert s is not None
    assert {f.function: f.klass for f in s.functions}["resize_bilinear"] == "input"
    assert s.split["compute"] == 3 / 27 and s.split["input"] == 24 / 27, s.split
    # a thread never seen calling a model keeps what its frames and the GIL said
    alone = summarize(windows[:1])
    assert alone is not None and alone.split["compute"] == 1.0


def test_a_torn_stack_does_not_make_the_request_queue_the_loop() -> None:
    """py-spy reads a running thread's frames without stopping it: a sample taken as the loop
    left ``Queue.get`` for its model can show ``Queue.get`` calling the model. The standard
    library is never the loop, so the loop's waits in the queue stay its input (a serving run
    beside two busy neighbours read 31% of its host time as the loop's own Python)."""
    get = (Frame("Queue.get", "queue.py", 182), Frame("Condition.notify", "threading.py", 382))
    stacks = [
        count(TORCH_MODEL, 8, "compute"),
        count((*MAIN, LOOP, *get, *TORCH_MODEL[-3:]), 1, "compute"),  # torn
        count((*MAIN, LOOP, *get), 16, "python"),
        count(PIL_DECODE, 13, "input"),
    ]
    assert host_counts(stacks) == {"input": 29}
    assert loop_frame(stacks[1].frames) == (LOOP.function, LOOP.filename)
    # a user's script that shares a standard module's name still calls its model
    script = (Frame("<module>", "code.py", 9), *TORCH_MODEL[-3:])
    assert loop_frame(script) == ("<module>", "code.py")


def test_host_classes(tmp_path: Path) -> None:
    src = tmp_path / "loop.py"
    src.write_text(
        "def step(model, x):\n"
        "    loss = float(model(x).sum().item())\n"
        "    print('loss', loss)\n"
        "    for p in model.parameters(): p.data.add_(p.grad, alpha=-0.1)\n"
        "    i = 0\n"
    )

    def at(line: int) -> tuple[Frame, ...]:
        return (*MAIN, Frame("step", str(src), line))

    loops = frozenset({("step", str(src))})
    assert host_class(TORCH_MODEL) is None and host_class(BACKWARD) is None  # compute
    assert host_class(at(2), "python", loops) == "sync"
    assert host_class(at(3), "python", loops) == "python"
    assert host_class(at(4), "python", loops) == "compute"  # a weight update by hand
    assert host_class(at(5), "python", loops) == "python"  # the loop's own statement
    assert host_class(at(5), "input", loops) == "input"  # native work on its line
    assert host_class(PIL_DECODE, "input", loops) == "input"
    assert host_class((), "idle", loops) is None  # nothing to tell what it did


def loop_window(*stacks: StackCount) -> StackWindow:
    """One second of the loop's samples (60 in all)."""
    return StackWindow(1.0, 2.0, 100.0, 60, stacks)


def test_the_host_split_is_the_loop_threads_in_the_windows_it_runs() -> None:
    """Setup before the loop (no model call in its window) stays out of the split; a helper
    thread idle all along is left out of the summary's split and top."""
    setup = StackWindow(
        0.0, 1.0, 100.0, 50, (count((*MAIN, Frame("load", "x.py", 3)), 50, "python"),)
    )
    helper = StackCount(1, 9, "feeder", (Frame("wait", "threading.py", 327),), 60, "idle")
    loop = loop_window(count(TF_RESIZE, 40, "input"), count(TORCH_MODEL, 20, "compute"), helper)
    s = summarize([setup, loop])
    assert s is not None and s.host_split is not None
    assert s.host_samples == 40 and s.host_split["input"] == 1.0
    assert s.idle_threads == 1 and s.idle_thread_samples == 60
    assert all(f.thread != "feeder" for f in s.functions)
    counts = host_counts([count(TF_RESIZE, 4, "input"), count(TORCH_MODEL, 2, "compute")])
    assert dict(counts) == {"input": 4}


def test_the_agents_own_samples_are_not_the_loops_python() -> None:
    """A sample in the agent's hook (its step bookkeeping, innermost) is the profiler's time:
    with its frames dropped it would read as the loop's own line, its Python."""
    hook = (*MAIN, LOOP, Frame("ModelLoop.enter", "sofa_top/agent/model_loop.py", 164))
    loop = loop_window(
        count(PIL_DECODE, 40, "input"), count(TORCH_MODEL, 10, "compute"), count(hook, 10, "python")
    )
    s = summarize([loop])
    assert s is not None and s.host_split is not None
    assert s.host_samples == 40 and s.host_split["input"] == 1.0, s.host_split


PNG_SAVE = (
    Frame("<module>", "super_resolve.py", 38),
    Frame("Image.save", "PIL/Image.py", 2581),
    Frame("_save", "PIL/PngImagePlugin.py", 1460),
    Frame("_save", "PIL/ImageFile.py", 650),
    Frame("_encode_tile", "PIL/ImageFile.py", 679),
)
# Keras predict on one sample: building its data adapter and iterator, inside the call
PREDICT_SETUP = (
    Frame("<module>", "gen.py", 90),
    Frame("TensorFlowTrainer.predict", "keras/src/backend/tensorflow/trainer.py", 560),
    Frame("TFEpochIterator.__next__", "keras/src/trainers/epoch_iterator.py", 141),
    Frame("EpochIterator._enumerate_iterator", "keras/src/trainers/epoch_iterator.py", 110),
    Frame("DatasetV2.__iter__", "tensorflow/python/data/ops/dataset_ops.py", 501),
    Frame("OwnedIterator.__init__", "tensorflow/python/data/ops/iterator_ops.py", 709),
    Frame("OwnedIterator._create_iterator", "tensorflow/python/data/ops/iterator_ops.py", 748),
    Frame("make_iterator", "tensorflow/python/ops/gen_dataset_ops.py", 3476),
)
PREDICT_FETCH = (
    *PREDICT_SETUP[:4],
    Frame("OwnedIterator.__next__", "tensorflow/python/data/ops/iterator_ops.py", 826),
    Frame("iterator_get_next", "tensorflow/python/ops/gen_dataset_ops.py", 3086),
)


def test_writing_a_result_is_host_work_neither_input_nor_compute() -> None:
    """PIL encodes the result (its codec releases the GIL): ``python`` in the stacks, with or
    without a model around; ``output`` in the host split."""
    assert classify_stack(PNG_SAVE) == "python"
    assert classify_stack(PNG_SAVE, model_context=True) == "python"
    stacks = [count(PNG_SAVE, 10, "python"), count(TORCH_MODEL, 10, "compute")]
    assert {s.klass for s in reconcile_gil(stacks, 0.0, True) if s.frames == PNG_SAVE} == {"python"}
    assert host_class(PNG_SAVE, "python") == "output"


def test_a_keras_calls_own_setup_is_not_input_its_fetch_is() -> None:
    assert classify_stack(PREDICT_SETUP, model_context=True) == "python"
    assert classify_stack(PREDICT_FETCH, model_context=True) == "input"
    window = StackWindow(
        0.0,
        1.0,
        100.0,
        40,
        (
            count(PREDICT_SETUP, 30, "python"),
            count(PREDICT_FETCH, 10, "input"),
            count((Frame("<module>", "gen.py", 86),), 2, "python"),
        ),
    )
    s = summarize([window])
    assert s is not None and s.call_setup_share == 0.75


def test_sampling_from_the_output_is_output_work(tmp_path: Path) -> None:
    """A module-level generation loop: the native ``multinomial`` on its line is the host's
    work on the output, not the next input; the file is found from the workload's command
    line (py-spy names it relative to the script's folder)."""
    src = tmp_path / "generate_words.py"
    src.write_text(
        "with torch.no_grad():\n"
        "    for i in range(n):\n"
        "        output, hidden = model(inp, hidden)\n"
        "        word_idx = torch.multinomial(output.exp(), 1)[0]\n"
        "        inp.fill_(word_idx)\n"
    )
    lines = SourceDirs.of(["python", str(src)], str(tmp_path))
    call = (Frame("<module>", src.name, 3), *TORCH_MODEL[2:])
    sample = (Frame("<module>", src.name, 4),)
    fill = (Frame("<module>", src.name, 5),)
    loops = frozenset({("<module>", src.name)})
    assert host_class(sample, "python", loops, lines) == "output"
    assert host_class(fill, "input", loops, lines) == "input"
    stacks = [count(sample, 10, "python"), count(fill, 10, "python"), count(call, 10, "compute")]
    native = {s.frames: s.klass for s in reconcile_gil(stacks, 0.0, True, lines)}
    assert native[sample] == "python" and native[fill] == "input"


def test_copying_the_output_out_is_not_input(tmp_path: Path) -> None:
    """word_language_model's ``output.squeeze().div(t).exp().cpu()`` at module level: a sync
    in the host split, host work (not input) in the stacks."""
    src = tmp_path / "generate_cpu.py"
    src.write_text("output = model(inp)\nweights = output.squeeze().div(0.7).exp().cpu()\n")
    lines = SourceDirs.of(["python", str(src)], str(tmp_path))
    line = (Frame("<module>", src.name, 2),)
    assert host_class(line, "input", frozenset({("<module>", src.name)}), lines) == "sync"
    stacks = [count(line, 10, "python"), count(TORCH_MODEL, 10, "compute")]
    reconciled = reconcile_gil(stacks, 0.0, True, lines)
    assert {s.klass for s in reconciled if s.frames == line} == {"python"}
