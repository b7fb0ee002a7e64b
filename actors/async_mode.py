"""The ``async`` rollout mode: ``AsyncMultiTurnRollout`` over vLLM's async engine in each worker.

Every trajectory advances on its own (no turn barrier), so the engine keeps generating for some
trajectories while others wait for tools. Batches share the engine (``concurrent_batches``: the worker
runs several at once), the rollout's event loop and therefore its per-tool limits. Each generation
request is one ``engine`` interval of the worker's activity and each tool call (timed by the worker's
managers) one ``tool`` interval, so the job summary's engine figures mean the same in both modes.

``RolloutSpec.mode_options`` (the job's ``mode_options:``): ``tool_limits``, ``default_tool_limit``,
``parallel_tool_calls`` and ``failure_policy`` as ``AsyncMultiTurnRollout`` takes them. In a farm the
failure policy may retry (``max_retries``) but must keep what still fails (``on_failure: keep``): the
farm returns every trajectory exactly once, and its journal resumes by trajectory id. Each returned
trajectory carries ``rollout_attempts`` (1 + the retries it took).
"""

from __future__ import annotations

from typing import Any

from twinkle_agentic.data_format import SamplingParams, Trajectory

from .config import FarmConfigError
from .modes import EngineMode, engine_template

OPTION_KEYS = ("tool_limits", "default_tool_limit", "parallel_tool_calls", "failure_policy")


class TimedAsyncSampler:
    """An async sampler whose every ``generate`` request is recorded as an engine interval."""

    def __init__(self, sampler: Any, recorder: Any):
        self._sampler = sampler
        self._recorder = recorder

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None, request_id: str | None = None
    ):
        with self._recorder.span("engine"):
            return await self._sampler.generate(prompt_ids, params, request_id)


class AsyncRollout(EngineMode):
    """``AsyncMultiTurnRollout`` on an ``AsyncVLLMSampler`` (see the module docstring)."""

    concurrent_batches = True

    @staticmethod
    def check_options(options: dict[str, Any]) -> dict[str, Any]:
        """The mode options as ``AsyncMultiTurnRollout`` keyword arguments; ``FarmConfigError`` names a bad one."""
        from twinkle_agentic.rollout.failure_policy import FailurePolicy, FailurePolicyError
        from twinkle_agentic.rollout.tool_scheduler import ToolLimitError, ToolLimits

        if not isinstance(options, dict):
            raise FarmConfigError(f"mode_options must be a mapping, got {type(options).__name__}")
        unknown = sorted(set(options) - set(OPTION_KEYS))
        if unknown:
            raise FarmConfigError(
                f"mode_options: unknown key(s) {unknown} for mode 'async'; known: {list(OPTION_KEYS)}"
            )
        try:
            ToolLimits.parse(options.get("tool_limits"), options.get("default_tool_limit"))
            policy = FailurePolicy.parse(options.get("failure_policy"))
        except (ToolLimitError, FailurePolicyError) as exc:
            raise FarmConfigError(f"mode_options: {exc}") from None
        if policy.on_failure != "keep":
            raise FarmConfigError(
                f"mode_options.failure_policy: on_failure={policy.on_failure!r} cannot be used in a farm, which returns "
                "every trajectory exactly once (its journal resumes by id); use max_retries, and filter on "
                "stop_reason downstream"
            )
        if not isinstance(options.get("parallel_tool_calls", False), bool):
            raise FarmConfigError("mode_options.parallel_tool_calls must be true or false")
        return dict(options)

    def __init__(self, engine: Any, spec: Any, recorder: Any):
        from twinkle_agentic.rollout.async_multi_turn import AsyncMultiTurnRollout
        from twinkle_agentic.sampler import AsyncVLLMSampler

        options = self.check_options(dict(spec.mode_options))
        self.sampler = AsyncVLLMSampler(engine.model, **engine.sampler_kwargs())
        self.template = engine_template(engine, spec, self.sampler)
        self.rollout_impl = AsyncMultiTurnRollout(
            TimedAsyncSampler(self.sampler, recorder),
            self.template,
            sampling_params=spec.sampling,
            max_turns=spec.max_turns,
            max_trajectory_tokens=spec.max_trajectory_tokens,
            tool_concurrency=spec.tool_concurrency,
            verify_tokens=spec.verify_tokens,
            **options,
        )

    def rollout(self, trajectories: list[Trajectory], managers: list[Any]) -> list[Trajectory]:
        from twinkle_agentic.rollout.async_multi_turn import is_fatal_sampler_error

        try:
            results, stats = self.rollout_impl.run_with_stats(trajectories, tool_manager=managers)
        except Exception as exc:
            if is_fatal_sampler_error(exc) or "shut down" in str(exc):
                self._dead = exc
            raise
        for result, attempts in zip(results, stats.attempts, strict=True):
            result["rollout_attempts"] = attempts
        return results

    def shutdown(self) -> None:
        self.rollout_impl.close()
        self.sampler.shutdown()
