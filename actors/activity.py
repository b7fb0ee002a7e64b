"""Where a rollout worker's time goes, measured from timestamps taken inside the worker.

The worker records three kinds of intervals on one monotonic clock:

- **active**: a ``generate`` call is running (the worker has work);
- **engine**: at least one generation request is in flight on its engine;
- **tool**: a tool call (HTTP tool server or environment step) is in flight.

From them, over the worker's active time ``A``:

- ``engine_busy_s`` = |engine ∩ A|;
- ``tool_wait_s``   = |(tool − engine) ∩ A|: **the engine sits idle waiting for tools**: a tool call
  is outstanding and no generation request is;
- ``other_s``       = the rest of ``A`` (templating, token bookkeeping, opening env sessions).

The farm's **engine idle share waiting for tools** is Σ ``tool_wait_s`` / Σ ``active_s`` over all
workers. Time a worker spends with no batch at all is not in ``A``; it shows up as worker
utilisation (Σ ``active_s`` / (workers × wall time)) instead.

Intervals may overlap freely (an asynchronous mode has many requests and tool calls in flight), so
measures are lengths of unions. ``settle()`` reports everything up to now and keeps intervals that
are still open, so reports from concurrent batches add up without double counting.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

Interval = tuple[float, float]
KINDS = ("active", "engine", "tool")


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Disjoint, sorted union of the intervals (empty ones dropped)."""
    out: list[list[float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def length(intervals: Iterable[Interval]) -> float:
    return sum(e - s for s, e in merge(intervals))


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """Union of ``a`` intersected with union of ``b``."""
    a, b = merge(a), merge(b)
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """Union of ``a`` minus union of ``b``."""
    out: list[Interval] = []
    b = merge(b)
    for start, end in merge(a):
        cursor = start
        for bs, be in b:
            if be <= cursor or bs >= end:
                continue
            if bs > cursor:
                out.append((cursor, bs))
            cursor = max(cursor, be)
        if cursor < end:
            out.append((cursor, end))
    return out


@dataclass(frozen=True)
class ToolCallTiming:
    tool: str
    latency_s: float
    ok: bool  # False when the call answered an ``Error: ...`` string


@dataclass
class Activity:
    """Time accounting of one worker over some period (sums across periods and workers with ``+``)."""

    active_s: float = 0.0
    engine_busy_s: float = 0.0
    tool_wait_s: float = 0.0
    tool_calls: list[ToolCallTiming] = field(default_factory=list)

    @property
    def other_s(self) -> float:
        return max(0.0, self.active_s - self.engine_busy_s - self.tool_wait_s)

    def __add__(self, other: Activity) -> Activity:
        return Activity(
            self.active_s + other.active_s,
            self.engine_busy_s + other.engine_busy_s,
            self.tool_wait_s + other.tool_wait_s,
            self.tool_calls + other.tool_calls,
        )


def account(active: list[Interval], engine: list[Interval], tool: list[Interval]) -> Activity:
    """The measures of the module docstring for one worker's intervals."""
    engine_in_active = intersect(engine, active)
    waiting = intersect(subtract(tool, engine), active)
    return Activity(length(active), length(engine_in_active), length(waiting))


class ActivityRecorder:
    """Thread-safe interval log of one worker; ``settle()`` turns it into an ``Activity`` report."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._closed: dict[str, list[Interval]] = {k: [] for k in KINDS}
        self._open: dict[str, dict[int, float]] = {k: {} for k in KINDS}
        self._calls: list[ToolCallTiming] = []
        self._since = clock()

    def _begin(self, kind: str) -> int:
        with self._lock:
            key = next(self._ids)
            self._open[kind][key] = self._clock()
            return key

    def _end(self, kind: str, key: int) -> float:
        with self._lock:
            start = self._open[kind].pop(key)
            end = self._clock()
            self._closed[kind].append((max(start, self._since), end))
            return end - start

    @contextmanager
    def span(self, kind: str) -> Iterator[None]:
        """Record the ``with`` block as one ``active`` or ``engine`` interval."""
        if kind not in KINDS:
            raise ValueError(f"unknown activity kind {kind!r}; expected one of {KINDS}")
        key = self._begin(kind)
        try:
            yield
        finally:
            self._end(kind, key)

    def tool_call(self, tool: str, call) -> str:
        """Run ``call()`` (returns the tool's text) as one ``tool`` interval; records its latency."""
        key = self._begin("tool")
        result = "Error: the tool call did not finish"
        try:
            result = call()
            return result
        finally:
            latency = self._end("tool", key)
            ok = not (isinstance(result, str) and result.startswith("Error:"))
            with self._lock:
                self._calls.append(ToolCallTiming(tool, latency, ok))

    def settle(self) -> Activity:
        """Account everything since the previous ``settle``; open intervals count up to now."""
        with self._lock:
            now = self._clock()
            spans = {}
            for kind in KINDS:
                spans[kind] = self._closed[kind] + [(max(s, self._since), now) for s in self._open[kind].values()]
                self._closed[kind] = []
            calls, self._calls = self._calls, []
            self._since = now
        report = account(spans["active"], spans["engine"], spans["tool"])
        report.tool_calls = calls
        return report
