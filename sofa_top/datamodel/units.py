"""Units as type aliases, so signatures say what a number means."""

from typing import TypeAlias

Seconds: TypeAlias = float  # wall-clock seconds (durations) or Unix time (timestamps)
Timestamp: TypeAlias = float  # seconds since the Unix epoch, from time.time()
Bytes: TypeAlias = int
Percent: TypeAlias = float  # 100.0 == one full core (process CPU) or the whole device (GPU)
Hertz: TypeAlias = float
Watts: TypeAlias = float
Celsius: TypeAlias = float
MHz: TypeAlias = float
Pid: TypeAlias = int
