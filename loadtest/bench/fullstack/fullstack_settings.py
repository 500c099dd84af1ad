"""What every config of a full-stack run shares: the load test's arguments, the driver's settings, its clock and
deadline, and the time a config needs before that deadline."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

STARTUP_S = 150.0
"""`thinktier up` to /readyz on the GPU machine: ~150 s for the engines (173 s in the pilot)."""
STOP_RESERVE_S = 60.0
"""Time kept for stopping thinktier when the load test's time limit is set."""
MIN_CONFIG_S = STARTUP_S + 30 + STOP_RESERVE_S
"""Time a policy needs before the deadline besides its arrival window: start-up, a short drain, the stop."""


@dataclass(frozen=True)
class LoadArgs:
    """The `thinktier loadtest run` arguments every policy gets."""

    slo_policy: Path
    rate: float
    shape: float
    duration_s: float
    seed: int
    mix: str
    request_timeout_s: float


@dataclass(frozen=True)
class Settings:
    out: Path
    load: LoadArgs
    port: int = 8000
    ready_timeout_s: float = 300.0
    sample_every_s: float = 2.0
    deadline_s: float = 570.0
    """Seconds from the start by which everything must be done."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Clock:
    """Time since the driver started, the time left before its deadline, and timestamped log lines."""

    def __init__(self, deadline_s: float) -> None:
        self.t0 = time.monotonic()
        self.deadline_s = deadline_s

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.deadline_s - self.elapsed()

    def budget(self, wanted_s: float, reserve_s: float) -> float:
        """`wanted_s`, or less so that `reserve_s` remain before the deadline (never below 1 s)."""
        return max(1.0, min(wanted_s, self.left() - reserve_s))

    def log(self, message: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {message}", flush=True)


def min_left_s(load: LoadArgs) -> float:
    """Time a policy needs before the deadline to end with a report; one started with less only spends device time."""
    return MIN_CONFIG_S + load.duration_s
