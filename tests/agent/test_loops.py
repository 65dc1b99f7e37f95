"""Which clock marks a torch loop's steps (``sofa_top.agent.loops``), event by event.

The rules on the loop patterns the real workloads in ``tests/test_loop_shapes.py`` cannot all
show (a GAN, gradient accumulation, a DataLoader on another thread): the real ``TorchLoop`` and
``Agent`` (without a connection, so its queue keeps what the clocks push).
"""

from __future__ import annotations

import threading
from collections import Counter

from sofa_top.agent.core import Agent
from sofa_top.agent.loops import TorchLoop
from sofa_top.agent.settings import AgentSettings


class Opt:
    """An optimizer, as the hooks see it: an object with an identity."""


def setup() -> tuple[Agent, TorchLoop]:
    agent = Agent(AgentSettings(), None)
    return agent, TorchLoop(agent)


def sources(agent: Agent) -> Counter[str]:
    return Counter(record.source for record in agent._steps)


def step(loop: TorchLoop, opt: Opt, t: float, closure: bool = False) -> None:
    loop.optimizer_started(t, closure)
    loop.optimizer_stepped(opt, t + 0.001)


def test_a_dataloader_fed_loop_leaves_the_optimizer_quiet() -> None:
    agent, loop = setup()
    opt = Opt()
    for i in range(10):
        loop.fetched()
        loop.backward_done(i + 0.5)
        step(loop, opt, i + 0.6)
    assert sources(agent) == Counter()


def test_gradient_accumulation_and_a_gan_stay_on_the_dataloader() -> None:
    agent, loop = setup()
    d, g = Opt(), Opt()
    for i in range(10):
        for _ in range(4):  # four fetches per optimizer step
            loop.fetched()
            loop.backward_done(i)
        step(loop, d, i + 0.5)
        step(loop, g, i + 0.7)  # a second optimizer every iteration
    assert sources(agent) == Counter()


def test_several_optimizers_per_iteration_count_iterations() -> None:
    agent, loop = setup()
    layers = [Opt(), Opt(), Opt()]
    for i in range(10):
        for k, opt in enumerate(layers):
            loop.backward_done(i + k / 10)
            step(loop, opt, i + k / 10 + 0.01)
    assert sources(agent) == Counter({"torch-optimizer": 9})  # the first only starts it


def test_layers_trained_one_after_another_hand_over_the_lead() -> None:
    agent, loop = setup()
    t = 0.0
    for opt in (Opt(), Opt(), Opt()):
        for _ in range(20):
            t += 1
            step(loop, opt, t)
    # 60 steps: the clock starts at the first, and each new layer's first step is not counted
    assert sources(agent) == Counter({"torch-optimizer": 57})


def test_a_dataloader_iterated_up_front_hands_over_to_the_optimizer() -> None:
    agent, loop = setup()
    for _ in range(32):
        loop.fetched()
    opt = Opt()
    for i in range(50):
        step(loop, opt, i)
    assert sources(agent) == Counter({"torch-optimizer": 48})


def test_a_dataloader_on_another_thread_does_not_silence_the_loop() -> None:
    agent, loop = setup()
    opt = Opt()
    for i in range(20):
        t = threading.Thread(target=loop.fetched)  # a background prefetcher
        t.start()
        t.join()
        step(loop, opt, i)
    assert sources(agent) == Counter({"torch-optimizer": 19})


def test_a_closure_step_is_one_step_and_starts_at_step() -> None:
    agent, loop = setup()
    opt = Opt()
    for i in range(5):
        loop.optimizer_started(10.0 * i, closure=True)
        for k in range(20):  # the closure's forward/backward passes, inside step()
            loop.backward_done(10.0 * i + k * 0.1)
        loop.optimizer_stepped(opt, 10.0 * i + 9.0)
    records = list(agent._steps)
    assert Counter(r.source for r in records) == Counter({"torch-optimizer": 5})
    assert records[0].start == 0.0 and records[0].end == 9.0  # the first step spans its step()


def test_hand_written_updates_are_counted_by_backward() -> None:
    agent, loop = setup()
    for i in range(10):
        loop.backward_done(float(i))
    assert sources(agent) == Counter({"torch-backward": 9})
