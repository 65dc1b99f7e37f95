"""The optimizer's toggles as typed values (stdlib only: the agent applies them, sofa-top's
optimizers choose them, and both import this one definition).

On the wire a spec is ``settings["optimize"]`` (``OptimizeSpec.to_json``)::

    {"xla": true, "prefetch": {"parallelism": 16, "deterministic": false}, "depth_first": true,
     "threads": 1, "pin_memory": true, "bf16": true, "compile_mode": "reduce-overhead",
     "check_data": true}

``"prefetch": true`` means the defaults. ``threads: N`` caps the workload's compute thread
pools at N (OpenMP/MKL and torch's intra-op pool, TensorFlow's intra- and inter-op pools) and
lets idle OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``). ``pin_memory``, ``bf16`` and
``compile_mode`` are the GPU toggles (PyTorch): pinned DataLoader batches copied with
``non_blocking=True``, bf16 autocast (it changes the numerics: ``NUMERICS_CHANGING``) and
``torch.compile`` with a mode. ``check_data`` is no toggle: compare sets it on every run, the
baseline included, so that the agent fingerprints the batches and compare can tell a
configuration that changed the data stream.

A toggle is known by three names, each with its use: the spec key (``depth_first``), the name
people type and read (``depth-first``: compare's configurations, recommendations) and the hook
it is reported under by the agent (``opt:depth-first``). The conversions are here and nowhere
else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Toggle = Literal["xla", "prefetch", "depth_first", "threads", "pin_memory", "bf16", "compile_mode"]
TOGGLES: tuple[Toggle, ...] = (
    "xla",
    "prefetch",
    "depth_first",
    "threads",
    "pin_memory",
    "bf16",
    "compile_mode",
)
# the GPU toggles (compare offers them where the workload uses CUDA)
GPU_TOGGLES: tuple[Toggle, ...] = ("pin_memory", "bf16", "compile_mode")
# toggles whose results differ from the baseline's in the last bits: compare flags them
NUMERICS_CHANGING: tuple[Toggle, ...] = ("bf16",)
# torch.compile's modes: "reduce-overhead" replays CUDA graphs (launch-bound loops);
# "max-autotune" benchmarks kernels and may take minutes to compile
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
COMPILE_MODES: tuple[CompileMode, ...] = (
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
)
HOOK_PREFIX = "opt:"
# TensorFlow auto-clustering, set by the xla toggle before the workload imports TF
XLA_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def toggle_name(toggle: Toggle) -> str:
    """The name people read: ``depth_first`` -> ``depth-first``."""
    return toggle.replace("_", "-")


def toggle_of(name: str) -> Toggle | None:
    """The toggle a person's name (``depth-first``) or a spec key (``depth_first``) means."""
    key = name.replace("-", "_")
    for t in TOGGLES:
        if t == key:
            return t
    return None


def hook_name(toggle: Toggle) -> str:
    """The name a toggle is reported under in the agent's hooks_applied / hooks_skipped."""
    return HOOK_PREFIX + toggle_name(toggle)


def toggle_of_hook(hook: str) -> Toggle | None:
    """The inverse of ``hook_name`` (None for the agent's own hooks, e.g. ``tf-eager``)."""
    if not hook.startswith(HOOK_PREFIX):
        return None
    return toggle_of(hook[len(HOOK_PREFIX) :])


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


@dataclass(frozen=True)
class OptimizeSpec:
    """Which toggles a run asks for. The default (nothing) is the baseline."""

    xla: bool = False
    prefetch: PrefetchOptions | None = None
    depth_first: bool = False
    threads: int | None = None  # cap the compute thread pools at this many threads
    check_data: bool = False  # fingerprint the batches (compare's data-stream check)
    pin_memory: bool = False
    bf16: bool = False
    compile_mode: CompileMode | None = None

    def toggles(self) -> tuple[Toggle, ...]:
        """The toggles asked for, in ``TOGGLES`` order."""
        on = {
            "xla": self.xla,
            "prefetch": self.prefetch is not None,
            "depth_first": self.depth_first,
            "threads": self.threads is not None,
            "pin_memory": self.pin_memory,
            "bf16": self.bf16,
            "compile_mode": self.compile_mode is not None,
        }
        return tuple(t for t in TOGGLES if on[t])

    @property
    def parallelism(self) -> int | None:
        """The prefetch parallelism asked for, if any."""
        return None if self.prefetch is None else self.prefetch.parallelism

    def wants_search(self) -> bool:
        """Prefetch without a parallelism of its own: compare may search one."""
        return self.prefetch is not None and self.prefetch.parallelism is None

    def with_parallelism(self, n: int) -> OptimizeSpec:
        """The same spec with prefetch at parallelism ``n``."""
        return replace(self, prefetch=replace(self.prefetch or PrefetchOptions(), parallelism=n))

    def to_json(self) -> dict[str, object]:
        """``settings["optimize"]``: only the toggles that are on."""
        d: dict[str, object] = {}
        if self.xla:
            d["xla"] = True
        if self.prefetch is not None:
            d["prefetch"] = self.prefetch.to_json()
        if self.depth_first:
            d["depth_first"] = True
        if self.threads is not None:
            d["threads"] = self.threads
        if self.check_data:
            d["check_data"] = True
        if self.pin_memory:
            d["pin_memory"] = True
        if self.bf16:
            d["bf16"] = True
        if self.compile_mode is not None:
            d["compile_mode"] = self.compile_mode
        return d

    @classmethod
    def from_json(cls, raw: object) -> tuple[OptimizeSpec, tuple[str, ...]]:
        """Parse ``settings["optimize"]``; what is wrong is left out and listed, never fatal."""
        if not isinstance(raw, dict):
            return cls(), () if raw is None else ("optimize: expected an object",)
        problems: list[str] = []
        on: dict[str, bool] = {}
        prefetch: PrefetchOptions | None = None
        threads: int | None = None
        mode: CompileMode | None = None
        for key, value in raw.items():
            toggle = next((t for t in (*TOGGLES, "check_data") if t == key), None)  # spec keys
            if toggle is None:
                problems.append(f"optimize: unknown toggle {key!r} ignored")
            elif toggle == "prefetch":
                prefetch, bad = _prefetch(value)
                problems += bad
            elif toggle == "threads":
                threads = _positive_int(value)
                if threads is None and value not in (False, None):
                    problems.append("optimize: threads: expected a positive integer")
            elif toggle == "compile_mode":
                mode = next((m for m in COMPILE_MODES if m == value), None)
                if mode is None and value is not None:
                    problems.append(
                        f"optimize: compile_mode: expected one of {', '.join(COMPILE_MODES)}"
                    )
            elif value is True:
                on[toggle] = True
            elif value not in (False, None):
                problems.append(f"optimize: {key}: expected true or false")
        spec = cls(
            xla=on.get("xla", False),
            prefetch=prefetch,
            depth_first=on.get("depth_first", False),
            threads=threads,
            check_data=on.get("check_data", False),
            pin_memory=on.get("pin_memory", False),
            bf16=on.get("bf16", False),
            compile_mode=mode,
        )
        return spec, tuple(problems)


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
