"""Tool calls for the asynchronous rollout: per-tool concurrency limits, timeouts and cancellation.

A ``ToolScheduler`` runs the calls of one event loop's trajectories. Every call first takes a slot of
its tool (``max_concurrency`` calls of one tool at once; tools not named in ``tool_limits`` get the
default limit each), then runs under its tool's ``timeout_s``, counted from the moment it holds the
slot until its answer. A call never raises into the rollout: a timeout answers
``Error: tool 'x' timed out after Ns.`` and an exception ``Error: tool 'x' raised T: msg`` (the
``ToolManager`` strings), so the model sees the failure and the trajectory goes on.

How a call runs decides what cancelling it means:

- a manager with a coroutine ``acall(tool_call)`` is awaited on the loop; a timeout (or the rollout
  cancelling the trajectory) cancels that coroutine for real;
- a plain ``manager(tool_call)`` runs on a daemon thread (``ThreadRunner``: reused threads, at most
  ``workers`` calls at once), so the loop is never blocked. Python cannot stop a thread: on a timeout
  the call is abandoned, its slot is released at once and the next call gets another thread (a hung
  tool never starves the others), and its result, if it ever comes, is discarded. Abandoned threads
  are daemons (they never keep a process alive) and are counted in ``ToolStats.abandoned``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

DEFAULT_TOOL_TIMEOUT_S = 60.0  # as a RemoteTool's HTTP timeout: a hung tool costs a minute, not the batch
DEFAULT_TOOL_WORKERS = 32


class ToolLimitError(ConfigError):
    """A ``tool_limits`` entry is malformed; the message names the tool and the setting."""


@dataclass(frozen=True)
class ToolLimit:
    """How one tool may be called: ``max_concurrency`` calls at once (None: no limit) and
    ``timeout_s`` per call (None: wait as long as it takes)."""

    max_concurrency: int | None = None
    timeout_s: float | None = DEFAULT_TOOL_TIMEOUT_S

    def __post_init__(self) -> None:
        c, t = self.max_concurrency, self.timeout_s
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ToolLimitError(f"max_concurrency must be None or an integer >= 1, got {c!r}")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0):
            raise ToolLimitError(f"timeout_s must be None or a number > 0, got {t!r}")

    @classmethod
    def parse(
        cls, value: ToolLimit | Mapping[str, Any] | None, where: str, base: ToolLimit | None = None
    ) -> ToolLimit:
        """A ``ToolLimit`` from itself, a mapping (keys missing take ``base``'s values) or None (``base``)."""
        base = base or cls()
        if value is None:
            return base
        if isinstance(value, ToolLimit):
            return value
        if not isinstance(value, Mapping):
            raise ToolLimitError(
                f"{where} must be a mapping with max_concurrency / timeout_s, got {type(value).__name__}"
            )
        unknown = sorted(set(value) - {"max_concurrency", "timeout_s"})
        if unknown:
            raise ToolLimitError(
                f"{where}: unknown key(s) {unknown}; known: ['max_concurrency', 'timeout_s']"
            )
        merged = {"max_concurrency": base.max_concurrency, "timeout_s": base.timeout_s, **value}
        try:
            return cls(**merged)
        except ToolLimitError as exc:
            raise ToolLimitError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class ToolLimits:
    """Per-tool limits and the default for every other tool."""

    per_tool: Mapping[str, ToolLimit] = field(default_factory=dict)
    default: ToolLimit = field(default_factory=ToolLimit)

    @classmethod
    def parse(
        cls, tool_limits: Mapping[str, Any] | None, default: ToolLimit | Mapping[str, Any] | None = None
    ) -> ToolLimits:
        """``tool_limits={'get_weather': {'max_concurrency': 4, 'timeout_s': 5}}``; a tool's missing keys
        take the default's values."""
        base = ToolLimit.parse(default, "default_tool_limit")
        if tool_limits is None:
            return cls({}, base)
        if not isinstance(tool_limits, Mapping):
            raise ToolLimitError(
                f"tool_limits must map tool names to limits, got {type(tool_limits).__name__}"
            )
        per_tool = {}
        for name, value in tool_limits.items():
            if not isinstance(name, str) or not name:
                raise ToolLimitError(f"tool_limits keys must be tool names, got {name!r}")
            per_tool[name] = ToolLimit.parse(value, f"tool_limits[{name!r}]", base)
        return cls(per_tool, base)

    def of(self, tool: str) -> ToolLimit:
        return self.per_tool.get(tool, self.default)


@dataclass
class ToolUsage:
    """Calls of one tool in one rollout call. ``errors`` counts every ``Error:`` answer (timeouts and
    exceptions included); ``cancelled`` calls were stopped because their trajectory was cancelled."""

    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    raised: int = 0
    cancelled: int = 0
    max_in_flight: int = 0
    latencies_s: list[float] = field(default_factory=list)


@dataclass
class ToolStats:
    tools: dict[str, ToolUsage] = field(default_factory=dict)
    abandoned: int = 0  # sync calls given up on (timeout or cancellation) while their thread still ran

    def usage(self, tool: str) -> ToolUsage:
        return self.tools.setdefault(tool, ToolUsage())

    def totals(self) -> dict[str, int]:
        keys = ("calls", "errors", "timeouts", "raised", "cancelled")
        out = {k: sum(getattr(u, k) for u in self.tools.values()) for k in keys}
        out["abandoned"] = self.abandoned
        return out


def call_name(tool_call: Any) -> str:
    """The function name a call asks for ('' when the call is malformed: the manager answers it)."""
    function = tool_call.get("function") if isinstance(tool_call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else ""


class ThreadRunner:
    """Runs blocking functions on daemon threads, at most ``workers`` at once, awaitable with a timeout.

    Unlike ``ThreadPoolExecutor`` (whose threads the interpreter joins at exit), a hung function here
    never keeps the process alive, and a call given up on frees its slot immediately: the next call
    gets another thread. Threads are reused: a finished one waits ``idle_s`` for the next function
    before it exits, so a call costs a queue hand-off, not a thread start (which blocks the event loop
    until the new thread runs, a few milliseconds on a busy machine).
    """

    def __init__(self, workers: int = DEFAULT_TOOL_WORKERS, name: str = "rollout-tool", idle_s: float = 30.0):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"tool workers must be an integer >= 1, got {workers!r}")
        self.workers = workers
        self.name = name
        self.idle_s = idle_s
        self._slots = asyncio.Semaphore(workers)
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a job and not yet promised one
        self.threads_started = 0

    def _submit(self, fn: Callable[[], Any], done: Callable[[tuple[bool, Any]], None]) -> None:
        """Run ``fn`` on an idle thread, else on a new one, then ``done((ok, result or exception))``.
        Promises are made under the lock, so no idle thread exits between being promised a job and
        taking it."""
        with self._lock:
            self._jobs.put((fn, done))
            if self._idle:
                self._idle -= 1
                return
            self.threads_started += 1
        threading.Thread(target=self._work, name=self.name, daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                fn, done = self._jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():  # nobody promised this thread a job: it may go
                        self._idle -= 1
                        return
                continue
            try:
                outcome = (True, fn())
            except BaseException as exc:  # handed to the awaiting coroutine
                outcome = (False, exc)
            with self._lock:  # idle before the answer is out: the caller's next call reuses this thread
                self._idle += 1
            done(outcome)

    async def run(self, fn: Callable[[], Any], timeout_s: float | None = None) -> Any:
        """``fn()`` off the loop; its exception is re-raised here; ``TimeoutError`` after ``timeout_s``."""
        ok, value = await self.settle(fn, timeout_s)
        if not ok:
            raise value
        return value

    async def settle(
        self, fn: Callable[[], Any], timeout_s: float | None = None, stats: ToolStats | None = None
    ) -> tuple[bool, Any]:
        """``(True, result)`` or ``(False, exception)``; only our own timeout raises ``TimeoutError``
        (a function that raises ``TimeoutError`` itself comes back as ``(False, exc)``). A call given up
        on while its thread still runs is counted in ``stats.abandoned``."""
        loop = asyncio.get_running_loop()
        async with self._slots:
            answer: asyncio.Future = loop.create_future()

            def deliver(outcome: tuple[bool, Any]) -> None:
                if not answer.done():
                    answer.set_result(outcome)

            def done(outcome: tuple[bool, Any]) -> None:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                    loop.call_soon_threadsafe(deliver, outcome)

            self._submit(fn, done)
            try:
                return await asyncio.wait_for(answer, timeout_s)
            finally:
                if stats is not None and (not answer.done() or answer.cancelled()):
                    stats.abandoned += 1


class ToolScheduler:
    """Runs tool calls under per-tool limits (see the module docstring); one per event loop, shared by
    every rollout call on it. Usage is recorded into the ``ToolStats`` each call passes in."""

    def __init__(self, limits: ToolLimits | None = None, workers: int = DEFAULT_TOOL_WORKERS):
        self.limits = limits or ToolLimits()
        self.runner = ThreadRunner(workers)
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._in_flight: Counter[str] = Counter()

    async def run_turn(
        self, manager: Any, calls: Sequence[Any], stats: ToolStats, parallel: bool = False
    ) -> list[str]:
        """One answer per call, in call order; calls run one after another unless ``parallel``."""
        if parallel and len(calls) > 1:
            return list(await asyncio.gather(*(self.run_call(manager, call, stats) for call in calls)))
        return [await self.run_call(manager, call, stats) for call in calls]

    def _slot(self, tool: str) -> contextlib.AbstractAsyncContextManager:
        limit = self.limits.of(tool).max_concurrency
        if limit is None:
            return contextlib.nullcontext()
        if tool not in self._slots:
            self._slots[tool] = asyncio.Semaphore(limit)
        return self._slots[tool]

    async def run_call(self, manager: Any, call: Any, stats: ToolStats) -> str:
        tool = call_name(call)
        timeout_s = self.limits.of(tool).timeout_s
        usage = stats.usage(tool)
        async with self._slot(tool):
            usage.calls += 1
            self._in_flight[tool] += 1
            usage.max_in_flight = max(usage.max_in_flight, self._in_flight[tool])
            start = time.perf_counter()
            try:
                ok, value = await self._dispatch(manager, call, timeout_s, stats)
                if ok:
                    answer = str(value)
                else:
                    usage.raised += 1
                    answer = f"Error: tool '{tool}' raised {type(value).__name__}: {value}"
            except TimeoutError:
                usage.timeouts += 1
                answer = f"Error: tool '{tool}' timed out after {timeout_s:g}s."
            except asyncio.CancelledError:
                usage.cancelled += 1
                raise
            finally:
                self._in_flight[tool] -= 1
                usage.latencies_s.append(time.perf_counter() - start)
        usage.errors += answer.startswith("Error:")
        return answer

    async def _dispatch(
        self, manager: Any, call: Any, timeout_s: float | None, stats: ToolStats
    ) -> tuple[bool, Any]:
        acall = getattr(manager, "acall", None)
        if acall is not None and inspect.iscoroutinefunction(acall):

            async def settle() -> tuple[bool, Any]:
                try:
                    return True, await acall(call)
                except Exception as exc:
                    return False, exc

            return await asyncio.wait_for(settle(), timeout_s)
        return await self.runner.settle(lambda: manager(call), timeout_s, stats)
