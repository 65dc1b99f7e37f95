"""``sofa-top compare``: re-run a command under optimizer configurations and compare throughput.

The parts, in the order a comparison uses them: ``configs`` (what each configuration asks the
agent for), ``record`` (one headless run), ``analyze`` (read it back), ``summary`` (per
configuration, the winner, the code change), ``runner`` (the interleaved repeats, the baseline's
diagnosis and the parallelism search), ``progress`` (typed events while it runs) and ``results``
(what it returns; ``compare.schema.json`` is its JSON schema).
"""

from sofa_top.optimizers.compare.analyze import analyze_session
from sofa_top.optimizers.compare.configs import configs, default_configs, plan
from sofa_top.optimizers.compare.progress import (
    CompareEvent,
    Diagnosed,
    OnProgress,
    RunFinished,
    RunStarted,
    SearchFinished,
    SearchLevelFinished,
    SearchLevelStarted,
)
from sofa_top.optimizers.compare.record import record_one
from sofa_top.optimizers.compare.results import CompareResult, ConfigResult, Flag
from sofa_top.optimizers.compare.runner import run_compare
from sofa_top.optimizers.compare.summary import changes_for

__all__ = [
    "CompareEvent",
    "CompareResult",
    "ConfigResult",
    "Diagnosed",
    "Flag",
    "OnProgress",
    "RunFinished",
    "RunStarted",
    "SearchFinished",
    "SearchLevelFinished",
    "SearchLevelStarted",
    "analyze_session",
    "changes_for",
    "configs",
    "default_configs",
    "plan",
    "record_one",
    "run_compare",
]
