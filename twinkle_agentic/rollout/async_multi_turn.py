"""``AsyncMultiTurnRollout``: multi-turn rollouts with per-trajectory scheduling and no turn barrier.

``MultiTurnRollout`` makes one batched ``sample`` per turn, so every turn waits for the slowest
generation and the slowest tool call of the batch. Here every trajectory is a coroutine on one event
loop that drives its own ``TrajectoryState`` over vLLM's async engine (``AsyncVLLMSampler.generate``,
or that method on a Ray actor handle): when its generation ends, its tool calls start at once on the
``ToolScheduler`` (per-tool concurrency limits and timeouts, blocking tools on daemon threads), and
its next turn is submitted while the others keep generating. vLLM's continuous batching merges
whatever requests are in flight.

Token bookkeeping is exactly ``MultiTurnRollout``'s: both drive the same state machine
(``trajectory_state.py``), so messages, ``input_ids``, labels, logprobs, policy versions, stop
reasons, truncation, traces and ``token_drift`` follow the same rules (SPEC 17.2). Differences, by design:

- a tool call that raises or times out answers ``Error: ...`` to the model (the sync rollout ends
  the trajectory with ``error`` when its manager raises); ``tool_limits`` set the timeouts;
- a trajectory-level ``FailurePolicy`` may retry, drop or replace failed trajectories
  (``failure_policy.py``); the default keeps them, which is the sync rollout's behaviour;
- a sampler exception fails only its trajectory, except a dead engine (``EngineDeadError``, a dead
  Ray actor), which aborts the call: no trajectory could go on;
- each trajectory's tool manager is closed as soon as that trajectory ends.

Calls from threads share one private event loop per rollout object, so concurrent calls (a farm
worker running several batches) share the tool limits. ``await arun(...)`` runs on the caller's loop.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from twinkle_agentic.data_format import SampledSequence, SamplingParams, Trajectory
from twinkle_agentic.remote import remote_class
from twinkle_agentic.sampler.base import check_responses

from .async_stats import AsyncRolloutStats, BusyClock, TrajectoryTiming
from .base import (
    DEFAULT_MAX_TURNS,
    Rollout,
    ToolManagerSpec,
    check_max_turns,
    check_sampling_params,
    check_tool_concurrency,
    format_error,
    open_tool_manager,
    prepare_trajectories,
    request_tools,
    resolve_tool_managers,
)
from .failure_policy import FailurePolicy, OutcomeBook
from .multi_turn import check_rollout_settings
from .tool_scheduler import DEFAULT_TOOL_WORKERS, ToolLimit, ToolLimits, ToolScheduler
from .traces import TrajectoryTraces
from .trajectory_state import TrajectoryState, with_template_stops

# Exceptions (by class name, anywhere in the MRO) that mean the engine itself is gone.
FATAL_SAMPLER_ERRORS = frozenset(
    {"EngineDeadError", "RayActorError", "ActorDiedError", "ActorUnavailableError"}
)

Generate = Callable[[list[int], SamplingParams], Coroutine[Any, Any, Any]]


def is_fatal_sampler_error(exc: BaseException) -> bool:
    return any(cls.__name__ in FATAL_SAMPLER_ERRORS for cls in type(exc).__mro__)


def request_function(sampler: Any) -> Generate:
    """``await f(prompt_ids, params) -> SampleResponse`` for an async sampler or its Ray actor handle."""
    generate = getattr(sampler, "generate", None)
    if generate is not None and hasattr(generate, "remote"):  # a Ray ActorMethod

        async def via_actor(prompt_ids: list[int], params: SamplingParams) -> Any:
            ref = generate.remote(prompt_ids, params)
            try:
                return await ref
            except asyncio.CancelledError:
                import ray

                ray.cancel(ref)
                raise

        return via_actor
    if generate is not None and inspect.iscoroutinefunction(generate):
        return generate
    raise TypeError(
        f"AsyncMultiTurnRollout needs a sampler with a coroutine generate(prompt_ids, params) (AsyncVLLMSampler, "
        f"or a Ray actor handle of it); {type(sampler).__name__} has none. The offline VLLMSampler serves MultiTurnRollout."
    )


class _BackgroundLoop:
    """A private event loop on a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="async-rollout-loop", daemon=True
                )
                self._thread.start()
            loop = self._loop
        if _running_loop() is loop:
            coro.close()
            raise RuntimeError("called from the rollout's own event loop; use `await rollout.arun(...)`")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt in the caller: stop the rollout too
            raise

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@dataclass
class _Call:
    """What one rollout call's trajectories share."""

    batch: list[dict[str, Any]]
    specs: list[ToolManagerSpec]
    params: SamplingParams
    scheduler: ToolScheduler
    stats: AsyncRolloutStats
    engine: BusyClock
    t0: float

    def now(self) -> float:
        return time.perf_counter() - self.t0


@remote_class()
class AsyncMultiTurnRollout(Rollout):
    """Per-trajectory multi-turn rollouts on an async engine (see the module docstring).

    Arguments as ``MultiTurnRollout`` (``sampler`` must offer a coroutine ``generate``), plus:

    - ``tool_limits``: ``{tool name: {'max_concurrency': int | None, 'timeout_s': float | None}}``;
      ``default_tool_limit`` applies to each tool not named (default: no concurrency limit, 60 s);
    - ``tool_concurrency``: threads for blocking tool calls (and tool-manager factories) at once
      (default 32, more than ``MultiTurnRollout``'s: every trajectory of a call is in flight at
      once, so more blocking calls wait together; a farm worker passes its ``tool_concurrency``);
    - ``parallel_tool_calls``: run the calls of one turn concurrently (default: in order, as the
      sync rollout does; stateful tools such as environment sessions rely on that order);
    - ``failure_policy``: a ``FailurePolicy``, ``'keep'``/``'drop'``, or its fields as a mapping.

    ``last_stats`` holds the ``AsyncRolloutStats`` of the latest call; ``run_with_stats`` returns
    them with the results (for concurrent callers).
    """

    def __init__(
        self,
        sampler: Any,
        template: Any,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_trajectory_tokens: int | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        trace_callback: Callable[[Trajectory], Any] | None = None,
        success_callback: Callable[[Trajectory], Any] | None = None,
        *,
        tool_limits: dict[str, ToolLimit | dict[str, Any]] | None = None,
        default_tool_limit: ToolLimit | dict[str, Any] | None = None,
        tool_concurrency: int = DEFAULT_TOOL_WORKERS,
        parallel_tool_calls: bool = False,
        failure_policy: FailurePolicy | str | dict[str, Any] | None = None,
        verify_tokens: bool = True,
    ):
        check_rollout_settings("AsyncMultiTurnRollout", sampler, template, max_trajectory_tokens)
        self.sampler = sampler
        self._generate = request_function(sampler)
        self.template = template
        self.tool_manager = tool_manager
        self.sampling_params = check_sampling_params(sampling_params)
        self.max_turns = check_max_turns(max_turns)
        self.max_trajectory_tokens = max_trajectory_tokens
        self.tool_limits = ToolLimits.parse(tool_limits, default_tool_limit)
        self.tool_concurrency = check_tool_concurrency(tool_concurrency)
        self.parallel_tool_calls = bool(parallel_tool_calls)
        self.failure_policy = FailurePolicy.parse(failure_policy)
        self.verify_tokens = verify_tokens
        self.tracer = TrajectoryTraces.maybe(trace_dir, trace_callback, success_callback)
        self.last_stats = AsyncRolloutStats()
        self._loop = _BackgroundLoop()
        self._schedulers: WeakKeyDictionary[asyncio.AbstractEventLoop, ToolScheduler] = WeakKeyDictionary()

    # -- entry points ----------------------------------------------------------------------------------

    def __call__(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        return self.run_with_stats(trajectories, sampling_params, tool_manager, global_step)[0]

    def run_with_stats(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        global_step: int | None = None,
    ) -> tuple[list[Trajectory], AsyncRolloutStats]:
        """The results and this call's ``AsyncRolloutStats`` (safe with concurrent calls)."""
        return self._loop.run(self.arun_with_stats(trajectories, sampling_params, tool_manager, global_step))

    async def arun(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        """The rollout as a coroutine on the caller's event loop."""
        return (await self.arun_with_stats(trajectories, sampling_params, tool_manager, global_step))[0]

    async def arun_with_stats(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        global_step: int | None = None,
    ) -> tuple[list[Trajectory], AsyncRolloutStats]:
        batch = prepare_trajectories(trajectories)
        params = (
            check_sampling_params(sampling_params) if sampling_params is not None else self.sampling_params
        )
        if params.logprobs is None:
            params = params.replace(logprobs=0)
        params = with_template_stops(params, self.template)
        specs = resolve_tool_managers(tool_manager, self.tool_manager, len(batch))
        stats = AsyncRolloutStats()
        if not batch:
            return [], stats
        book = OutcomeBook(self.failure_policy, len(batch))
        scheduler = self._scheduler()
        call = _Call(batch, specs, params, scheduler, stats, BusyClock(), time.perf_counter())
        await self._run_all(call, book)
        results = book.results()
        stats.wall_s = call.now()
        stats.engine_busy_s = call.engine.busy_s()
        stats.requests = call.engine.intervals
        stats.attempts = list(book.attempts)
        stats.failures = book.report
        if self.tracer is not None:
            self.tracer.write(book.finished(), global_step)
        self.last_stats = stats
        return results, stats

    def get_last_stats(self) -> AsyncRolloutStats:
        """``last_stats`` (a method, so a Ray actor handle can fetch it)."""
        return self.last_stats

    def close(self) -> None:
        """Stop the private event loop (a later call starts a new one)."""
        self._loop.close()

    # -- scheduling ------------------------------------------------------------------------------------

    def _scheduler(self) -> ToolScheduler:
        loop = asyncio.get_running_loop()
        scheduler = self._schedulers.get(loop)
        if scheduler is None:
            scheduler = self._schedulers[loop] = ToolScheduler(self.tool_limits, self.tool_concurrency)
        return scheduler

    async def _run_all(self, call: _Call, book: OutcomeBook) -> None:
        """Every trajectory as its own task; settle each as it finishes (retry, cancel, keep)."""
        tasks: dict[asyncio.Task, int] = {}

        def launch(index: int) -> None:
            tasks[asyncio.create_task(self._attempt(call, index, book.attempts[index] + 1))] = index

        for index in range(len(call.batch)):
            launch(index)
        try:
            while tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    index = tasks.pop(task)
                    if task.cancelled():
                        continue
                    if task.exception() is not None:  # a dead engine, or a bug: the call fails
                        raise task.exception()
                    if book.settle(index, task.result()):
                        launch(index)
                    else:
                        call.stats.completion_order.append(index)
                cancel = set(book.to_cancel(tasks.values()))
                for task, index in tasks.items():
                    if index in cancel:
                        task.cancel()
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _attempt(self, call: _Call, index: int, attempt: int) -> dict[str, Any]:
        """One trajectory from its prompt to its end (the ``TrajectoryState`` loop)."""
        timing = TrajectoryTiming(index, attempt, call.now())
        call.stats.timings.append(timing)
        trajectory, runner = call.batch[index], call.scheduler.runner
        manager, owned, failure = None, False, None
        try:
            try:
                manager, owned = await runner.run(lambda: open_tool_manager(call.specs[index], trajectory))
            except Exception as exc:  # a factory failing for one trajectory fails only that one
                failure = exc
            state = TrajectoryState(
                trajectory,
                self.template,
                tools=request_tools(trajectory, manager),
                max_turns=self.max_turns,
                max_trajectory_tokens=self.max_trajectory_tokens,
                verify_tokens=self.verify_tokens,
            )
            if failure is not None:
                state.fail(format_error(failure, "ToolManager"))
            ids = None if state.done else state.start()
            while ids is not None:
                seq = await self._sample(call, state, ids, timing)
                calls = None if seq is None else state.on_generation(seq)
                if calls is None:
                    break
                started = call.now()
                answers = await call.scheduler.run_turn(
                    manager, calls, call.stats.tools, self.parallel_tool_calls
                )
                timing.tool_turns.append((started, call.now()))
                ids = state.on_tools(answers)
            result = state.result()
            timing.finished_s, timing.stop_reason = call.now(), result["stop_reason"]
            return result
        except asyncio.CancelledError:
            timing.cancelled = True
            raise
        finally:
            close = getattr(manager, "close", None) if owned else None
            if callable(close):
                await runner.settle(close)

    async def _sample(
        self, call: _Call, state: TrajectoryState, ids: list[int], timing: TrajectoryTiming
    ) -> SampledSequence | None:
        """One engine request; None when it failed (the trajectory then ended with ``error``)."""
        cap = state.max_new_tokens(call.params.max_tokens)
        params = call.params if cap == call.params.max_tokens else call.params.replace(max_tokens=cap)
        started = call.now()
        try:
            with call.engine.track():
                response = await self._generate(ids, params)
            seq = check_responses([response], 1)[0].sequences[0]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_fatal_sampler_error(exc):
                raise
            state.fail(exc)
            return None
        finally:
            timing.generations.append((started, call.now()))
        call.stats.generated_tokens += len(seq.tokens)
        return seq
