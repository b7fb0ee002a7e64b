"""OpenEnv adapter against a real openenv-core echo server (scaffolded with ``openenv init``),
compared with openenv's own client, and driven through EnvTool -> ToolManager -> APIMultiTurnRollout."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from twinkle_agentic.envs.env_tool import EnvTool
from twinkle_agentic.envs.openenv import OpenEnv
from twinkle_agentic.net import free_port
from twinkle_agentic.protocol import OpenAI, RetryPolicy
from twinkle_agentic.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle_agentic.tools import ToolManager

pytestmark = pytest.mark.integration

ECHO_SCHEMA = [{"type": "function", "function": {
    "name": "echo", "description": "Echo a message back.",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}}}]
GENERIC_CLIENT = "openenv.core.generic_client.GenericEnvClient"


def echo_action(tool_name, arguments):
    """The echo env's action is the arguments themselves ({'message': ...})."""
    return arguments


def echo_env(url, **kwargs):
    return OpenEnv(url, tool_schema=ECHO_SCHEMA, action_mapper=echo_action, **kwargs)


def test_adapter_matches_openenv_own_client(echo_server):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=echo_server.url).sync() as client:
        theirs = [client.reset(), client.step({"message": "héllo"})]
    ours_env = echo_env(echo_server.url)
    ours = [ours_env.reset(), ours_env.step("echo", {"message": "héllo"})]
    ours_env.close()
    via_cls_env = echo_env(echo_server.url, env_cls=GENERIC_CLIENT)
    via_cls = [via_cls_env.reset(), via_cls_env.step("echo", {"message": "héllo"})]
    via_cls_env.close()
    for mine, other, typed in zip(ours, theirs, via_cls, strict=True):
        assert mine.observation == other.observation["echoed_message"] == typed.observation
        assert mine.reward == pytest.approx(other.reward or 0.0) == pytest.approx(typed.reward)
        assert mine.done is other.done is typed.done is False
    assert ours[1].observation == "héllo" and ours[1].info["episode_reward"] == pytest.approx(0.5)
    assert set(ours[1].info) == {"episode_reward", "metadata", "raw_result"}


def test_validation_error_ends_the_episode_without_raising(echo_server):
    env = echo_env(echo_server.url)
    env.reset()
    env.step("echo", {"message": "ok"})
    bad = env.step("echo", {"message": "x", "extra": 1})
    assert bad.done is True and bad.reward == 0.0
    assert bad.info["error_code"] == "VALIDATION_ERROR" and "extra_forbidden" in bad.observation
    assert bad.observation.startswith("Error: ") and bad.info["episode_reward"] == pytest.approx(0.2)
    assert env.reset().observation == "Echo Env environment ready!"  # the socket stayed open
    env.close()


def test_capacity_is_retried_until_a_slot_frees(echo_server):
    holders = [echo_env(echo_server.url) for _ in range(echo_server.max_sessions)]
    for holder in holders:
        assert holder.reset().done is False
    refused = echo_env(echo_server.url, retry_attempts=1, retry_base_s=0.01).reset()
    assert refused.info["error_code"] == "CAPACITY_REACHED" and refused.done
    waiter = echo_env(echo_server.url, retry_base_s=0.1, retry_max_s=0.4)
    threading.Timer(0.8, holders[0].close).start()
    started = time.monotonic()
    assert waiter.reset().observation == "Echo Env environment ready!"
    assert time.monotonic() - started >= 0.5
    for env in (waiter, *holders):
        env.close()


def test_lost_connection_is_not_reopened_by_step_but_by_reset(echo_server):
    env = echo_env(echo_server.url)
    env.reset()
    env._transport._ws.close()  # the socket dies mid-episode
    lost = env.step("echo", {"message": "x"})
    assert lost.info["error_code"] == "CONNECTION_LOST" and lost.done
    assert env.step("echo", {"message": "x"}).info["error_code"] == "CONNECTION_LOST"
    assert env.reset().done is False and env.step("echo", {"message": "back"}).observation == "back"
    env.close()


def test_unreachable_server_returns_errors_never_raises():
    env = echo_env(f"http://127.0.0.1:{free_port()}", retry_attempts=2, retry_base_s=0.01)
    for result in (env.reset(), env.step("echo", {"message": "x"})):
        assert result.done and result.info["error_code"] == "CONNECTION_FAILED"
        assert result.observation.startswith("Error: cannot connect")


def test_pickled_copy_reconnects_on_its_own_session(echo_server):
    env = echo_env(echo_server.url)
    env.reset()
    env.step("echo", {"message": "abc"})
    clone = pickle.loads(pickle.dumps(env))
    assert clone.episode_reward == 0.0
    assert clone.reset().observation == "Echo Env environment ready!"
    assert clone.step("echo", {"message": "z"}).info["episode_reward"] == pytest.approx(0.1)
    assert env.step("echo", {"message": "d"}).info["episode_reward"] == pytest.approx(0.4)
    env.close()
    clone.close()


def test_seed_flow_one_env_shared_manager(echo_server, chat_server):
    env = echo_env(echo_server.url)
    env.reset()
    manager = ToolManager(EnvTool.from_env(env))
    api = OpenAI("scripted", base_url=chat_server.url + "/v1")
    rollout = APIMultiTurnRollout(api=api, tool_manager=manager, max_turns=10)
    (result,) = rollout([{"messages": [{"role": "user", "content": "echo twice #calls=2"}]}])
    env.close()
    assert result["stop_reason"] == "stop" and result["turns"] == 3
    assert [m["content"] for m in result["messages"] if m["role"] == "tool"] == ["message 1", "message 2"]
    assert result["messages"][-1]["content"].endswith("last tool said: message 2")


def test_rollout_with_one_session_per_trajectory(echo_server, chat_server):
    """More trajectories than server sessions: each gets its own OpenEnv through a factory; the
    adapter waits for capacity; an environment that ends the episode (done) ends the trajectory."""
    built: list[OpenEnv] = []

    def manager_for(trajectory):
        env = echo_env(echo_server.url, retry_base_s=0.05, retry_max_s=0.2, retry_attempts=40)
        built.append(env)
        env.reset(trajectory)
        return ToolManager(EnvTool.from_env(env))

    api = OpenAI("scripted", base_url=chat_server.url + "/v1", retry=RetryPolicy(attempts=2, base_s=0.01))
    rollout = APIMultiTurnRollout(api, manager_for, max_turns=5, concurrency=8)
    prompts = [f"task {i} #calls=2" for i in range(5)] + ['bad action #args={"msg":1}']
    results = rollout([{"messages": [{"role": "user", "content": p}]} for p in prompts])
    for result in results[:5]:
        assert (result["stop_reason"], result["turns"], result["truncated"]) == ("stop", 3, False)
        assert result["messages"][-1]["content"].endswith("last tool said: message 2")
    done_by_env = results[5]
    assert (done_by_env["stop_reason"], done_by_env["turns"], done_by_env["truncated"]) == ("stop", 1, False)
    assert done_by_env["messages"][-1]["role"] == "tool"
    assert done_by_env["messages"][-1]["content"].startswith("Error: Invalid message")
    assert len(built) == 6 and all(env._transport is None for env in built)  # the rollout closed them


def test_an_unsendable_action_is_an_error_result(echo_server):
    env = OpenEnv(echo_server.url, action_mapper=lambda name, args: {"message": object()})
    assert env.reset().done is False
    result = env.step("echo", {})
    assert result.done and result.info["error_code"] == "CLIENT_ERROR" and "not JSON serializable" in result.observation
    env.close()
