"""The py-spy window planner: the rate and length that keep py-spy within a CPU budget.

See ``sofa_top.collectors.stacks`` for the cost model's measurements.
"""

from __future__ import annotations

import math
from collections import deque

MIN_RATE_HZ = 1
PROBE_RATE_HZ = 5  # the first window's rate, before py-spy's cost on this target is known
STARTUP_RANGE_S = (0.005, 0.1)  # plausible py-spy attach cost (measured 14-45 ms)
MAX_WINDOW_S = 5


class RateController:
    """Plans (window seconds, rate Hz) so that py-spy's CPU stays within a budget.

    The model is ``cpu_s = startup_s + per_sample_s * samples`` with ``samples = rate * window + 1``
    (py-spy also samples once while attaching). Both terms are refitted from measured windows; the
    first window is a cheap probe at :data:`PROBE_RATE_HZ`, because a process with many threads
    can cost 10 ms per sample.
    """

    def __init__(
        self,
        budget: float,
        max_rate: int,
        base_window: int = 1,
        max_window: int = MAX_WINDOW_S,
        startup_s: float = 0.015,
        per_sample_s: float = 0.001,
    ) -> None:
        self.budget = max(1e-4, budget)
        self.max_rate = max(MIN_RATE_HZ, max_rate)
        self.base_window = max(1, base_window)
        self.max_window = max(self.base_window, max_window)
        self.startup_s = startup_s
        self.per_sample_s = per_sample_s
        self._obs: deque[tuple[int, float]] = deque(maxlen=8)

    def _affordable_rate(self, window: int) -> float:
        spend = self.budget * window - self.startup_s - self.per_sample_s
        return spend / (self.per_sample_s * window)

    def plan(self) -> tuple[int, int]:
        """The next window's (duration in whole seconds, rate in Hz).

        Start-up is paid per window, so longer windows buy more samples per CPU second; take the
        shortest window that reaches half the best affordable sample rate (a fresh view matters).
        """
        if not self._obs:
            return self.base_window, min(self.max_rate, PROBE_RATE_HZ)
        options: list[tuple[int, int, float]] = []
        for window in range(self.base_window, self.max_window + 1):
            rate = math.floor(min(float(self.max_rate), self._affordable_rate(window)))
            if rate >= MIN_RATE_HZ:
                # py-spy records rate * window - 1 samples (its first interval is not written)
                options.append((window, rate, (rate * window - 1) / window))
        if not options:
            return self.max_window, MIN_RATE_HZ
        best = max(per_s for _, _, per_s in options)
        for window, rate, per_s in options:
            if per_s >= 0.5 * best:
                return window, rate
        return options[-1][0], options[-1][1]

    def observe(self, window: int, rate: int, cpu_s: float) -> None:
        """Record one window's measured py-spy CPU seconds and refit the model."""
        samples = rate * window + 1
        self._obs.append((samples, max(0.0, cpu_s)))
        ns = [n for n, _ in self._obs]
        cs = [c for _, c in self._obs]
        if len(ns) >= 3 and max(ns) >= 1.5 * min(ns):
            mean_n = sum(ns) / len(ns)
            mean_c = sum(cs) / len(cs)
            var = sum((n - mean_n) ** 2 for n in ns)
            cov = sum((n - mean_n) * (c - mean_c) for n, c in zip(ns, cs, strict=True))
            per = cov / var
            start = mean_c - per * mean_n
            if per > 0 and STARTUP_RANGE_S[0] <= start <= STARTUP_RANGE_S[1]:
                self.per_sample_s = max(1e-6, per)
                self.startup_s = start
                return
        # Too little spread (or noise) to separate the terms: keep a plausible start-up cost and
        # put the rest on the samples, smoothed so one noisy window does not swing the rate.
        self.startup_s = min(self.startup_s, max(STARTUP_RANGE_S[0], 0.8 * cs[-1]))
        per = max(1e-6, (cs[-1] - self.startup_s) / ns[-1])
        if len(self._obs) == 1:
            self.per_sample_s = per
        else:
            self.per_sample_s = 0.5 * self.per_sample_s + 0.5 * per
