"""The model-call clock (``sofa_top.agent.model_loop``), call by call.

The loop shapes a real workload shows one at a time (``tests/test_inference_shapes.py``), and
those it cannot show on demand (an attach in the middle of a forward, a predict that fetches
its own batch, two threads at once): the real ``ModelLoop``, ``TorchLoop`` and ``Agent``
(without a connection, so its queue keeps what the clocks push).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from sofa_top.agent.core import Agent
from sofa_top.agent.model_loop import ModelLoop, loops
from sofa_top.agent.settings import AgentSettings
from sofa_top.agent.spans import EVAL, FORWARD, SEEN, TRAIN

SRC = "torch-model-call"


class Model:
    """A model, as the hooks see it: an object with an identity."""


def setup() -> tuple[Agent, ModelLoop]:
    agent = Agent(AgentSettings(), None)
    model, _torch = loops(agent)
    return agent, model


def call(loop: ModelLoop, model: object, flags: int = 0, work_s: float = 0.0) -> None:
    """One outermost call of ``model`` (``work_s`` of compute inside it)."""
    token = loop.enter(model, SRC, FORWARD, flags, ())
    if work_s:
        time.sleep(work_s)
    if token is not None:
        loop.leave(token)


def sources(agent: Agent) -> Counter[str]:
    return Counter(r.source for r in agent._steps)


def test_an_inference_loop_is_a_step_per_call_with_its_host_time() -> None:
    agent, loop = setup()
    net = Model()
    for _ in range(6):
        time.sleep(0.004)  # the loop body prepares the next input
        call(loop, net, EVAL, work_s=0.001)
    rows = list(agent._steps)
    assert sources(agent) == Counter({SRC: 5})  # the first call only starts the clock
    for r in rows:
        start, end, host, flags = r.start, r.end, r.wait, r.flags
        assert 0.003 <= host < end - start, r  # the host time, not the call's compute
        assert (
            (r.forward or 0) > 0 and flags & EVAL and flags & SEEN
        )  # its forward span, and no training


def test_a_criterion_between_the_calls_never_leads() -> None:
    agent, loop = setup()
    net, criterion = Model(), Model()
    for _ in range(5):
        call(loop, net)
        call(loop, criterion)
    assert sources(agent) == Counter({SRC: 4})


def test_a_stale_lead_hands_over_even_with_a_criterion_between() -> None:
    """Attached in the middle of a forward, the first call the hook saw was a submodule's;
    the model, called twice since, takes the lead though a criterion runs between its calls."""
    agent, loop = setup()
    submodule, net, criterion = Model(), Model(), Model()
    call(loop, submodule)  # the one call of it the hook ever sees
    for _ in range(6):
        call(loop, net)
        call(loop, criterion)
    assert sources(agent)[SRC] >= 3, agent._steps


def test_a_training_iteration_is_one_step_however_often_its_model_runs() -> None:
    """A recurrent network called per character, then backward and an optimizer step: one
    step per optimizer step, the lead model's calls after it all compute. (The first
    iteration, before any backward says the loop trains, marks its calls as an inference
    loop's would.)"""
    agent, loop = setup()
    torch = loop.torch
    assert torch is not None
    rnn, opt = Model(), object()

    def iteration() -> None:
        for _char in range(5):
            call(loop, rnn, TRAIN)
        torch.backward_done(time.perf_counter())
        torch.optimizer_started(time.perf_counter(), False)
        torch.optimizer_stepped(opt, time.perf_counter())

    iteration()
    first = len(agent._steps)
    for _ in range(5):
        iteration()
    assert len(agent._steps) - first == 5
    assert "torch-optimizer" not in sources(agent)


def test_an_evaluation_call_in_training_is_its_own_step() -> None:
    agent, loop = setup()
    torch = loop.torch
    assert torch is not None
    net, opt = Model(), object()
    for _ in range(4):
        call(loop, net, TRAIN)
        torch.backward_done(time.perf_counter())
        torch.optimizer_started(time.perf_counter(), False)
        torch.optimizer_stepped(opt, time.perf_counter())
    before = len(agent._steps)
    for _ in range(3):
        call(loop, net, EVAL)  # model.eval() + no_grad: no optimizer step will end them
    evals = list(agent._steps)[before:]
    assert len(evals) == 3 and all(r.flags & EVAL and not r.flags & TRAIN for r in evals[1:])


def test_a_clock_that_sees_input_takes_the_loop() -> None:
    """A DataLoader fetch before each call marks the steps: the model-call clock stays quiet."""
    agent, loop = setup()
    net = Model()
    for _ in range(5):
        agent.fed_now()
        call(loop, net, EVAL)
    assert sources(agent) == Counter()


def test_a_model_called_inside_a_fetch_is_input_work() -> None:
    agent, loop = setup()
    net = Model()
    agent.tls.fetching = 1
    try:
        for _ in range(4):
            call(loop, net, EVAL)
    finally:
        agent.tls.fetching = 0
    assert sources(agent) == Counter()


def test_a_call_that_fetches_its_own_batch_holds_that_step() -> None:
    """Keras ``predict(x)`` per request fetches its one batch inside the call: that step is
    the call's own, dropped; ``predict(ds)`` over many batches: those are the steps."""
    agent, loop = setup()
    net = Model()
    inner = agent.clock("tf-eager")

    def predict(batches: int) -> None:
        agent.tls.depth = 1  # (the hook's own frame sets it around the call)
        token = loop.enter(net, SRC, FORWARD, EVAL, ())
        it = object()
        for _ in range(batches + 1):
            t = time.perf_counter()
            inner.fetched(it, t, t)
        inner.exhausted(it, time.perf_counter(), time.perf_counter())
        agent.tls.depth = 0
        assert token is not None
        loop.leave(token)

    for _ in range(5):
        predict(0)  # one fetch and the end of the data: one inner step, the call's own
    assert sources(agent) == Counter({SRC: 4})
    agent._steps.clear()
    predict(10)  # a loop inside the call
    counts = sources(agent)
    assert counts["tf-eager"] == 11 and counts[SRC] <= 1, counts


def test_calls_from_several_threads_at_once_stop_the_clock() -> None:
    _agent, loop = setup()
    net = Model()
    inside, go = threading.Event(), threading.Event()

    def owner() -> None:
        token = loop.enter(net, SRC, FORWARD, EVAL, ())
        inside.set()
        go.wait(10)
        assert token is not None
        loop.leave(token)

    t = threading.Thread(target=owner)
    t.start()
    inside.wait(10)
    for _ in range(3):
        call(loop, net, EVAL)  # another thread while the loop's is inside its call
    go.set()
    t.join()
    assert loop.off is not None and "several threads" in loop.off
    call(loop, net)
    assert loop.enter(net, SRC, FORWARD, 0, ()) is None  # stopped for good


def test_another_clocks_steps_between_the_calls_restart_it() -> None:
    """Keras ``fit`` (its own clock) between two generation loops of ``predict`` calls: no
    model-call step spans the fit."""
    agent, loop = setup()
    net = Model()
    fit = agent.clock("keras-fit")
    for _ in range(3):
        call(loop, net, EVAL)
    agent.tls.depth = 1  # inside fit (the hook nests its calls)
    for _ in range(3):
        t = time.perf_counter()
        fit.span(fit, t, t, t + 0.5)  # half a second of training each
    agent.tls.depth = 0
    for _ in range(3):
        call(loop, net, EVAL)
    model_steps = [r for r in agent._steps if r.source == SRC]
    assert len(model_steps) == 2 + 2  # each run's first call starts the clock again
    assert all(r.end - r.start < 0.5 for r in model_steps), model_steps


def test_a_model_called_several_times_per_fetch_makes_no_steps_of_its_own() -> None:
    """A DataLoader-style fetch, then the model four times on the batch: past the first
    batch (the second fetch shows the pattern), the fetching clock's steps alone; once the
    fetches stop for good, the model's calls are steps again."""
    agent, loop = setup()
    fetch = agent.clock("torch-dataloader")
    net, it = Model(), object()
    for _ in range(6):
        t0 = time.perf_counter()
        fetch.fetched(it, t0, time.perf_counter())
        for _ in range(4):
            call(loop, net, EVAL)
    assert sources(agent) == Counter({"torch-dataloader": 5, SRC: 2}), sources(agent)
    time.sleep(1.05)  # no fetch for longer than the feeding clock's hold
    for _ in range(5):
        call(loop, net, EVAL)
    assert sources(agent)[SRC] >= 3, sources(agent)


def test_a_resumed_iterator_carries_its_first_fetch_into_a_step() -> None:
    """``persistent_workers``: each epoch fetches from the same iterator again after it ran
    out; that first fetch's wait is in the epoch's first step, which starts at the fetch."""
    agent = Agent(AgentSettings(), None)
    clock = agent.clock("torch-dataloader")
    it = object()
    t, starts = 100.0, []
    for _epoch in range(2):
        starts.append(t)
        for k in range(3):
            clock.fetched(it, t, t + (0.2 if k == 0 else 0.01))
            t += 0.3
        clock.exhausted(it, t, t + 0.001)
        t += 0.1
    rows = list(agent._steps)
    # epoch 1: 2 steps between fetches and one to the end; epoch 2: the same, its first
    # step from its first fetch's start, carrying that fetch's 0.2 s and the next one's
    assert len(rows) == 6, rows
    resumed = rows[3]
    assert abs(resumed.start - starts[1]) < 1e-9 and abs(resumed.wait - 0.21) < 1e-9, resumed
    assert abs(rows[0].wait - 0.01) < 1e-9, rows[0]  # a new iterator's first fetch: no step
