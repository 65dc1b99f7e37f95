"""Agent settings, passed by the launcher as JSON in ``SOFA_TOP_AGENT_SETTINGS`` (stdlib only)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sofa_top.agent import clocks
from sofa_top.agent.toggles import OptimizeSpec

ENV_SOCKET = "SOFA_TOP_SOCKET"
ENV_SETTINGS = "SOFA_TOP_AGENT_SETTINGS"

HOOK_NAMES = (
    clocks.TF_EAGER,
    "tf-data-pipeline",
    clocks.KERAS_FIT,
    clocks.TORCH_DATALOADER,
    clocks.TORCH_OPTIMIZER,
    "torch-collectives",
    "torch-ddp",
    "torch-cuda",
    clocks.TORCH_BACKWARD,
    clocks.TORCH_MODEL_CALL,
    clocks.KERAS_MODEL_CALL,
    clocks.TF_FUNCTION_CALL,
    clocks.KERAS_EVALUATE,
)


@dataclass(frozen=True)
class AgentSettings:
    """Knobs of the agent; every field has a default so that ``{}`` is valid."""

    flush_interval_s: float = 0.1  # how often queued steps are batched into frames
    queue_max: int = 20_000  # queued step records beyond this are dropped (and counted)
    connect_timeout_s: float = 1.0
    send_timeout_s: float = 5.0  # a server this slow is treated as gone
    exit_flush_s: float = 1.0  # the most the workload's exit waits for the last frames
    pipeline_interval_s: float = 5.0  # how often tf.data runtime stats are re-read
    # CUDA (hooks_cuda): a torch.profiler window of ``cuda_window_steps`` steps every
    # ``cuda_window_s`` seconds (0: none), the first ``cuda_first_window_s`` after CUDA is
    # seen; allocator readings every ``cuda_memory_s``
    cuda_window_s: float = 30.0
    cuda_first_window_s: float = 3.0
    cuda_window_steps: int = 5
    cuda_memory_s: float = 5.0
    disabled_hooks: tuple[str, ...] = ()
    optimize: OptimizeSpec = field(default_factory=OptimizeSpec)  # the optimizer's toggles
    problems: tuple[str, ...] = ()  # what was wrong with the JSON (reported, never fatal)

    def to_json(self) -> dict[str, Any]:
        """The settings as the JSON object the launcher passes (problems excluded)."""
        return {
            "flush_interval_s": self.flush_interval_s,
            "queue_max": self.queue_max,
            "connect_timeout_s": self.connect_timeout_s,
            "send_timeout_s": self.send_timeout_s,
            "exit_flush_s": self.exit_flush_s,
            "pipeline_interval_s": self.pipeline_interval_s,
            "cuda_window_s": self.cuda_window_s,
            "cuda_first_window_s": self.cuda_first_window_s,
            "cuda_window_steps": self.cuda_window_steps,
            "cuda_memory_s": self.cuda_memory_s,
            "disabled_hooks": list(self.disabled_hooks),
            "optimize": self.optimize.to_json(),
        }


_FLOATS = {
    "flush_interval_s": (0.001, 10.0),
    "connect_timeout_s": (0.01, 60.0),
    "send_timeout_s": (0.01, 600.0),
    "exit_flush_s": (0.0, 60.0),
    "pipeline_interval_s": (0.1, 3600.0),
    "cuda_window_s": (0.0, 86400.0),
    "cuda_first_window_s": (0.0, 86400.0),
    "cuda_memory_s": (0.1, 3600.0),
}


def parse_settings(text: str | None) -> AgentSettings:
    """Parse the settings JSON; bad or unknown fields fall back to defaults and are listed."""
    if not text:
        return AgentSettings()
    problems: list[str] = []
    try:
        raw = json.loads(text)
    except ValueError as e:
        return AgentSettings(problems=(f"settings are not JSON: {e}",))
    if not isinstance(raw, dict):
        return AgentSettings(problems=("settings are not a JSON object",))
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _FLOATS:
            lo, hi = _FLOATS[key]
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and lo <= value <= hi
            ):
                values[key] = float(value)
            else:
                problems.append(f"{key}: expected a number in [{lo}, {hi}]")
        elif key == "queue_max":
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 10**7:
                values[key] = value
            else:
                problems.append("queue_max: expected an integer in [1, 10000000]")
        elif key == "cuda_window_steps":
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1000:
                values[key] = value
            else:
                problems.append("cuda_window_steps: expected an integer in [1, 1000]")
        elif key == "disabled_hooks":
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                values[key] = tuple(value)
                problems.extend(
                    f"disabled_hooks: unknown hook {v!r}" for v in value if v not in HOOK_NAMES
                )
            else:
                problems.append("disabled_hooks: expected a list of hook names")
        elif key == "optimize":
            values[key], bad = OptimizeSpec.from_json(value)
            problems.extend(bad)
        else:
            problems.append(f"unknown setting {key!r}")
    return AgentSettings(**values, problems=tuple(problems))
