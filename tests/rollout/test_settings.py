"""One name and one default per rollout setting: the farm's ``RolloutSpec`` and the rollout classes
spell ``max_turns`` and ``tool_concurrency`` alike, take their defaults from ``rollout.base``, and
refuse a bad value naming the setting."""

from __future__ import annotations

import inspect

import pytest
from twinkle_agentic.actors.config import RolloutSpec

from tests.support.async_fakes import AsyncScriptedSampler
from tests.support.scripted_sampler import ScriptedSampler
from twinkle_agentic.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle_agentic.rollout.async_multi_turn import AsyncMultiTurnRollout
from twinkle_agentic.rollout.base import DEFAULT_MAX_TURNS, DEFAULT_TOOL_CONCURRENCY
from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
from twinkle_agentic.rollout.trajectory_state import TrajectoryState
from twinkle_agentic.tools.tool_manager import ToolManager

ROLLOUTS = (MultiTurnRollout, AsyncMultiTurnRollout, APIMultiTurnRollout)


def parameters(cls) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(cls.__init__).parameters)


def test_max_turns_has_one_default():
    defaults = {parameters(cls)["max_turns"].default for cls in (*ROLLOUTS, TrajectoryState)}
    assert defaults == {DEFAULT_MAX_TURNS} and RolloutSpec().max_turns == DEFAULT_MAX_TURNS


def test_every_rollout_takes_tool_concurrency_by_that_name():
    for cls in ROLLOUTS:
        assert "tool_concurrency" in parameters(cls) and "tool_workers" not in parameters(cls), cls.__name__
    assert RolloutSpec().tool_concurrency == DEFAULT_TOOL_CONCURRENCY
    assert parameters(MultiTurnRollout)["tool_concurrency"].default == DEFAULT_TOOL_CONCURRENCY


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8"])
def test_engine_rollouts_refuse_a_bad_tool_concurrency_by_name(tiny_template, value):
    sampler = ScriptedSampler(tiny_template, {})
    with pytest.raises(ValueError, match=r"tool_concurrency must be a positive integer"):
        MultiTurnRollout(sampler, tiny_template, tool_concurrency=value)
    with pytest.raises(ValueError, match=r"tool_concurrency must be a positive integer"):
        AsyncMultiTurnRollout(AsyncScriptedSampler(sampler, {}, {}, RuntimeError), tiny_template, tool_concurrency=value)


def test_api_rollout_tool_concurrency_zero_runs_tools_on_the_loop_and_none_is_derived():
    def api(*args, **kwargs):
        raise AssertionError("not called")

    assert APIMultiTurnRollout(api, ToolManager(), tool_concurrency=0).tool_concurrency == 0
    assert APIMultiTurnRollout(api, ToolManager(), concurrency=16).tool_concurrency == 16
    with pytest.raises(ValueError, match=r"tool_concurrency must be an integer >= 0"):
        APIMultiTurnRollout(api, ToolManager(), tool_concurrency=-1)


def test_async_rollout_runs_blocking_tools_on_tool_concurrency_threads(tiny_template):
    script = {"Hi": ["Hello."]}
    sampler = AsyncScriptedSampler(ScriptedSampler(tiny_template, script), {}, {}, RuntimeError)
    rollout = AsyncMultiTurnRollout(sampler, tiny_template, tool_manager=ToolManager(), tool_concurrency=3)
    try:
        (out,) = rollout([{"messages": [{"role": "user", "content": "Hi"}]}])
        assert out["stop_reason"] == "stop"
        assert [s.runner.workers for s in rollout._schedulers.values()] == [3]
    finally:
        rollout.close()
