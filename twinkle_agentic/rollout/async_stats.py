"""What an asynchronous rollout call measured: engine occupancy, per-trajectory timelines, tools, failures.

**Engine idle share** = time with zero generation requests in flight on the engine / the call's wall
time. A request is in flight from its submission until its response is back in the rollout.
``BusyClock`` keeps the union of those intervals with a counter, so overlapping requests (the
asynchronous case) and back-to-back batched calls (the turn-synchronous case) are measured alike.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .failure_policy import FailureReport
from .tool_scheduler import ToolStats


class BusyClock:
    """Seconds during which at least one tracked interval was open (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._lock = threading.Lock()
        self._open = 0
        self._since = 0.0
        self._busy_s = 0.0
        self.intervals = 0

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        with self._lock:
            if self._open == 0:
                self._since = self._clock()
            self._open += 1
            self.intervals += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                if self._open == 0:
                    self._busy_s += self._clock() - self._since

    def busy_s(self) -> float:
        with self._lock:
            return self._busy_s + (self._clock() - self._since if self._open else 0.0)


@dataclass
class TrajectoryTiming:
    """One attempt at one trajectory; times in seconds since the call started.

    ``generations`` are its engine requests (submitted, answered) and ``tool_turns`` its tool phases
    (first call started, last answer back), in order.
    """

    index: int
    attempt: int
    started_s: float
    finished_s: float | None = None
    stop_reason: str | None = None
    cancelled: bool = False
    generations: list[tuple[float, float]] = field(default_factory=list)
    tool_turns: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class AsyncRolloutStats:
    """Measurements of one ``AsyncMultiTurnRollout`` call (``last_stats``, or ``run_with_stats``)."""

    wall_s: float = 0.0
    engine_busy_s: float = 0.0
    requests: int = 0
    generated_tokens: int = 0
    timings: list[TrajectoryTiming] = field(default_factory=list)
    completion_order: list[int] = field(default_factory=list)  # input indices as their final results came
    attempts: list[int] = field(default_factory=list)  # per input index
    tools: ToolStats = field(default_factory=ToolStats)
    failures: FailureReport = field(default_factory=FailureReport)

    @property
    def engine_idle_share(self) -> float | None:
        return None if self.wall_s <= 0 else max(0.0, 1.0 - self.engine_busy_s / self.wall_s)

    def final_timing(self, index: int) -> TrajectoryTiming:
        """The attempt of input ``index`` that produced its result (its last one)."""
        attempts = [t for t in self.timings if t.index == index]
        if not attempts:
            raise KeyError(f"no attempt recorded for trajectory {index}")
        return attempts[-1]

    def metrics(self) -> dict[str, Any]:
        """Flat figures for logs and job summaries."""
        share = self.engine_idle_share
        return {
            "wall_s": round(self.wall_s, 4),
            "engine_busy_s": round(self.engine_busy_s, 4),
            "engine_idle_share": None if share is None else round(share, 4),
            "requests": self.requests,
            "generated_tokens": self.generated_tokens,
            **{f"tool_{k}": v for k, v in self.tools.totals().items()},
            **self.failures.counts(),
        }
