"""OpenEnv wire parsing: 0.3 and 0.10 frames read identically; text, reward, URL and error rules."""

from __future__ import annotations

import math

import pytest

from twinkle_agentic.envs.openenv import OpenEnv, default_action_mapper, mcp_action_mapper
from twinkle_agentic.envs.openenv_types import wire_reward
from twinkle_agentic.envs.openenv_wire import (
    OpenEnvClientTransport,
    WireError,
    check_reply,
    parse_observation_frame,
    render_text,
    ws_url,
)

# The same echo step as each server version puts it on the wire (SPEC 16.1: 0.3 drops
# Observation.metadata; 0.10 keeps it inside the observation and repeats it as data.metadata).
FRAME_0_3 = {"observation": {"echoed_message": "hi", "message_length": 2}, "reward": 0.2, "done": False}
FRAME_0_10 = {"observation": {"echoed_message": "hi", "message_length": 2, "metadata": {"step": 1}},
              "reward": 0.2, "done": False, "metadata": {"step": 1}}
FRAME_0_10_NESTED_ONLY = {"observation": {"echoed_message": "hi", "message_length": 2, "metadata": {"step": 1}},
                          "reward": 0.2, "done": False}
MCP_FRAME = {"observation": {"tool_name": "echo", "error": None,
                             "result": {"content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}],
                                        "structured_content": None, "is_error": False}},
             "reward": None, "done": False}


def test_versions_render_identically_and_metadata_is_normalised():
    old, new, nested = (parse_observation_frame(f) for f in (FRAME_0_3, FRAME_0_10, FRAME_0_10_NESTED_ONLY))
    assert old.text == new.text == nested.text == "hi"
    assert old.reward == new.reward == 0.2 and old.done is new.done is False
    assert old.metadata == {} and new.metadata == nested.metadata == {"step": 1}
    assert FRAME_0_10["observation"]["metadata"] == {"step": 1}  # input untouched


@pytest.mark.parametrize(
    "observation, text",
    [
        ("plain", "plain"),
        ({"result": "r", "output": "o"}, "r"),
        ({"output": {"text": "deep"}}, "deep"),
        ({"content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}, "a\nb"),
        ({"result": {"data": {"message": "unwrapped"}}}, "unwrapped"),
        ({"error": {"message": "bad tool"}}, "Error: bad tool"),
        ({"error": "plain failure", "result": None}, "Error: plain failure"),
        ({"score": 1, "ok": True}, '{"score":1,"ok":true}'),
        (MCP_FRAME["observation"], "hi\nthere"),
    ],
)
def test_render_text(observation, text):
    assert render_text(observation) == text


@pytest.mark.parametrize("value, reward", [(None, None), (True, 1.0), (False, 0.0), (3, 3.0), (0.5, 0.5),
                                           (math.inf, None), (-math.inf, None), (math.nan, None), ("1", None),
                                           ([1], None)])
def test_a_reward_that_is_not_a_finite_number_is_none(value, reward):
    assert wire_reward(value) == reward
    assert parse_observation_frame({"observation": "x", "reward": value}).reward == reward


@pytest.mark.parametrize("base, url", [("http://h:8000", "ws://h:8000/ws"), ("https://h/", "wss://h/ws"),
                                       ("ws://h/ws", "ws://h/ws"), ("h:1", "ws://h:1/ws"),
                                       ("http://h/ws?session_id=a", "ws://h/ws?session_id=a")])
def test_ws_url(base, url):
    assert ws_url(base) == url


class Recorder:
    dropped = False

    def drop(self):
        self.dropped = True


@pytest.mark.parametrize("code, closes", [("VALIDATION_ERROR", False), ("EXECUTION_ERROR", False),
                                          ("CAPACITY_REACHED", True), ("FACTORY_ERROR", True),
                                          ("SESSION_ERROR", True)])
def test_error_frames_raise_with_code_and_drop_closed_sockets(code, closes):
    transport = Recorder()
    with pytest.raises(WireError) as caught:
        check_reply({"type": "error", "data": {"message": "m", "code": code, "errors": [{"loc": ["x"]}]}}, transport)
    assert caught.value.code == code and caught.value.message.startswith("m: ")
    assert transport.dropped is closes
    assert caught.value.retryable is (code == "CAPACITY_REACHED")


def test_openenv_client_runtime_errors_are_parsed_back_into_codes():
    transport = OpenEnvClientTransport(object, "http://h", {})
    error = transport._error(RuntimeError("Server error: Server at capacity: 2/2 (code: CAPACITY_REACHED)"))
    assert (error.code, error.message) == ("CAPACITY_REACHED", "Server at capacity: 2/2")
    assert transport._error(ConnectionError("refused")).code == "CONNECTION_FAILED"


def test_action_mappers():
    assert default_action_mapper("t", {"a": 1}) == {"tool_name": "t", "arguments": {"a": 1}}
    assert mcp_action_mapper("t", {"a": 1}) == {"type": "call_tool", "tool_name": "t", "arguments": {"a": 1}}


def test_construction_checks():
    with pytest.raises(TypeError, match="not options of the built-in client"):
        OpenEnv("http://h", env_kwargs={"timeout": 1})
    with pytest.raises(ValueError, match="env_cls 'no_such_pkg:Client': cannot import module 'no_such_pkg'"):
        OpenEnv("http://h", env_cls="no_such_pkg.Client")
    with pytest.raises(ValueError, match="has no attribute 'NoClient'"):
        OpenEnv("http://h", env_cls="json:NoClient")
    with pytest.raises(TypeError, match="not an openenv EnvClient"):
        OpenEnv("http://h", env_cls="json.JSONDecoder")
    with pytest.raises(ValueError, match="dotted path"):
        OpenEnv("http://h", env_cls="Client")
    env = OpenEnv("http://h", tool_schema=[{"type": "function", "function": {"name": "t"}}])
    assert env.tools()[0]["function"]["name"] == "t" and env.evaluate([{}]) == [0.0]
    env.close()
    env.close()  # idempotent, never connected
