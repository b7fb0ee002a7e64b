"""``APIMultiTurnRollout``: multi-turn tool-calling rollouts against an OpenAI-compatible endpoint.

Built for rollout farms: every trajectory is a coroutine on one asyncio event loop, so thousands
can be in flight without thousands of threads. ``concurrency`` bounds the API calls in flight;
synchronous tools run off the loop on a bounded thread pool (``tool_workers``). Each trajectory
fails alone: its error becomes ``stop_reason='api_error'`` plus ``error``, and the batch goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from twinkle_agentic.data_format import SamplingParams, Trajectory
from twinkle_agentic.remote import remote_class

from .base import (
    API_ERROR,
    LENGTH,
    MAX_TURNS,
    STOP,
    Rollout,
    ToolManagerSpec,
    check_max_turns,
    check_sampling_params,
    finish,
    format_error,
    normalise_tool_calls,
    open_tool_manager,
    prepare_trajectories,
    request_tools,
    resolve_tool_managers,
    tool_message,
    tools_report_done,
)
from .traces import TraceWriter, TrajectoryPredicate

DEFAULT_TOOL_WORKERS_MAX = 64


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
    ``stop_reason``, ``truncated`` and ``error`` when set.
    """

    def __init__(
        self,
        api: Any,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        max_turns: int = 6,
        concurrency: int = 8,
        extra_body: Mapping[str, Any] | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        trace_callback: TrajectoryPredicate | None = None,
        success_callback: TrajectoryPredicate | None = None,
        *,
        tool_workers: int | None = None,
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
        if tool_workers is not None and (not isinstance(tool_workers, int) or tool_workers < 1):
            raise ValueError(f"tool_workers must be None or an integer >= 1, got {tool_workers!r}")
        self.api = api
        self.tool_manager = tool_manager
        self.sampling_params = check_sampling_params(sampling_params)
        self.max_turns = check_max_turns(max_turns)
        self.concurrency = concurrency
        self.extra_body = _check_extra_body(extra_body)
        self.tool_workers = tool_workers or max(4, min(DEFAULT_TOOL_WORKERS_MAX, concurrency))
        self.traces = TraceWriter.maybe(trace_dir, trace_callback, success_callback)

    def __call__(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        extra_body: Mapping[str, Any] | None = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        coroutine = self.arun(trajectories, sampling_params, tool_manager, extra_body, global_step)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coroutine)
        # called from inside a running loop (notebook, async actor): use a private loop thread
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="api-rollout") as runner:
            return runner.submit(asyncio.run, coroutine).result()

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
        api_slots = asyncio.Semaphore(self.concurrency)
        session = getattr(self.api, "session", None)
        async with session() if callable(session) else contextlib.nullcontext():
            with concurrent.futures.ThreadPoolExecutor(self.tool_workers, thread_name_prefix="api-rollout-tool") as pool:
                run = _TrajectoryRun(self, params, call_kwargs, api_slots, pool)
                await asyncio.gather(*(run(t, spec) for t, spec in zip(batch, specs, strict=True)))
        if self.traces is not None:
            self.traces.write(batch, global_step)
        return batch


class _TrajectoryRun:
    """The per-trajectory turn loop, sharing the batch's API slots and tool pool."""

    def __init__(self, rollout: APIMultiTurnRollout, params: SamplingParams, call_kwargs: dict[str, Any],
                 api_slots: asyncio.Semaphore, pool: concurrent.futures.Executor):
        self.api = rollout.api
        self.max_turns = rollout.max_turns
        self.params = params
        self.call_kwargs = call_kwargs
        self.api_slots = api_slots
        self.pool = pool

    async def _in_pool(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def _ask(self, request: dict[str, Any]) -> Any:
        async with self.api_slots:
            acall = getattr(self.api, "acall", None)
            if acall is not None:
                return await acall(request, self.params, **self.call_kwargs)
            return await asyncio.to_thread(self.api, request, self.params, **self.call_kwargs)

    async def __call__(self, trajectory: dict[str, Any], spec: ToolManagerSpec) -> None:
        try:
            manager, owned = await self._in_pool(open_tool_manager, spec, trajectory)
        except Exception as exc:
            finish(trajectory, API_ERROR, 0, format_error(exc, "ToolManager"))
            return
        try:
            await self._turns(trajectory, manager)
        except Exception as exc:  # a bug must cost one trajectory, not the batch
            finish(trajectory, API_ERROR, trajectory.get("turns", 0), format_error(exc))
        finally:
            if owned and manager is not None:
                await self._in_pool(manager.close)

    async def _turns(self, trajectory: dict[str, Any], manager: Any) -> None:
        messages: list[dict[str, Any]] = trajectory["messages"]
        request: dict[str, Any] = {"messages": messages}
        tools = request_tools(trajectory, manager)
        if tools:
            request["tools"] = tools
        turns = 0
        trajectory["turns"] = 0
        while True:
            try:
                reply = _assistant_message(await self._ask(request))
            except Exception as exc:
                finish(trajectory, API_ERROR, turns, format_error(exc))
                return
            turns += 1
            calls = normalise_tool_calls(reply.get("tool_calls"), turns)
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
