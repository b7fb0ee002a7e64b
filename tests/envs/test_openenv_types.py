"""The OpenEnv wire types, declared once: the server's frames read back by the client, and the other way."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from typing import Any

import pytest

from twinkle_agentic.envs import openenv_types as wire
from twinkle_agentic.envs.base import Env, StepResult
from twinkle_agentic.envs.openenv import OpenEnv, default_action_mapper, mcp_action_mapper
from twinkle_agentic.envs.openenv_wire import WireError, check_reply, parse_observation_frame

protocol = pytest.importorskip("twinkle_agentic.deployments.openenv_protocol")


class RewardEnv(Env):
    """Steps pay the reward named by the tool: ``nan``, ``inf``, ``none`` or a number."""

    def reset(self, trajectory=None):
        return StepResult("ready", reward=None)

    NAMED = {"nan": math.nan, "inf": math.inf, "none": None}

    def step(self, tool_name, arguments):
        reward = self.NAMED[tool_name] if tool_name in self.NAMED else float(tool_name)
        return StepResult(f"paid {tool_name}", reward=reward)


class SessionTransport:
    """The server's ``EnvSession`` behind the client's transport interface: frames go through JSON
    both ways, as on the socket, without a socket."""

    def __init__(self, env: Env):
        self.session = protocol.EnvSession(lambda: env, step_timeout_s=5.0)
        self.loop = asyncio.new_event_loop()
        self.connected = False

    def connect(self) -> None:
        self.loop.run_until_complete(self.session.start())
        self.connected = True

    def request(self, frame: dict[str, Any]) -> dict[str, Any]:
        reply, _ = self.loop.run_until_complete(self.session.handle(json.dumps(frame)))
        return check_reply(json.loads(protocol.encode_frame(reply)), self)

    def drop(self) -> None:
        self.connected = False

    def close(self) -> None:
        self.session.close().result(5)
        self.loop.close()
        self.connected = False


@pytest.mark.parametrize(
    "reward, expected", [(0.5, 0.5), (True, 1.0), (None, None), (math.nan, None), (math.inf, None), (-math.inf, None)]
)
def test_server_frames_read_back_with_the_same_reward(reward, expected):
    frame = json.loads(protocol.encode_frame(protocol.observation_frame(StepResult("obs", reward, info={"k": 1}))))
    parsed = parse_observation_frame(check_reply(frame, transport=None))
    assert parsed.reward == expected and parsed.text == "obs" and parsed.metadata == {"k": 1}
    assert frame["data"]["reward"] == expected  # null on the wire, not a legal 0.0


def test_a_non_finite_reward_is_none_from_env_to_client(monkeypatch):
    transport = SessionTransport(RewardEnv())
    env = OpenEnv("ws://in-process")
    monkeypatch.setattr(env, "_new_transport", lambda: transport)
    assert env.reset().reward is None
    rewards = [env.step(name, {}).reward for name in ("0.25", "nan", "inf", "none", "0.5")]
    assert rewards == [0.25, None, None, None, 0.5]
    assert env.episode_reward == 0.75  # steps without a reward add nothing
    state = transport.request({"type": "state"})
    assert state["episode_reward"] == 0.75 and state["step_count"] == 5
    env.close()


@pytest.mark.parametrize("mapper", [default_action_mapper, mcp_action_mapper])
def test_client_frames_are_valid_server_frames(mapper):
    reset = {"type": wire.FrameType.RESET, "data": {"seed": 1}}
    step = {"type": wire.FrameType.STEP, "data": mapper("echo", {"text": "hi"})}
    for frame in (reset, step, {"type": wire.FrameType.STATE}, {"type": wire.FrameType.CLOSE}):
        on_wire = json.loads(json.dumps(frame))
        wire.FRAME_MODELS[on_wire["type"]].model_validate(on_wire)
    assert wire.StepAction.model_validate(json.loads(json.dumps(step["data"]))).tool_name == "echo"


@pytest.mark.parametrize("code", list(wire.WSErrorCode))
def test_server_error_codes_reach_the_client(code):
    frame = json.loads(protocol.encode_frame(protocol.error_frame(code, "went wrong", errors=[{"loc": ["x"]}])))
    assert list(frame["data"])[:2] == ["message", "code"]

    class Transport:
        dropped = False

        def drop(self):
            self.dropped = True

    transport = Transport()
    with pytest.raises(WireError) as caught:
        check_reply(frame, transport)
    assert caught.value.code == code and type(caught.value.code) is str
    assert transport.dropped is (code in wire.SOCKET_CLOSING_CODES)
    assert caught.value.retryable is (code == wire.WSErrorCode.CAPACITY_REACHED)


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        wire.Nope  # noqa: B018


def test_the_client_imports_without_pydantic():
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pydantic':\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from twinkle_agentic.envs.openenv import OpenEnv\n"
        "from twinkle_agentic.envs import openenv_types\n"
        "assert openenv_types.wire_reward(float('nan')) is None\n"
        "try:\n"
        "    openenv_types.ResetFrame\n"
        "except ImportError:\n"
        "    print('models need pydantic')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "models need pydantic"
