"""What the agent found about the workload's model and thread pools (an ``agent-model`` event).

The advice reads it to suggest only what can apply: ``depth_first`` where the model has chains
it can run depth-first, ``torch.compile`` in the API the workload's library uses (a Hugging
Face ``Trainer``, Lightning, a Keras model on the torch backend), and thread counts that fit the
cores. The agent sends the event's data as ``ModelReport.as_json`` (stdlib types only); a field
an older or newer agent did not send takes its neutral value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

ModelFramework = Literal["torch", "tensorflow"]


@dataclass(frozen=True, slots=True)
class ModelReport:
    """The first top-level model the workload ran, and the thread pools of its framework."""

    framework: ModelFramework
    module: str = ""  # the top-level module's class, e.g. "Net"; "" when none was seen
    module_path: str = ""  # the module its class is defined in, e.g. "__main__", "keras.src..."
    parameters: int | None = None
    depth_first_chains: int | None = None  # chains depth_first would take; None: not counted
    chain_reason: str = ""  # why there is no count, or what stopped the count
    intra_op_threads: int | None = None  # torch.get_num_threads() / TF intra-op pool size
    libraries: tuple[str, ...] = ()  # "transformers", "lightning", "keras" ... when imported
    env: tuple[tuple[str, str], ...] = ()  # OMP_NUM_THREADS, OMP_WAIT_POLICY, ... when set
    call_s: float | None = None  # the model's median time per call (its forward), when timed

    @property
    def keras_model(self) -> bool:
        """A Keras model (on the torch backend when ``framework`` is torch)."""
        return self.module_path.startswith("keras")

    def as_json(self) -> dict[str, object]:
        """The event's data."""
        return {
            "framework": self.framework,
            "module": self.module,
            "module_path": self.module_path,
            "parameters": self.parameters,
            "depth_first_chains": self.depth_first_chains,
            "chain_reason": self.chain_reason,
            "intra_op_threads": self.intra_op_threads,
            "libraries": list(self.libraries),
            "env": [list(kv) for kv in self.env],
            "call_s": self.call_s,
        }


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_report(data: Mapping[str, object]) -> ModelReport | None:
    """An ``agent-model`` event's data as a report; None when it names no known framework."""
    fw = data.get("framework")
    if fw not in ("torch", "tensorflow"):
        return None
    libs = data.get("libraries")
    env = data.get("env")
    return ModelReport(
        framework="torch" if fw == "torch" else "tensorflow",
        module=str(data.get("module") or ""),
        module_path=str(data.get("module_path") or ""),
        parameters=_int(data.get("parameters")),
        depth_first_chains=_int(data.get("depth_first_chains")),
        chain_reason=str(data.get("chain_reason") or ""),
        intra_op_threads=_int(data.get("intra_op_threads")),
        libraries=tuple(str(x) for x in libs) if isinstance(libs, list) else (),
        env=tuple(
            (str(kv[0]), str(kv[1]))
            for kv in (env if isinstance(env, list) else [])
            if isinstance(kv, list | tuple) and len(kv) == 2
        ),
        call_s=_seconds(data.get("call_s")),
    )


def _seconds(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def merge(old: ModelReport | None, new: ModelReport) -> ModelReport:
    """Reports come per framework and event: keep the torch model once one was seen (a TF
    thread-pool report of the same process must not erase it)."""
    if old is None or new.module or not old.module:
        if old is not None and new.call_s is None and old.module == new.module:
            return replace(new, call_s=old.call_s)  # the timing came first: keep it
        return new
    return old
