"""Env defaults, StepResult, and EnvTool (SPEC 15)."""

from __future__ import annotations

import pytest

from twinkle_agentic.envs.base import Env, StepResult
from twinkle_agentic.envs.env_tool import EnvTool
from twinkle_agentic.tools import Tool, ToolManager

SCHEMAS = [
    {"type": "function", "function": {"name": "search", "description": "find", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "submit", "parameters": {"type": "object"}}},
]


class Scripted(Env):
    def __init__(self, schemas=None, info=None):
        self.schemas = schemas or []
        self.info = info
        self.steps: list[tuple[str, dict]] = []
        self.closed = False

    def step(self, tool_name, arguments):
        self.steps.append((tool_name, arguments))
        done = tool_name == "submit"
        return StepResult({"seen": arguments}, reward=0.5, done=done, info=dict(self.info or {}))

    def tools(self):
        return self.schemas

    def close(self):
        self.closed = True


class Bare(Env):
    def step(self, tool_name, arguments):
        return StepResult("ok")


def test_step_result_and_env_defaults():
    assert StepResult() == StepResult("", 0.0, False, {})
    assert StepResult().info is not StepResult().info
    env = Bare()
    assert env.reset() == StepResult() and env.tools() == [] and env.evaluate([{}, {}]) == [0.0, 0.0]
    with Bare() as entered:
        assert entered.close() is None


def test_from_env_makes_one_tool_per_schema_sharing_results():
    env = Scripted(SCHEMAS)
    tools = EnvTool.from_env(env)
    assert [t.tool_name for t in tools] == ["search", "submit"]
    assert all(isinstance(t, Tool) for t in tools)
    assert tools[0].description == "find" and tools[1].description == "Execute an action in the environment."
    assert tools[0].done is False and tools[0].last_result is None and tools[0].episode_reward == 0.0
    assert tools[0]("search", {"q": 1}) == "{'seen': {'q': 1}}"  # str(observation)
    assert tools[1].last_result is tools[0].last_result  # one holder per from_env call
    tools[1]("submit", {})
    assert tools[0].done is True
    assert tools[0].episode_reward == 0.5  # no info['episode_reward']: the last reward
    assert env.steps == [("search", {"q": 1}), ("submit", {})]


def test_episode_reward_prefers_info_and_separate_from_env_calls_do_not_share():
    env = Scripted(SCHEMAS, info={"episode_reward": 3})
    first, second = EnvTool.from_env(env)[0], EnvTool.from_env(env)[0]
    first("search", {})
    assert first.episode_reward == 3.0 and second.last_result is None


def test_env_without_tools_yields_generic_env_action():
    (tool,) = EnvTool.from_env(Scripted())
    assert tool.tool_info() == {
        "type": "function",
        "function": {"name": "env_action", "description": "Execute an action in the environment.",
                     "parameters": {"type": "object", "properties": {}}},
    }


def test_manual_construction_through_tool_manager():
    env = Scripted()
    tool = EnvTool(env=env, tool_name="execute_code", description="Run code.",
                   parameters={"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]})
    manager = ToolManager([tool])
    assert manager.tool_infos()[0]["function"]["parameters"]["required"] == ["code"]
    out = manager({"id": "c", "type": "function", "function": {"name": "execute_code", "arguments": '{"code": "1"}'}})
    assert out == "{'seen': {'code': '1'}}"
    manager.close()
    assert env.closed


def test_bad_schema_and_name_are_rejected():
    with pytest.raises(ValueError, match="without function.name"):
        EnvTool.from_env(Scripted([{"type": "function", "function": {}}]))
    with pytest.raises(ValueError, match="tool_name"):
        EnvTool(Scripted(), tool_name="")
