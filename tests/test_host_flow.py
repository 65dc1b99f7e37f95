"""The host split's input path and the model's setup (``analysis.dataflow``, ``analysis.host``)
on stacks as py-spy reports them: a line is input only when it prepares what the loop feeds
the model from outside it; a line that reads what the model returned is output; building the
model and loading its weights in the loop is setup."""

from __future__ import annotations

from pathlib import Path

from sofa_top.analysis.dataflow import line_flow, output_lines
from sofa_top.analysis.host import host_counts
from sofa_top.analysis.sources import SourceDirs
from sofa_top.analysis.steps import input_share
from sofa_top.datamodel.samples import Frame, StackCount
from sofa_top.optimizers.advice.compute import compute_recommendations

MODEL = (
    Frame("Module._call_impl", "torch/nn/modules/module.py", 1789),
    Frame("Linear.forward", "torch/nn/modules/linear.py", 134),
)

GENERATE = (
    "def generate(model, idx, steps):\n"  # 1
    "    out = []\n"  # 2
    "    for _ in range(steps):\n"  # 3
    "        idx_cond = idx[:, -64:]\n"  # 4
    "        logits = model(idx_cond)\n"  # 5
    "        logits = logits[:, -1, :] / 0.8\n"  # 6
    "        probs = F.softmax(logits, dim=-1)\n"  # 7
    "        tok = torch.multinomial(probs, 1)\n"  # 8
    "        idx = torch.cat((idx, tok), dim=1)\n"  # 9
    "        out.append(tok)\n"  # 10
    "    return out\n"  # 11
)

READ_THEN_CALL = (
    "def run(model, paths):\n"  # 1
    "    for path in paths:\n"  # 2
    "        x = np.load(path)\n"  # 3
    "        x = torch.from_numpy(x / 255.0)\n"  # 4
    "        x = model(x)\n"  # 5
    "        best = x.argmax()\n"  # 6
    "        results.append(best)\n"  # 7
)


def count(frames: tuple[Frame, ...], n: int, klass: str = "python") -> StackCount:
    return StackCount(1, 7, "MainThread", frames, n, klass)  # type: ignore[arg-type]


def source(tmp_path: Path, name: str, text: str) -> SourceDirs:
    (tmp_path / name).write_text(text)
    return SourceDirs((str(tmp_path),))


def at(function: str, name: str, line: int) -> Frame:
    return Frame(function, name, line)


def test_a_line_says_what_it_assigns_and_reads() -> None:
    flow = line_flow("        logits = logits[:, -1, :] / temperature\n")
    assert flow.assigns and flow.targets == {"logits"}
    assert {"logits", "temperature"} <= flow.reads
    assert line_flow("logits[logits < v[:, [-1]]] = -1").targets == {"logits"}
    assert line_flow("inp.fill_(word_idx)").reads >= {"inp.fill_", "word_idx"}
    assert line_flow("for path in paths:").targets == {"path"}
    assert line_flow("x = foo(a,") == line_flow("")  # a statement split over lines: nothing


def test_sampling_after_the_model_call_is_output_and_feeds_the_loop(tmp_path: Path) -> None:
    """Every line after the call works on the model's output; so does the crop of the context
    at the top of the body, which reads what the loop appended below it (the loop going
    round): a generation loop that reads nothing has no input."""
    lines = source(tmp_path, "gen.py", GENERATE)
    outputs = output_lines({("gen.py", 5)}, {("gen.py", n) for n in (4, 6, 8, 9, 10)}, lines)
    assert outputs == {("gen.py", n) for n in (4, 6, 8, 9, 10)}
    loop = (Frame("<module>", "main.py", 30), at("generate", "gen.py", 5))
    stacks = [count((*loop[:1], at("generate", "gen.py", 5), *MODEL), 40, "compute")]
    for n, k in ((4, 3), (6, 5), (7, 4), (8, 20), (9, 6), (10, 2)):
        stacks.append(count((loop[0], at("generate", "gen.py", n)), k))
    # the interpreter's exit and a finalizer after the loop, in its last window: not the loop
    stacks.append(count((Frame("_shutdown", "threading.py", 1590),), 3, "idle"))
    stacks.append(count((Frame("_del_library", "torch/library.py", 665),), 2))
    counts = host_counts(stacks, lines)
    assert counts == {"output": 40}, counts


def test_a_data_read_before_the_call_is_input(tmp_path: Path) -> None:
    """A name reused for the file's data and the model's result: the read and the transform
    above the call are input, the pick from the result below it output."""
    lines = source(tmp_path, "run.py", READ_THEN_CALL)
    stacks = [
        count((at("run", "run.py", 5), *MODEL), 30, "compute"),
        count((at("run", "run.py", 3), Frame("load", "numpy/lib/npyio.py", 400)), 12, "input"),
        count((at("run", "run.py", 4),), 8, "input"),  # native: the GIL released
        count((at("run", "run.py", 6),), 5),
        count((at("run", "run.py", 7),), 3),
    ]
    counts = host_counts(stacks, lines)
    assert counts["input"] == 20 and counts["output"] == 8, counts


def test_a_model_built_and_loaded_per_item_is_setup(tmp_path: Path) -> None:
    """Construction (module constructors, parameter init) and ``load_state_dict(torch.load(
    ...))`` in the loop are the model's setup, not input; the file's preprocessing is input,
    and the input share is of the host time with the setup in it."""
    text = (
        "def infer(path):\n"  # 1
        "    model = Net()\n"  # 2
        "    model.load_state_dict(torch.load(WEIGHTS))\n"  # 3
        "    x = preprocess(path)\n"  # 4
        "    return model(x).argmax()\n"  # 5
    )
    lines = source(tmp_path, "item.py", text)
    main = Frame("<module>", "item.py", 9)
    build = (
        main,
        at("infer", "item.py", 2),
        Frame("Net.__init__", "item.py", 20),
        Frame("Linear.__init__", "torch/nn/modules/linear.py", 106),
        Frame("Linear.reset_parameters", "torch/nn/modules/linear.py", 117),
        Frame("kaiming_uniform_", "torch/nn/init.py", 456),
    )
    load = (
        main,
        at("infer", "item.py", 3),
        Frame("load", "torch/serialization.py", 1470),
        Frame("_load", "torch/serialization.py", 1990),
    )
    prep = (main, at("infer", "item.py", 4), Frame("preprocess", "item.py", 30))
    stacks = [
        count((main, at("infer", "item.py", 5), *MODEL), 50, "compute"),
        count(build, 20),
        count(load, 10),
        count(prep, 10, "input"),
    ]
    counts = host_counts(stacks, lines)
    assert counts == {"setup": 30, "input": 10}, counts
    split = {"input": 0.25, "setup": 0.75, "python": 0.0, "sync": 0.0, "output": 0.0}
    assert input_share(split, 40) == 0.25


def test_a_model_built_per_step_is_told_to_be_built_once() -> None:
    """The compute advice names the setup from a tenth of the step up, before the compiler."""
    first = compute_recommendations("torch", rebuild=0.3)[0].text
    assert first.startswith("build the model once, outside the loop: 30%"), first
    assert "load_state_dict" in first
    keras = compute_recommendations("tensorflow", keras=True, rebuild=0.2)[0].text
    assert "load_weights" in keras, keras
    assert not any(
        "build the model" in r.text for r in compute_recommendations("torch", rebuild=0.05)
    )


def test_a_model_call_inside_the_building_is_setup() -> None:
    """Keras' ``Sequential`` calls its layers on its ``Input`` to build them: setup, where a
    module built inside a model's forward stays the model's."""
    infer = (Frame("<module>", "k.py", 9), at("infer", "k.py", 3), at("build", "k.py", 20))
    building = (
        *infer,
        Frame("Sequential.__init__", "keras/src/models/sequential.py", 76),
        Frame("Sequential._maybe_rebuild", "keras/src/models/sequential.py", 150),
        Frame("Layer.__call__", "keras/src/layers/layer.py", 900),
    )
    call = (Frame("<module>", "k.py", 9), at("infer", "k.py", 5), *MODEL)
    inside = (*call, Frame("Linear.__init__", "torch/nn/modules/linear.py", 106))
    stacks = [count(call, 20, "compute"), count(building, 6), count(inside, 4, "compute")]
    assert host_counts(stacks) == {"setup": 6}
