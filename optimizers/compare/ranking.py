"""Whether a comparison's ranking can be trusted: the noise of its repeats against the
differences between its configurations (``compare --json``'s ``ranking``).

Each configuration's effect is already decided against the baseline's interval
(``summary.effect``); the ranking is clear when every configuration that could be compared was
clearly faster or clearly slower. It is not when one's interval still overlaps the baseline's,
or when the baseline's own runs spread so wide (``NOISY_SPREAD``) that only a difference larger
than the noise could have been seen: then the report says so, with the spread, and what would
settle it (more rounds, a quieter machine).
"""

from __future__ import annotations

from collections.abc import Sequence

from sofa_top.optimizers.compare.results import ConfigResult, Ranking
from sofa_top.optimizers.headroom import Diagnosis
from sofa_top.optimizers.measures import median_interval

# The baseline's fastest run over its slowest beyond which the machine's noise swamps the
# toggles' usual effects (a thread cap or a prefetch: 1.1-2x): runs of the same code that far
# apart are measuring the machine's load, not the workload
NOISY_SPREAD = 1.5
# what other processes keep busy (cores) beyond which the machine is named as the noise's source
BUSY_MACHINE = 0.5


def _rates(cr: ConfigResult) -> list[float]:
    return [o.rate for o in cr.outcomes if o.rate is not None and o.rate > 0]


def _spread(vals: Sequence[float]) -> float | None:
    return max(vals) / min(vals) if len(vals) >= 2 and min(vals) > 0 else None


def _settle(runs: int, diag: Diagnosis | None) -> str:
    """What would settle it: more rounds, and a quieter machine when others load it."""
    more = f"more rounds (--repeats {max(3, 2 * runs)})"
    others = None if diag is None else diag.others_cores
    if others is not None and others >= BUSY_MACHINE:
        return f"{more}, or a quieter machine (other processes kept {others:.1f} cores busy)"
    return f"{more}, or a quieter machine"


def ranking_of(runs: Sequence[ConfigResult], diag: Diagnosis | None) -> Ranking:
    """The comparison's ``Ranking`` from its summarized configurations (``diag``: the
    baseline's diagnosis, for what other processes kept busy)."""
    base = next((r for r in runs if r.config == "baseline"), None)
    base_rates = [] if base is None else _rates(base)
    if not base_rates:
        return Ranking(False, "no baseline throughput to rank against")
    spread = _spread(base_rates)
    compared = [r for r in runs if r.effect is not None]
    if not compared:
        return Ranking(False, "no configuration changed anything to rank", spread)
    unclear = [r for r in compared if r.effect == "unclear"]
    lo, hi = median_interval(base_rates) or (min(base_rates), max(base_rates))
    unit = base.throughput.unit if base is not None else "steps/s"
    noise = (
        f"the baseline's {len(base_rates)} runs spanned a factor of {spread:.1f} "
        f"({min(base_rates):.4g}-{max(base_rates):.4g} {unit})"
        if spread is not None
        else f"the baseline ran {len(base_rates)} time(s)"
    )
    settle = _settle(len(base_rates), diag)
    if unclear:
        names = ", ".join(
            f"{r.config} x{r.speedup:.2f}" if r.speedup is not None else r.config for r in unclear
        )
        return Ranking(
            False,
            f"the noise is too wide to rank: {names} within the baseline's interval "
            f"({lo:.4g}-{hi:.4g} {unit}); {noise}; settle it with {settle}",
            spread,
        )
    if spread is not None and spread > NOISY_SPREAD:
        return Ranking(
            True,
            f"every configuration is clear of the baseline's interval, though {noise}: only "
            f"differences wider than that noise show; {settle} would show smaller ones",
            spread,
        )
    return Ranking(True, "every configuration is clear of the baseline's interval", spread)
