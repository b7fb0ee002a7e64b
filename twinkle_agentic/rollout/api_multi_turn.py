"""``APIMultiTurnRollout``: multi-turn tool-calling rollouts against an OpenAI-compatible endpoint.

Built for rollout farms: every trajectory is a coroutine on one asyncio event loop, so thousands
can be in flight without thousands of threads. ``concurrency`` bounds the API calls in flight;
synchronous tools run off the loop on a bounded thread pool (``tool_concurrency``). Each trajectory
fails alone: its error becomes ``stop_reason='api_error'`` plus ``error``, and the batch goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from twinkle_agentic.data_format import SamplingParams, Trajectory
from twinkle_agentic.protocol import event_loops
from twinkle_agentic.remote import remote_class

from .base import (
    API_ERROR,
    DEFAULT_MAX_TURNS,
    LENGTH,
    MAX_TURNS,
    STOP,
    Rollout,
    ToolManagerSpec,
    check_max_turns,
    check_sampling_params,
    check_tool_concurrency,
    finish,
    format_error,
    is_tool_manager,
    open_tool_manager,
    prepare_trajectories,
    request_tools,
    resolve_tool_managers,
    tool_message,
    tools_report_done,
    with_call_ids,
)
from .traces import TrajectoryPredicate, TrajectoryTraces

TOOL_CONCURRENCY_MAX = 64  # the most threads the default tool pool gets


@remote_class()
class APIMultiTurnRollout(Rollout):
    """Roll trajectories out through ``api`` (usually ``protocol.OpenAI``), running tool calls with
    ``tool_manager``.

    ``tool_manager``: a ``ToolManager`` shared by all trajectories (its tools must be thread-safe),
    a list with one per trajectory, or a factory ``f(trajectory) -> ToolManager`` that builds a
    fresh manager per trajectory (for stateful tools such as an ``OpenEnv`` session; the rollout
    closes what it built). An empty ``ToolManager()`` serves tool-less chats.

    Each turn: call the API (messages sanitised by the client), store the reply (None content ->
    ``''``, missing call ids -> ``call_{turn}_{i}``, ``finish_reason`` kept on the stored message),
    then stop on the first of: ``finish_reason == 'length'`` -> ``length``; no tool calls ->
    ``stop``; ``turns >= max_turns`` -> ``max_turns`` (its calls are not run). Otherwise run every
    call in order and append one ``{role:'tool', tool_call_id, content}`` each. When a called tool
    reports ``done`` (an ``EnvTool`` whose environment ended the episode), the trajectory ends with
    ``stop``: the episode is complete, not truncated, and the model is not asked to answer an
    environment that is over. API failures (after the client's retries) and a manager that raises
    end the trajectory with ``api_error``.

    Output: the input trajectory plus ``messages``, ``turns`` (assistant messages appended),
    ``stop_reason``, ``truncated``, ``error`` when set, and ``policy_version`` / ``policy_versions``,
    always None: an API does not say which weights served it.

    ``concurrency`` is the number of API calls in flight (the seeds' pool size). A trajectory
    keeps its slot from one call to its next while its tools run on the event loop
    (``tool_concurrency=0``), and gives it to a waiting trajectory while they run on the pool.

    Speed (``docs/bench/api_rollout.md``): a blocking call runs on the rollout's own event loop
    (``event_loop``: ``'auto'`` = uvloop when installed), kept between calls so the API client's
    keep-alive connections serve the next batch; ``close()`` releases it. ``tool_concurrency=0`` runs
    tools on the event loop (only for tools that return in microseconds: a slow one stalls every
    trajectory); by default they run on a pool of ``min(64, max(4, concurrency))`` threads.
    """

    def __init__(
        self,
        api: Any,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        concurrency: int = 8,
        extra_body: Mapping[str, Any] | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        trace_callback: TrajectoryPredicate | None = None,
        success_callback: TrajectoryPredicate | None = None,
        *,
        tool_concurrency: int | None = None,
        event_loop: str = "auto",
    ):
        if api is None or not (callable(api) or hasattr(api, "acall")):
            raise ValueError("APIMultiTurnRollout needs api= (e.g. twinkle_agentic.protocol.openai.OpenAI)")
        if tool_manager is None:
            raise ValueError(
                "APIMultiTurnRollout needs tool_manager= (a ToolManager, a list, or a factory); pass "
                "ToolManager() for chats without tools"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        self.event_loop = event_loops.check_event_loop(event_loop)
        self._loop: event_loops.KeptLoop | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.api = api
        self.tool_manager = tool_manager
        self.sampling_params = check_sampling_params(sampling_params)
        self.max_turns = check_max_turns(max_turns)
        self.concurrency = concurrency
        self.extra_body = _check_extra_body(extra_body)
        self.tool_concurrency = (
            max(4, min(TOOL_CONCURRENCY_MAX, concurrency))
            if tool_concurrency is None
            else check_tool_concurrency(tool_concurrency, allow_zero=True)
        )
        self.traces = TrajectoryTraces.maybe(trace_dir, trace_callback, success_callback)

    def __call__(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        extra_body: Mapping[str, Any] | None = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        coroutine = self.arun(trajectories, sampling_params, tool_manager, extra_body, global_step)
        kept = self._kept_loop()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return kept.run(coroutine, self.api)
        # called from inside a running loop (notebook, async actor): run ours on a helper thread
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="api-rollout") as runner:
            return runner.submit(kept.run, coroutine, self.api).result()

    def _kept_loop(self) -> event_loops.KeptLoop:
        """The rollout's own event loop, kept between calls: the API client's connections stay
        open from one batch to the next (``close()`` or garbage collection closes them)."""
        if self._loop is None:
            self._loop = event_loops.KeptLoop(self.event_loop)
            event_loops.close_when_collected(self, self._loop)
        return self._loop

    def _tool_pool(self) -> concurrent.futures.Executor | None:
        """The threads synchronous tools run on, kept between calls like the loop (starting and
        joining dozens of threads per batch costs milliseconds); None when tools run on the loop."""
        if self.tool_concurrency == 0:
            return None
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self.tool_concurrency, thread_name_prefix="api-rollout-tool")
            weakref.finalize(self, self._pool.shutdown, wait=False)
        return self._pool

    def close(self) -> None:
        """Close the kept event loop, the API connections on it and the tool threads (a later call
        opens new ones)."""
        loop, self._loop = self._loop, None
        pool, self._pool = self._pool, None
        if loop is not None:
            loop.close()
        if pool is not None:
            pool.shutdown(wait=True)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loop": None, "_pool": None}

    async def arun(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        extra_body: Mapping[str, Any] | None = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        """The rollout as a coroutine, for callers that already run an event loop."""
        batch = prepare_trajectories(trajectories)
        if not batch:
            return []
        params = self.sampling_params if sampling_params is None else check_sampling_params(sampling_params)
        specs = resolve_tool_managers(tool_manager, self.tool_manager, len(batch))
        body_extra = {**self.extra_body, **_check_extra_body(extra_body)}
        call_kwargs = {"extra_body": body_extra} if body_extra else {}
        session = getattr(self.api, "session", None)
        async with session() if callable(session) else contextlib.nullcontext():
            with _heap_frozen():
                run = _TrajectoryRun(self, params, call_kwargs, asyncio.Semaphore(self.concurrency), self._tool_pool())
                await _run_all(run, list(zip(batch, specs, strict=True)), self.concurrency)
        if self.traces is not None:
            self.traces.write(batch, global_step)
        return batch


async def _run_all(run: _TrajectoryRun, work: list[tuple[dict[str, Any], ToolManagerSpec]], first: int) -> None:
    """Run every trajectory; the first ``first`` start (and send their first calls) before tasks
    are made for the rest, which would only queue for an API slot: creating a task costs ~2 us,
    so a batch of 1,000 would hold its first requests back by ~2 ms."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(run(t, spec)) for t, spec in work[:first]]
    try:
        if len(work) > first:
            await asyncio.sleep(0)
            tasks += [loop.create_task(run(t, spec)) for t, spec in work[first:]]
        await asyncio.gather(*tasks)
    except BaseException:  # cancelled: no trajectory task outlives the batch
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class _TrajectoryRun:
    """The per-trajectory turn loop, sharing the batch's API client, API slots and tool pool.

    A trajectory holds an API slot from its first call until it ends or awaits work off the loop
    (tools on the pool): between two of its calls that run on the loop, the slot is not handed
    to another trajectory and back, which would cost two trips through the event loop's queue
    per turn (measured: docs/bench/api_rollout.md)."""

    def __init__(self, rollout: APIMultiTurnRollout, params: SamplingParams, call_kwargs: dict[str, Any],
                 api_slots: asyncio.Semaphore, pool: concurrent.futures.Executor | None):
        self.api = rollout.api
        bind = getattr(self.api, "bound_acall", None)  # made on the running loop: bound to it
        self.acall = bind() if callable(bind) else getattr(self.api, "acall", None)
        self.max_turns = rollout.max_turns
        self.params = params
        self.call_kwargs = call_kwargs
        self.api_slots = api_slots
        self.pool = pool
        self.manager_tools: dict[int, list[dict[str, Any]]] = {}

    async def _in_pool(self, fn: Any, *args: Any) -> Any:
        if self.pool is None:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def _tools(self, trajectory: dict[str, Any], manager: Any, owned: bool) -> list[dict[str, Any]] | None:
        """The tools to offer; a manager given by the caller (often one shared by the whole batch)
        is asked once per batch, not once per trajectory."""
        if trajectory.get("tools") or manager is None or owned:
            return request_tools(trajectory, manager)
        tools = self.manager_tools.get(id(manager))
        if tools is None:
            tools = self.manager_tools[id(manager)] = request_tools(trajectory, manager) or []
        return tools or None

    async def _ask(self, request: dict[str, Any]) -> Any:
        if self.acall is not None:
            return await self.acall(request, self.params, **self.call_kwargs)
        return await asyncio.to_thread(self.api, request, self.params, **self.call_kwargs)

    async def __call__(self, trajectory: dict[str, Any], spec: ToolManagerSpec) -> None:
        trajectory["policy_version"] = trajectory["policy_versions"] = None
        try:
            if spec is None or is_tool_manager(spec):
                manager, owned = spec, False
            else:  # a factory may open a session: off the loop
                manager, owned = await self._in_pool(open_tool_manager, spec, trajectory)
        except Exception as exc:
            finish(trajectory, API_ERROR, 0, format_error(exc, "ToolManager"))
            return
        slot = _Slot(self.api_slots)
        try:
            await self._turns(trajectory, manager, owned, slot)
        except Exception as exc:  # a bug must cost one trajectory, not the batch
            finish(trajectory, API_ERROR, trajectory.get("turns", 0), format_error(exc))
        finally:
            slot.release()
            if owned and manager is not None:
                await self._in_pool(manager.close)

    async def _turns(self, trajectory: dict[str, Any], manager: Any, owned: bool, slot: _Slot) -> None:
        messages: list[dict[str, Any]] = trajectory["messages"]
        request: dict[str, Any] = {"messages": messages}
        tools = self._tools(trajectory, manager, owned)
        if tools:
            request["tools"] = tools
        turns = 0
        trajectory["turns"] = 0
        while True:
            await slot.hold()
            try:
                reply = _assistant_message(await self._ask(request))
            except Exception as exc:
                finish(trajectory, API_ERROR, turns, format_error(exc))
                return
            turns += 1
            calls = with_call_ids(reply.get("tool_calls"), turns)
            if calls:
                reply["tool_calls"] = calls
            else:
                reply.pop("tool_calls", None)
            messages.append(reply)
            trajectory["turns"] = turns
            if reply.get("finish_reason") == "length":
                finish(trajectory, LENGTH, turns)
                return
            if not calls:
                finish(trajectory, STOP, turns)
                return
            if turns >= self.max_turns:
                finish(trajectory, MAX_TURNS, turns)
                return
            if self.pool is not None:
                slot.release()  # tools run off the loop: the slot serves another trajectory meanwhile
            for index, call in enumerate(calls):
                try:
                    content = await self._in_pool(manager, call)
                except Exception as exc:
                    finish(trajectory, API_ERROR, turns, format_error(exc, "ToolExecution"))
                    return
                messages.append(tool_message(call, str(content), turns, index))
            if tools_report_done(manager, calls):
                finish(trajectory, STOP, turns)
                return


class _Slot:
    """One trajectory's hold on an API slot: taken before a call, kept across turns that stay on
    the loop, given back before work off the loop and at the end."""

    __slots__ = ("slots", "held")

    def __init__(self, slots: asyncio.Semaphore):
        self.slots = slots
        self.held = False

    async def hold(self) -> None:
        if not self.held:
            await self.slots.acquire()
            self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """Leave the objects that exist when the rollout starts out of garbage collection until it ends.

    A full collection walks every tracked object of the process (imported libraries, the
    caller's data): ~60 ms for a typical process here, a stall of every trajectory in flight.
    Frozen, those objects are skipped, so collections during the rollout walk only what the
    rollout allocated. Skipped when collection is disabled or someone else already froze objects.
    """
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _assistant_message(reply: Any) -> dict[str, Any]:
    if isinstance(reply, list) and len(reply) == 1:
        reply = reply[0]
    if not isinstance(reply, Mapping):
        raise TypeError(f"the API returned {type(reply).__name__}, expected one assistant message dict")
    message = dict(reply)
    message["role"] = "assistant"
    if message.get("content") is None:
        message["content"] = ""
    return message


def _check_extra_body(extra_body: Any) -> dict[str, Any]:
    if extra_body is None:
        return {}
    if not isinstance(extra_body, Mapping):
        raise TypeError(f"extra_body must be a dict or None, got {type(extra_body).__name__}")
    return dict(extra_body)
