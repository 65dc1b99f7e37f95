"""compare's ``ranking``: whether the noise of the repeats lets the configurations be ranked,
in the JSON, the CLI text and the optimizer screen (pure: outcomes built here, no processes)."""

from __future__ import annotations

import io
from collections.abc import Sequence

from conftest import validate_compare_json
from rich.console import Console

from sofa_top.agent.toggles import THREADS, Toggle, toggle_of
from sofa_top.cli.compare import render_compare
from sofa_top.optimizers.compare import CompareResult, ConfigResult, configs
from sofa_top.optimizers.compare.ranking import NOISY_SPREAD, ranking_of
from sofa_top.optimizers.compare.summary import best_config, no_best_note, rates, summarize
from sofa_top.optimizers.compare.text import ranking_line
from sofa_top.optimizers.measures import RunOutcome, median
from sofa_top.tui.optimizer_screen import winner_text


def _run(name: str, rate_list: Sequence[float], applied: tuple[str, ...] = ()) -> ConfigResult:
    toggles: tuple[Toggle, ...] = tuple(t for a in applied if (t := toggle_of(a)) is not None)
    outs = [
        RunOutcome(
            f"{name}-{i}.sofa", r, "samples/s", None, "compute-bound", toggles, (), (), False, None
        )
        for i, r in enumerate(rate_list)
    ]
    spec = configs()[name]
    return ConfigResult(name, spec.with_(THREADS, 1) if spec.threads is not None else spec, outs)


def _compare(base: Sequence[float], threads: Sequence[float]) -> CompareResult:
    """A summarized two-configuration comparison, as ``run_compare`` builds it."""
    b, t = _run("baseline", base), _run("threads", threads, ("threads",))
    for cr in (b, t):
        summarize(cr, median(list(base)), None, None, None, rates(b))
    runs = [b, t]
    best = best_config(runs)
    result = CompareResult(
        ["python", "x.py"], 3, None, 10.0, 5, runs, best, [],
        rounds=len(base), best_note=None if best else no_best_note(runs),
    )  # fmt: skip
    result.ranking = ranking_of(runs, None)
    return result


def _text(result: CompareResult) -> str:
    buf = io.StringIO()
    render_compare(result, Console(file=buf, width=200, color_system=None))
    return " ".join(buf.getvalue().split())  # the console wraps long lines


def test_baseline_spanning_a_factor_of_20_is_not_ranked() -> None:
    """The issue's case: the baseline's repeats spanned a factor of 20; a configuration whose
    runs sit inside that spread cannot be ranked, and every report says so with the cure."""
    r = _compare([1.0, 20.0, 6.0], [4.0, 9.0, 15.0])
    assert r.ranking is not None and r.ranking.clear is False
    assert r.ranking.baseline_spread == 20.0
    why = r.ranking.why
    assert "factor of 20.0" in why and "threads" in why
    assert "more rounds (--repeats 6)" in why and "quieter machine" in why
    js = r.to_json()
    validate_compare_json(js)
    assert js["ranking"] == {"clear": False, "why": why, "baseline_spread": 20.0}
    assert " ".join(f"ranking: not clear: {why}".split()) in _text(r)
    line = ranking_line(r)
    assert line is not None
    assert any(line in str(p) for p in winner_text(r).renderables)  # type: ignore[attr-defined]


def test_clear_separation_is_ranked_and_nothing_extra_is_said() -> None:
    r = _compare([98.0, 100.0, 102.0], [295.0, 300.0, 310.0])
    assert r.best == "threads"
    assert r.ranking is not None and r.ranking.clear is True
    assert r.ranking.baseline_spread is not None and r.ranking.baseline_spread < NOISY_SPREAD
    validate_compare_json(r.to_json())
    assert r.to_json()["ranking"]["clear"] is True
    assert ranking_line(r) is None and "ranking:" not in _text(r)


def test_clear_through_wide_noise_says_only_large_differences_show() -> None:
    """Separated intervals are a ranking even through noise, but the noise is named."""
    r = _compare([10.0, 30.0, 20.0], [300.0, 400.0, 350.0])
    assert r.ranking is not None and r.ranking.clear is True
    assert "factor of 3.0" in r.ranking.why and "only differences wider" in r.ranking.why
    assert ranking_line(r) == f"ranking: clear: {r.ranking.why}"


def test_too_few_runs_are_not_ranked_and_a_lone_baseline_has_nothing_to_rank() -> None:
    two = _compare([100.0, 101.0], [300.0, 305.0])  # 2 runs: 1 in 6 by chance
    assert two.ranking is not None and two.ranking.clear is False
    assert "more rounds (--repeats 4)" in two.ranking.why
    alone = _run("baseline", [100.0, 101.0, 99.0])
    summarize(alone, 100.0, None, None, None, rates(alone))
    lone = ranking_of([alone], None)
    assert lone.clear is False and "no configuration" in lone.why


def test_a_toggle_applied_in_any_process_of_the_job_applied() -> None:
    """A launcher that never imports torch (and multiprocessing's resource tracker) report
    last; the spawned trainers applied ``threads``: it applied, and one toggle that applied
    nowhere carries the busiest trainer's reason, not the launcher's."""
    from sofa_top.datamodel.samples import Event, StepSample
    from sofa_top.optimizers.compare.analyze import _Stored, _toggles

    never = "not a TF or PyTorch job: the workload never imported tensorflow or torch"

    def report(ts: float, pid: int, applied: list[str], skipped: list[list[str]]) -> Event:
        data: dict[str, object] = {"pid": pid, "hooks_applied": applied, "hooks_skipped": skipped}
        return Event(ts, "agent", "info", data)

    events = [
        report(1.0, 11, ["opt:threads"], [["opt:prefetch", "no DataLoader in the loop"]]),
        report(1.1, 12, ["opt:threads"], [["opt:prefetch", "no DataLoader in the loop"]]),
        report(2.0, 10, [], [["opt:threads", never], ["opt:prefetch", never]]),
        report(2.1, 13, [], [["opt:threads", never], ["opt:prefetch", never]]),
    ]
    steps = [
        StepSample(float(i), i, i - 0.1, 0.1, 0.0, "torch-optimizer", pid=11) for i in range(9)
    ]
    steps += [
        StepSample(float(i), i, i - 0.1, 0.1, 0.0, "torch-optimizer", pid=12) for i in range(5)
    ]
    stored = _Stored(steps, events, [], [], {}, [], [])
    spec = configs()["threads"].with_(THREADS, 1).with_("prefetch", True)
    applied, not_applied = _toggles(stored, spec)
    assert applied == ("threads",)
    assert not_applied == (("prefetch", "no DataLoader in the loop"),)
