"""``MultiTurnRollout``: batched multi-turn tool-calling rollouts on a sampler (SPEC 17.2).

Each turn makes one ``sampler.sample`` call over every active trajectory, runs the tool calls the
turn produced (trajectories in parallel, each trajectory's calls in order), and appends the bridge
tokens. All per-trajectory decisions live in ``TrajectoryState``; this module only drives states in
lockstep, resolves tool managers, talks to local or Ray-actor samplers, times the phases, and writes
traces.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.data_format import SamplingParams, Trajectory
from twinkle_agentic.remote import remote_class
from twinkle_agentic.sampler.base import check_responses, pad_for_data_parallel

from .base import (
    DEFAULT_MAX_TURNS,
    DEFAULT_TOOL_CONCURRENCY,
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
from .traces import TrajectoryTraces
from .trajectory_state import TrajectoryState, run_tool_calls, with_template_stops


@dataclass
class TurnTiming:
    """Where one turn's time went: the batched sample call, the tool calls, and everything else."""

    turn: int
    active: int
    generated_tokens: int
    engine_s: float
    tools_s: float
    bookkeeping_s: float


@dataclass
class RolloutStats:
    """Timings of the last ``__call__`` (``MultiTurnRollout.last_stats``)."""

    turns: list[TurnTiming] = field(default_factory=list)
    setup_s: float = 0.0
    finish_s: float = 0.0

    def totals(self) -> dict[str, float]:
        return {
            "engine_s": sum(t.engine_s for t in self.turns),
            "tools_s": sum(t.tools_s for t in self.turns),
            "bookkeeping_s": sum(t.bookkeeping_s for t in self.turns) + self.setup_s + self.finish_s,
            "generated_tokens": sum(t.generated_tokens for t in self.turns),
        }


def check_rollout_settings(owner: str, sampler: Any, template: Any, max_trajectory_tokens: Any) -> None:
    """The construction checks every engine rollout shares (SPEC 17.2)."""
    if sampler is None:
        raise ValueError(f"{owner} needs a sampler (a local sampler or a Ray actor handle)")
    if template is None:
        raise ValueError(f"{owner} needs a template (twinkle_agentic.template.Template)")
    if getattr(template, "truncation_strategy", None) == "split":
        raise ValueError("template truncation_strategy 'split' cannot be used for rollouts; use 'raise', 'left' or 'right'")
    if max_trajectory_tokens is not None and (
        isinstance(max_trajectory_tokens, bool) or not isinstance(max_trajectory_tokens, int) or max_trajectory_tokens < 1
    ):
        raise ValueError(f"max_trajectory_tokens must be None or an integer >= 1, got {max_trajectory_tokens!r}")


def _is_actor_method(method: Any) -> bool:
    """A Ray ``ActorMethod`` (``handle.sample``) has ``.remote``; a bound method does not."""
    return hasattr(method, "remote")


@remote_class()
class MultiTurnRollout(Rollout):
    """Multi-turn rollouts with training-grade token bookkeeping.

    ``sampler`` is a local sampler or a Ray actor handle of one. ``tool_manager`` (here or per call)
    is a ``ToolManager``, a factory ``f(trajectory) -> ToolManager`` for stateful tools, or a list of
    either aligned with the trajectories. Tool calls of different trajectories run on up to
    ``tool_concurrency`` threads. ``verify_tokens`` re-renders each finished trajectory and records the
    difference from its token stream as ``token_drift`` (0 when the messages reproduce the tokens).
    Requests always ask for the sampled token's logprob (``logprobs=0`` when unset). Each output
    carries ``policy_version`` (the weights' version that generated its last token) and
    ``policy_versions`` (``{version, start, end}`` spans over ``input_ids``, one per assistant turn or
    more where a weight update landed inside a turn); None where the sampler does not report versions.
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
        tool_concurrency: int = DEFAULT_TOOL_CONCURRENCY,
        verify_tokens: bool = True,
    ):
        check_rollout_settings("MultiTurnRollout", sampler, template, max_trajectory_tokens)
        self.sampler = sampler
        self.template = template
        self.tool_manager = tool_manager
        self.sampling_params = check_sampling_params(sampling_params)
        self.max_turns = check_max_turns(max_turns)
        self.max_trajectory_tokens = max_trajectory_tokens
        self.tool_concurrency = check_tool_concurrency(tool_concurrency)
        self.verify_tokens = verify_tokens
        self.tracer = TrajectoryTraces.maybe(trace_dir, trace_callback, success_callback)
        self.last_stats = RolloutStats()

    def __call__(
        self,
        trajectories: list[Trajectory],
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        tool_manager: ToolManagerSpec | Sequence[ToolManagerSpec] = None,
        global_step: int | None = None,
    ) -> list[Trajectory]:
        trajectories = prepare_trajectories(trajectories)
        params = check_sampling_params(sampling_params) if sampling_params is not None else self.sampling_params
        if params.logprobs is None:
            params = params.replace(logprobs=0)
        params = with_template_stops(params, self.template)
        specs = resolve_tool_managers(tool_manager, self.tool_manager, len(trajectories))
        if not trajectories:
            return []
        stats = self.last_stats = RolloutStats()
        t0 = time.perf_counter()
        managers: list[Any] = []
        owned: list[Any] = []
        failures: dict[int, BaseException] = {}
        try:
            for index, (spec, trajectory) in enumerate(zip(specs, trajectories, strict=True)):
                try:
                    manager, is_owned = open_tool_manager(spec, trajectory)
                except Exception as exc:  # a factory failing for one trajectory fails only that one
                    manager, is_owned, failures[index] = None, False, exc
                managers.append(manager)
                if is_owned:
                    owned.append(manager)
            states = [
                TrajectoryState(
                    trajectory,
                    self.template,
                    tools=request_tools(trajectory, manager),
                    max_turns=self.max_turns,
                    max_trajectory_tokens=self.max_trajectory_tokens,
                    verify_tokens=self.verify_tokens,
                )
                for trajectory, manager in zip(trajectories, managers, strict=True)
            ]
            for index, exc in failures.items():
                states[index].fail(format_error(exc, "ToolManager"))
            prompts = {i: ids for i, state in enumerate(states) if not state.done and (ids := state.start()) is not None}
            stats.setup_s = time.perf_counter() - t0
            with ThreadPoolExecutor(self.tool_concurrency, thread_name_prefix="rollout-tools") as pool:
                while prompts:
                    prompts = self._turn(states, managers, prompts, params, pool, stats)
            t1 = time.perf_counter()
            results = [state.result() for state in states]
        finally:
            for manager in owned:
                close = getattr(manager, "close", None)
                if callable(close):
                    close()
        if self.tracer is not None:
            self.tracer.write(results, global_step)
        stats.finish_s = time.perf_counter() - t1
        return results

    def _turn(
        self,
        states: list[TrajectoryState],
        managers: list[Any],
        prompts: dict[int, list[int]],
        params: SamplingParams,
        pool: ThreadPoolExecutor,
        stats: RolloutStats,
    ) -> dict[int, list[int]]:
        """One turn over the active trajectories; returns the next turn's prompts."""
        t0 = time.perf_counter()
        active = list(prompts)
        inputs = [{"input_ids": prompts[i]} for i in active]
        caps = [states[i].max_new_tokens(params.max_tokens) for i in active]
        turn_params: SamplingParams | list[SamplingParams] = (
            params if all(c == params.max_tokens for c in caps) else [params.replace(max_tokens=c) for c in caps]
        )
        t1 = time.perf_counter()
        responses = self._sample(inputs, turn_params)
        t2 = time.perf_counter()
        calls = {}
        generated = 0
        for i, response in zip(active, responses, strict=True):
            seq = response.sequences[0]
            generated += len(seq.tokens)
            turn_calls = states[i].on_generation(seq)
            if turn_calls is not None:
                calls[i] = turn_calls
        t3 = time.perf_counter()
        futures = {i: pool.submit(run_tool_calls, managers[i], c) for i, c in calls.items()}
        outcomes = {}
        for i, future in futures.items():
            try:
                outcomes[i] = future.result()
            except Exception as exc:
                outcomes[i] = exc
        t4 = time.perf_counter()
        next_prompts = {}
        for i, outcome in outcomes.items():
            ids = states[i].on_tools(outcome)
            if ids is not None:
                next_prompts[i] = ids
        t5 = time.perf_counter()
        stats.turns.append(
            TurnTiming(
                turn=len(stats.turns) + 1,
                active=len(active),
                generated_tokens=generated,
                engine_s=t2 - t1,
                tools_s=t4 - t3,
                bookkeeping_s=(t1 - t0) + (t3 - t2) + (t5 - t4),
            )
        )
        return next_prompts

    def _sample(self, inputs: list[dict[str, Any]], params: SamplingParams | list[SamplingParams]) -> list[Any]:
        """One batched call; pads for a data-parallel sampler and trims; sampler exceptions propagate."""
        count = len(inputs)
        mesh = getattr(self.sampler, "device_mesh", None)
        world = int(getattr(mesh, "data_world_size", 1) or 1)
        padded = pad_for_data_parallel(inputs, world)
        if isinstance(params, list):
            params = pad_for_data_parallel(params, world)
        if _is_actor_method(getattr(self.sampler, "sample", None)):
            import ray

            responses = ray.get(self.sampler.sample.remote(padded, params))
        else:
            responses = self.sampler.sample(padded, params)
        return check_responses(responses, len(padded))[:count]

    def get_last_stats(self) -> RolloutStats:
        """``last_stats`` (a method, so a Ray actor handle can fetch it)."""
        return self.last_stats
