"""The configurations ``compare`` knows: each is the set of toggles a run asks the agent for,
derived from the toggle table (``agent.toggles.TABLE``): one per toggle, under the name people
type, plus ``baseline``, ``all`` and ``max-autotune``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sofa_top.agent.toggles import (
    AUTO_THREADS,
    COMPILE_MODE,
    OptimizeSpec,
    Toggle,
    row_of,
    rows,
    toggle_name,
    toggle_of,
)
from sofa_top.datamodel.errors import UserError

__all__ = ["AUTO_THREADS", "auto_threads", "check_configs", "config_table", "configs", "plan"]


def configs() -> dict[str, OptimizeSpec]:
    """The known configurations, in the table's order."""
    table = {"baseline": OptimizeSpec()}
    table |= {r.name: spec_of([r.key]) for r in rows(gpu=False)}
    table["all"] = spec_of(all_toggles())
    table |= {r.name: spec_of([r.key]) for r in rows(gpu=True)}
    table["max-autotune"] = OptimizeSpec().with_(COMPILE_MODE, "max-autotune")  # may take minutes
    return table


def default_configs() -> tuple[str, ...]:
    """What ``compare`` runs when not told: the baseline, each CPU toggle of ``all``, ``all``
    (threads is tried on its own, the GPU ones are asked for by name: on a CPU loop they do
    nothing or slow down)."""
    return ("baseline", *(toggle_name(t) for t in all_toggles()), "all")


def gpu_configs() -> tuple[str, ...]:
    """The configurations offered where the workload uses CUDA."""
    return tuple(r.name for r in rows(gpu=True))


def all_toggles() -> tuple[Toggle, ...]:
    """The toggles ``all`` turns on."""
    return tuple(r.key for r in rows() if r.in_all)


def auto_threads(cores: int, others_cores: float | None, trainers: int = 1) -> int:
    """Threads for the ``threads`` configuration: the cores other processes left free, shared
    among the job's ``trainers`` (each of its processes that steps a loop gets its own pool)."""
    free = cores - (others_cores or 0.0)
    return max(1, min(cores, int(free / max(1, trainers) + 0.25)))


def config_table(extra: Mapping[str, OptimizeSpec] | None = None) -> dict[str, OptimizeSpec]:
    """The known configurations plus ``extra`` ones (which may override them)."""
    return {**configs(), **(extra or {})}


def check_configs(configs: Sequence[str], table: Mapping[str, OptimizeSpec]) -> None:
    """One clear line for a configuration nobody defined."""
    for c in configs:
        if c not in table:
            raise UserError(f"unknown configuration {c!r} (known: {', '.join(table)})")


def spec_of(toggles: Sequence[Toggle]) -> OptimizeSpec:
    """The spec that turns on ``toggles`` with their table defaults (threads: picked by
    compare, compile_mode: reduce-overhead)."""
    return OptimizeSpec({t: r.default for t in toggles if (r := row_of(t)) is not None})


def plan(names: Sequence[str]) -> tuple[list[str], dict[str, OptimizeSpec]]:
    """The configurations to run for the chosen toggles (by the names people type), and the
    extra ones to define: baseline, one per toggle, and (two or more chosen) their
    combination, named ``all`` when it is ``all``'s toggles."""
    chosen = {t for t in (toggle_of(n) for n in names) if t is not None}
    ordered = [r.key for r in rows() if r.key in chosen]
    configs = ["baseline", *(toggle_name(t) for t in ordered)]
    extra: dict[str, OptimizeSpec] = {}
    if tuple(ordered) == all_toggles():
        configs.append("all")
    elif len(ordered) > 1:
        name = "+".join(toggle_name(t) for t in ordered)
        extra[name] = spec_of(ordered)
        configs.append(name)
    return configs, extra
