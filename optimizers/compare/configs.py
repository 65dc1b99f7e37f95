"""The configurations ``compare`` knows: each is the set of toggles a run asks the agent for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sofa_top.agent.toggles import OptimizeSpec, PrefetchOptions, Toggle, toggle_name, toggle_of
from sofa_top.model.errors import UserError

# ``threads`` at 0 is "pick it": compare sets the cores the baseline's run was left by other
# processes (``auto_threads``) before it runs the configuration.
AUTO_THREADS = 0
CONFIGS: dict[str, OptimizeSpec] = {
    "baseline": OptimizeSpec(),
    "prefetch": OptimizeSpec(prefetch=PrefetchOptions()),
    "xla": OptimizeSpec(xla=True),
    "depth-first": OptimizeSpec(depth_first=True),
    "threads": OptimizeSpec(threads=AUTO_THREADS),
    "all": OptimizeSpec(xla=True, prefetch=PrefetchOptions(), depth_first=True),
    # GPU loops (PyTorch on CUDA); not in the defaults: on a CPU loop they do nothing or slow down
    "pin-memory": OptimizeSpec(pin_memory=True),
    "bf16": OptimizeSpec(bf16=True),
    "compile-mode": OptimizeSpec(compile_mode="reduce-overhead"),  # CUDA graphs
    "max-autotune": OptimizeSpec(compile_mode="max-autotune"),  # may compile for minutes
}
DEFAULT_CONFIGS = ("baseline", "prefetch", "xla", "depth-first", "all")
GPU_CONFIGS = ("pin-memory", "bf16", "compile-mode")
# as configurations are listed; "all" is every CPU toggle but threads (threads is tried on its
# own, the GPU ones are asked for by name)
ORDER: tuple[Toggle, ...] = (
    "prefetch", "xla", "depth_first", "threads", "pin_memory", "bf16", "compile_mode",
)  # fmt: skip
ALL: tuple[Toggle, ...] = ("prefetch", "xla", "depth_first")


def auto_threads(cores: int, others_cores: float | None) -> int:
    """Threads for the ``threads`` configuration: the cores other processes left free."""
    free = cores - (others_cores or 0.0)
    return max(1, min(cores, int(free + 0.25)))


def config_table(extra: Mapping[str, OptimizeSpec] | None = None) -> dict[str, OptimizeSpec]:
    """The known configurations plus ``extra`` ones (which may override them)."""
    return {**CONFIGS, **(extra or {})}


def check_configs(configs: Sequence[str], table: Mapping[str, OptimizeSpec]) -> None:
    """One clear line for a configuration nobody defined."""
    for c in configs:
        if c not in table:
            raise UserError(f"unknown configuration {c!r} (known: {', '.join(table)})")


def spec_of(toggles: Sequence[Toggle]) -> OptimizeSpec:
    """The spec that turns on ``toggles`` with their defaults (compile_mode: reduce-overhead)."""
    return OptimizeSpec(
        xla="xla" in toggles,
        prefetch=PrefetchOptions() if "prefetch" in toggles else None,
        depth_first="depth_first" in toggles,
        pin_memory="pin_memory" in toggles,
        bf16="bf16" in toggles,
        compile_mode="reduce-overhead" if "compile_mode" in toggles else None,
        threads=AUTO_THREADS if "threads" in toggles else None,
    )


def plan(names: Sequence[str]) -> tuple[list[str], dict[str, OptimizeSpec]]:
    """The configurations to run for the chosen toggles (``prefetch``, ``xla``,
    ``depth-first``, ``threads``, and on a GPU ``pin-memory``, ``bf16``, ``compile-mode``), and
    the extra ones to define: baseline, one per toggle, and (two or more chosen) their
    combination, named ``all`` when it is the first three."""
    chosen = [t for t in (toggle_of(n) for n in names) if t is not None]
    ordered = [t for t in ORDER if t in chosen]
    configs = ["baseline", *(toggle_name(t) for t in ordered)]
    extra: dict[str, OptimizeSpec] = {}
    if ordered == list(ALL):
        configs.append("all")
    elif len(ordered) > 1:
        name = "+".join(toggle_name(t) for t in ordered)
        extra[name] = spec_of(ordered)
        configs.append(name)
    return configs, extra
