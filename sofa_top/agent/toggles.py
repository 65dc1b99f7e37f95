"""The optimizer's toggles: one table (``TABLE``) from which every other list of them is derived
(stdlib only: the agent applies them, sofa-top's optimizers, compare, the advice and the panel
choose them, and all import this one definition).

On the wire a spec is ``settings["optimize"]`` (``OptimizeSpec.to_json``)::

    {"xla": true, "prefetch": {"parallelism": 16, "deterministic": false}, "depth_first": true,
     "threads": 1, "pin_memory": true, "bf16": true, "compile_mode": "reduce-overhead",
     "check_data": true}

``"prefetch": true`` means the defaults. ``threads: N`` caps the workload's compute thread
pools at N (OpenMP/MKL and torch's intra-op pool, TensorFlow's intra- and inter-op pools) and
lets idle OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``). ``pin_memory``, ``bf16`` and
``compile_mode`` are the GPU toggles (PyTorch): pinned DataLoader batches copied with
``non_blocking=True``, bf16 autocast (it changes the numerics) and ``torch.compile`` with a
mode. ``check_data`` is no toggle: compare sets it on every run, the baseline included, so that
the agent fingerprints the batches and compare can tell a configuration that changed the data
stream.

A toggle is known by three names, each with its use: the spec key (``depth_first``: the wire,
``Recommendation.toggle``), the name people type and read (``depth-first``: compare's
configurations, the panel, the JSON of verdicts) and the hook it is reported under by the agent
(``opt:depth-first``). The conversions are here and nowhere else. Adding a toggle is one row in
``TABLE`` (and one constant for code that names it) plus its installer in ``agent.optimize``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal

Toggle = Literal["xla", "prefetch", "depth_first", "threads", "pin_memory", "bf16", "compile_mode"]
# the spec keys, for code that names one toggle (typed as the literal: ``Recommendation(t, XLA)``)
XLA: Final = "xla"
PREFETCH: Final = "prefetch"
DEPTH_FIRST: Final = "depth_first"
THREADS: Final = "threads"
PIN_MEMORY: Final = "pin_memory"
BF16: Final = "bf16"
COMPILE_MODE: Final = "compile_mode"

# torch.compile's modes: "reduce-overhead" replays CUDA graphs (launch-bound loops);
# "max-autotune" benchmarks kernels and may take minutes to compile
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
COMPILE_MODES: tuple[CompileMode, ...] = (
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
)
Framework = Literal["tensorflow", "torch"]
# what a toggle's value is on the wire: ``true``, a positive count, prefetch's options, a mode
ValueKind = Literal["flag", "count", "prefetch", "mode"]
HOOK_PREFIX = "opt:"
# TensorFlow auto-clustering, set by the xla toggle before the workload imports TF
XLA_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


@dataclass(frozen=True)
class ToggleRow:
    """One toggle: everything the agent, compare, the panel and the advice need to know."""

    key: Toggle  # the spec key
    label: str  # the optimizer panel's checkbox
    frameworks: tuple[Framework, ...]  # where its installers apply
    change: str  # the code change it stands for (what a measured win asks the user to keep)
    value: ValueKind = "flag"
    default: object = True  # the value compare's configuration of this name runs with
    gpu_only: bool = False  # offered where the workload uses CUDA; not in compare's defaults
    numerics_changing: bool = False  # its results differ in the last bits: compare flags them
    in_all: bool = False  # part of compare's ``all`` configuration
    excludes: tuple[Toggle, ...] = ()  # toggles that win over it when both are asked for

    @property
    def name(self) -> str:
        """The name people read and type: ``depth_first`` -> ``depth-first``."""
        return self.key.replace("_", "-")

    @property
    def hook(self) -> str:
        """The name the agent reports it under in hooks_applied / hooks_skipped."""
        return HOOK_PREFIX + self.name


# ``threads`` at 0 is "pick it": compare sets the cores the baseline's run was left by other
# processes before it runs the configuration.
AUTO_THREADS = 0
_COMPILERS: tuple[Toggle, ...] = (XLA, COMPILE_MODE)
TABLE: tuple[ToggleRow, ...] = (
    ToggleRow(
        PREFETCH, "prefetch + parallelism", ("tensorflow", "torch"),
        "tf.data: map(num_parallel_calls=N) + .prefetch(AUTOTUNE); "
        "DataLoader(num_workers=N, persistent_workers=True)",
        value="prefetch", in_all=True,
    ),
    ToggleRow(
        XLA, "XLA / torch.compile", ("tensorflow", "torch"),
        "TF: @tf.function(jit_compile=True) / Keras compile(jit_compile=True); "
        "torch: model = torch.compile(model)",
        in_all=True,
    ),
    ToggleRow(
        DEPTH_FIRST, "depth-first", ("torch",),
        "model = sofa_top.optimizers.depth_first(model)",
        in_all=True, excludes=_COMPILERS,
    ),
    ToggleRow(
        THREADS, "threads", ("tensorflow", "torch"),
        "torch.set_num_threads(N) / tf.config.threading.set_intra_op_parallelism_threads(N)",
        value="count", default=AUTO_THREADS,
    ),
    ToggleRow(
        PIN_MEMORY, "pin_memory + non_blocking", ("torch",),
        "DataLoader(pin_memory=True) and .to(device, non_blocking=True)",
        gpu_only=True,
    ),
    ToggleRow(
        BF16, "bf16 autocast (numerics change)", ("torch",),
        "with torch.autocast('cuda', dtype=torch.bfloat16): around the forward pass",
        gpu_only=True, numerics_changing=True,
    ),
    ToggleRow(
        COMPILE_MODE, "CUDA graphs (reduce-overhead)", ("torch",),
        "model = torch.compile(model, mode='reduce-overhead')",
        value="mode", default="reduce-overhead", gpu_only=True,
    ),
)  # fmt: skip
# how the panel and the agent say an exclusion (both ticked: the excluded one is skipped)
EXCLUSIVE_NOTE = (
    "depth-first and torch.compile are mutually exclusive: a run with both reports "
    "depth-first skipped"
)
EXCLUDED_BECAUSE = "mutually exclusive with torch.compile (xla requested)"


def rows(*, gpu: bool | None = None) -> tuple[ToggleRow, ...]:
    """The table's rows in order; ``gpu`` True/False: only the GPU / the CPU ones."""
    return tuple(r for r in TABLE if gpu is None or r.gpu_only == gpu)


def row_of(toggle: str) -> ToggleRow | None:
    """The row of a spec key, a person's name (``depth-first``) or a hook name."""
    key = toggle.removeprefix(HOOK_PREFIX).replace("-", "_")
    return next((r for r in TABLE if r.key == key), None)


def toggle_name(toggle: Toggle) -> str:
    """The name people read: ``depth_first`` -> ``depth-first``."""
    return toggle.replace("_", "-")


def toggle_of(name: str) -> Toggle | None:
    """The toggle a person's name (``depth-first``) or a spec key (``depth_first``) means."""
    if name.startswith(HOOK_PREFIX):
        return None
    r = row_of(name)
    return None if r is None else r.key


def hook_name(toggle: Toggle) -> str:
    """The name a toggle is reported under in the agent's hooks_applied / hooks_skipped."""
    return HOOK_PREFIX + toggle_name(toggle)


def toggle_of_hook(hook: str) -> Toggle | None:
    """The inverse of ``hook_name`` (None for the agent's own hooks, e.g. ``tf-eager``)."""
    if not hook.startswith(HOOK_PREFIX):
        return None
    return toggle_of(hook[len(HOOK_PREFIX) :])


def numerics_changing(ts: Iterable[Toggle]) -> tuple[Toggle, ...]:
    """Those of ``ts`` whose results differ from the baseline's in the last bits."""
    return tuple(t for t in ts if (r := row_of(t)) is not None and r.numerics_changing)


def excluded(ts: Iterable[Toggle]) -> tuple[Toggle, ...]:
    """Those of ``ts`` that another of ``ts`` wins over (reported skipped when both are on)."""
    on = set(ts)
    return tuple(t for t in on if (r := row_of(t)) is not None and any(x in on for x in r.excludes))


def _positive_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


@dataclass(frozen=True)
class PrefetchOptions:
    """How ``prefetch`` overlaps and parallelizes input. Every field None: the defaults."""

    # producers for input that waits: tf.data num_parallel_calls and private pool size,
    # DataLoader num_workers; may exceed the core count
    parallelism: int | None = None
    deterministic: bool | None = None  # False lets tf.data return elements out of order
    workers: int | None = None  # DataLoader workers without ``parallelism`` (default: cores - 1)
    prefetch_factor: int | None = None  # DataLoader batches per worker in flight (default 4)

    def to_json(self) -> dict[str, object] | Literal[True]:
        """The wire form: ``true`` for the defaults, else the fields that are set."""
        d: dict[str, object] = {
            k: v
            for k, v in (
                ("parallelism", self.parallelism),
                ("deterministic", self.deterministic),
                ("workers", self.workers),
                ("prefetch_factor", self.prefetch_factor),
            )
            if v is not None
        }
        return d or True


@dataclass(frozen=True, init=False)
class OptimizeSpec:
    """Which toggles a run asks for, each with its value (``True``, a thread count, prefetch's
    options, a compile mode), in table order. The default (nothing) is the baseline."""

    values: tuple[tuple[Toggle, object], ...]
    check_data: bool  # fingerprint the batches (compare's data-stream check)

    def __init__(
        self,
        values: Mapping[Toggle, object] | Iterable[tuple[Toggle, object]] = (),
        *,
        check_data: bool = False,
        **on: object,
    ) -> None:
        pairs = values.items() if isinstance(values, Mapping) else values
        given: dict[str, object] = {**dict(pairs), **on}
        for key in given:
            if row_of(key) is None or "-" in key:
                raise TypeError(f"OptimizeSpec: unknown toggle {key!r}")
        kept = tuple((r.key, v) for r in TABLE if (v := _normal(r, given.get(r.key))) is not None)
        object.__setattr__(self, "values", kept)
        object.__setattr__(self, "check_data", check_data)

    def get(self, toggle: Toggle) -> object:
        """The value asked for ``toggle``; None when it is off."""
        return next((v for t, v in self.values if t == toggle), None)

    def with_(self, toggle: Toggle, value: object) -> OptimizeSpec:
        """The same spec with ``toggle`` at ``value`` (None: off)."""
        return OptimizeSpec({**dict(self.values), toggle: value}, check_data=self.check_data)

    def toggles(self) -> tuple[Toggle, ...]:
        """The toggles asked for, in table order."""
        return tuple(t for t, _ in self.values)

    @property
    def xla(self) -> bool:
        return self.get(XLA) is True

    @property
    def prefetch(self) -> PrefetchOptions | None:
        p = self.get(PREFETCH)
        return p if isinstance(p, PrefetchOptions) else None

    @property
    def depth_first(self) -> bool:
        return self.get(DEPTH_FIRST) is True

    @property
    def threads(self) -> int | None:
        """The thread cap asked for (0: compare picks it from the cores left free)."""
        n = self.get(THREADS)
        return n if isinstance(n, int) else None

    @property
    def pin_memory(self) -> bool:
        return self.get(PIN_MEMORY) is True

    @property
    def bf16(self) -> bool:
        return self.get(BF16) is True

    @property
    def compile_mode(self) -> CompileMode | None:
        m = self.get(COMPILE_MODE)
        return next((c for c in COMPILE_MODES if c == m), None)

    @property
    def parallelism(self) -> int | None:
        """The prefetch parallelism asked for, if any."""
        return None if self.prefetch is None else self.prefetch.parallelism

    def wants_search(self) -> bool:
        """Prefetch without a parallelism of its own: compare may search one."""
        return self.prefetch is not None and self.prefetch.parallelism is None

    def with_parallelism(self, n: int) -> OptimizeSpec:
        """The same spec with prefetch at parallelism ``n``."""
        return self.with_(PREFETCH, replace(self.prefetch or PrefetchOptions(), parallelism=n))

    def to_json(self) -> dict[str, object]:
        """``settings["optimize"]``: only the toggles that are on."""
        d: dict[str, object] = {
            t: v.to_json() if isinstance(v, PrefetchOptions) else v for t, v in self.values
        }
        if self.check_data:
            d["check_data"] = True
        return d

    @classmethod
    def from_json(cls, raw: object) -> tuple[OptimizeSpec, tuple[str, ...]]:
        """Parse ``settings["optimize"]``; what is wrong is left out and listed, never fatal."""
        if not isinstance(raw, dict):
            return cls(), () if raw is None else ("optimize: expected an object",)
        problems: list[str] = []
        on: dict[Toggle, object] = {}
        check = False
        for key, value in raw.items():
            row = row_of(key) if isinstance(key, str) and "-" not in key else None
            if key == "check_data":
                check = _flag(key, value, problems)
            elif row is None:
                problems.append(f"optimize: unknown toggle {key!r} ignored")
            elif row.value == "prefetch":
                on[row.key], bad = _prefetch(value)
                problems += bad
            elif row.value == "count":
                on[row.key] = _positive_int(value)
                if on[row.key] is None and value not in (False, None):
                    problems.append(f"optimize: {key}: expected a positive integer")
            elif row.value == "mode":
                on[row.key] = next((m for m in COMPILE_MODES if m == value), None)
                if on[row.key] is None and value is not None:
                    problems.append(f"optimize: {key}: expected one of {', '.join(COMPILE_MODES)}")
            else:
                on[row.key] = _flag(key, value, problems) or None
        return cls(on, check_data=check), tuple(problems)


def _flag(key: str, value: object, problems: list[str]) -> bool:
    if value not in (True, False, None):
        problems.append(f"optimize: {key}: expected true or false")
    return value is True


def _normal(row: ToggleRow, value: object) -> object:
    """``value`` as the spec keeps it for ``row``; None when it leaves the toggle off."""
    if value is None or value is False:
        return None
    if row.value == "flag":
        return True
    if row.value == "count":  # 0 is compare's "pick it" (``AUTO_THREADS``)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return value if ok else None
    if row.value == "prefetch":
        return value if isinstance(value, PrefetchOptions) else PrefetchOptions()
    return next((m for m in COMPILE_MODES if m == value), None)


def _prefetch(value: object) -> tuple[PrefetchOptions | None, list[str]]:
    if value is True:
        return PrefetchOptions(), []
    if value in (False, None):
        return None, []
    if not isinstance(value, dict):
        return None, ["optimize: prefetch: expected true or an object"]
    problems: list[str] = []
    ints: dict[str, int | None] = {}
    for key in ("parallelism", "workers", "prefetch_factor"):
        if key in value:
            ints[key] = _positive_int(value[key])
            if ints[key] is None:
                problems.append(f"optimize: prefetch.{key}: expected a positive integer")
    det = value.get("deterministic")
    if det is not None and not isinstance(det, bool):
        problems.append("optimize: prefetch.deterministic: expected true or false")
        det = None
    problems += [
        f"optimize: prefetch: unknown option {k!r} ignored"
        for k in value
        if k not in ("parallelism", "workers", "prefetch_factor", "deterministic")
    ]
    opts = PrefetchOptions(
        parallelism=ints.get("parallelism"),
        deterministic=det,
        workers=ints.get("workers"),
        prefetch_factor=ints.get("prefetch_factor"),
    )
    return opts, problems
