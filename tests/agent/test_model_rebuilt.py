"""The model-call clock follows its lead model by class and call site
(``sofa_top.agent.model_loop``): a model rebuilt for each item is one loop, an ensemble's
members (the same class, called at the same place) are not each a lead."""

from __future__ import annotations

from collections import Counter

from sofa_top.agent.core import Agent
from sofa_top.agent.model_loop import ModelLoop, loops
from sofa_top.agent.settings import AgentSettings
from sofa_top.agent.spans import EVAL, FORWARD

SRC = "torch-model-call"
SITE = ("infer", 12)  # the code location of the outermost call, as the hook gives it


class Net:
    """A model, as the hooks see it: an object with an identity and a class."""


class Other:
    """A model of another class."""


def setup() -> tuple[Agent, ModelLoop]:
    agent = Agent(AgentSettings(), None)
    return agent, loops(agent)[0]


def call(loop: ModelLoop, model: object, site: object = SITE) -> None:
    token = loop.enter(model, SRC, FORWARD, EVAL, (), None, site)
    if token is not None:
        loop.leave(token)


def steps(agent: Agent) -> int:
    return Counter(r.source for r in agent._steps)[SRC]


def test_a_model_rebuilt_per_item_is_one_loop() -> None:
    """40 items, each a new model (kept alive: the previous one is not yet freed): 39 steps."""
    agent, loop = setup()
    kept = []
    for _ in range(40):
        kept.append(Net())
        call(loop, kept[-1])
    assert steps(agent) == 39


def test_without_its_call_site_a_new_model_is_not_the_lead() -> None:
    """The same with no call site known (another hook): identity alone, as before."""
    agent, loop = setup()
    kept = []
    for _ in range(10):
        kept.append(Net())
        call(loop, kept[-1], None)
    assert steps(agent) == 0


def test_an_ensemble_is_a_step_per_round_not_per_member() -> None:
    """Three members of one class called at one place each round: after the first round
    (each new there), the last member called leads and each round is one step."""
    agent, loop = setup()
    members = [Net(), Net(), Net()]
    for _ in range(10):
        for m in members:
            call(loop, m)
    assert 9 <= steps(agent) <= 11, steps(agent)


def test_another_class_at_the_same_place_is_not_the_lead_rebuilt() -> None:
    agent, loop = setup()
    net = Net()
    for _ in range(6):
        call(loop, net)
        call(loop, Other())  # a new object each time, of another class: no lead
    assert steps(agent) == 5
