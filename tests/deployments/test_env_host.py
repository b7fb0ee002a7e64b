"""The env server's OpenEnv WebSocket protocol in-process (FastAPI TestClient, no Ray)."""

from __future__ import annotations

import json
import math
import time

import pytest

from tests.support.deployment_samples import BrokenEnv, CounterEnv

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402
from starlette.websockets import WebSocketDisconnect  # noqa: E402
from twinkle_agentic.deployments.common import DeploymentConfigError  # noqa: E402
from twinkle_agentic.deployments.env_server import (  # noqa: E402
    EnvHost,
    EnvLimits,
    build_app,
    check_capacity_fits,
    env_factory,
    env_server_app,
    make_env_app,
)
from twinkle_agentic.deployments.openenv_protocol import encode_frame, observation_frame  # noqa: E402

from twinkle_agentic.envs.base import StepResult  # noqa: E402


def make_client(env=CounterEnv, limits=None, token=None, **env_kwargs):
    host = EnvHost(env_factory(env, env_kwargs), limits or EnvLimits(max_concurrent_envs=2), token=token)
    return TestClient(make_env_app(host)), host


def ask(ws, frame):
    ws.send_text(json.dumps(frame))
    return ws.receive_json()


def test_reset_step_state_close_round_trip():
    client, host = make_client(limit=3)
    with client, client.websocket_connect("/ws") as ws:
        reply = ask(ws, {"type": "reset", "data": {"trajectory": {"user_data": {"start": 1}}, "seed": 7}})
        assert reply == {
            "type": "observation",
            "data": {"observation": {"result": "count=1", "metadata": {"start": 1}}, "reward": 0.0, "done": False,
                     "metadata": {"start": 1}},
        }
        reply = ask(ws, {"type": "step", "data": {"tool_name": "bump", "arguments": {"by": 1}}})
        assert reply["data"]["observation"]["result"] == "count=2" and reply["data"]["reward"] == 2.0
        reply = ask(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": "bump", "metadata": {}}})
        assert reply["data"]["done"] is True and reply["data"]["metadata"] == {"count": 3}
        state = ask(ws, {"type": "state"})
        assert state["type"] == "state"
        assert {k: state["data"][k] for k in ("step_count", "episode_reward", "done")} == {
            "step_count": 2, "episode_reward": 5.0, "done": True,
        }
        assert len(state["data"]["episode_id"]) == 32
        tools = ask(ws, {"type": "step", "data": {"type": "list_tools"}})
        assert tools["data"]["observation"]["tools"][0]["function"]["name"] == "bump"
        ask(ws, {"type": "reset", "data": {"episode_id": "ep-9"}})
        assert ask(ws, {"type": "state"})["data"] == {
            "episode_id": "ep-9", "step_count": 0, "episode_reward": 0.0, "done": False,
        }
        ws.send_text(json.dumps({"type": "close"}))
        with pytest.raises(WebSocketDisconnect):
            ws.receive_text()
    assert host.active == 0


@pytest.mark.parametrize(
    "raw, code",
    [
        ("{not json", "INVALID_JSON"),
        ("[1, 2]", "VALIDATION_ERROR"),
        (json.dumps({"type": "jump"}), "UNKNOWN_TYPE"),
        (json.dumps({"data": {}}), "UNKNOWN_TYPE"),
        (json.dumps({"type": "step", "data": {"tool_name": "bump", "extra": 1}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "step", "data": {"arguments": {}}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "step", "data": {"tool_name": "bump", "arguments": "{}"}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "state", "data": {}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "step"}), "VALIDATION_ERROR"),
        (json.dumps({"type": "step", "data": {"tool_name": "boom"}}), "EXECUTION_ERROR"),
    ],
)
def test_bad_frames_get_error_codes_and_the_session_survives(raw, code):
    client, _ = make_client()
    with client, client.websocket_connect("/ws") as ws:
        ask(ws, {"type": "reset", "data": {}})
        ws.send_text(raw)
        reply = ws.receive_json()
        assert reply["type"] == "error" and reply["data"]["code"] == code
        if code == "VALIDATION_ERROR" and raw.startswith("{"):
            assert reply["data"]["errors"], reply
        if code == "EXECUTION_ERROR":
            assert reply["data"]["message"] == "RuntimeError: exploded"
        # still open, state intact
        assert ask(ws, {"type": "step", "data": {"tool_name": "bump"}})["data"]["observation"]["result"] == "count=1"


def test_validation_error_lists_missing_and_forbidden_fields():
    client, _ = make_client()
    with client, client.websocket_connect("/ws") as ws:
        reply = ask(ws, {"type": "step", "data": {"message": "hi"}})
        problems = {(e["type"], tuple(e["loc"])) for e in reply["data"]["errors"]}
        assert problems == {("missing", ("tool_name",)), ("extra_forbidden", ("message",))}


def test_each_connection_has_its_own_env():
    client, _ = make_client(limit=100)
    with client, client.websocket_connect("/ws") as one, client.websocket_connect("/ws") as two:
        for _ in range(3):
            ask(one, {"type": "step", "data": {"tool_name": "bump"}})
        assert ask(two, {"type": "step", "data": {"tool_name": "bump"}})["data"]["observation"]["result"] == "count=1"
        assert ask(one, {"type": "state"})["data"]["step_count"] == 3


def test_capacity_reached_then_closed_and_slot_freed_on_close():
    client, host = make_client(limits=EnvLimits(max_concurrent_envs=1))
    with client:
        with client.websocket_connect("/ws") as first:
            ask(first, {"type": "reset", "data": {}})
            with client.websocket_connect("/ws") as second:
                reply = second.receive_json()
                assert reply["data"] == {
                    "message": "Server at capacity: 1/1 sessions active. Cannot accept new connections.",
                    "code": "CAPACITY_REACHED", "active_sessions": 1, "max_sessions": 1,
                }
                second.send_text(json.dumps({"type": "reset", "data": {}}))  # closed once the client speaks
                with pytest.raises(WebSocketDisconnect):
                    second.receive_text()
            assert client.get("/health").json()["active_sessions"] == 1
            first.send_text(json.dumps({"type": "close"}))
            with pytest.raises(WebSocketDisconnect):
                first.receive_text()
        assert host.active == 0
        with client.websocket_connect("/ws") as third:
            assert ask(third, {"type": "reset", "data": {}})["type"] == "observation"


def test_factory_error_closes_the_socket():
    BrokenEnv.built = 0
    client, _ = make_client(env=BrokenEnv)  # the probe (first build) succeeds
    with client, client.websocket_connect("/ws") as ws:
        reply = ws.receive_json()
        assert reply["data"]["code"] == "FACTORY_ERROR"
        assert reply["data"]["factory_name"] == "BrokenEnv"
        assert "OSError: sandbox unavailable" in reply["data"]["message"]
        ws.send_text(json.dumps({"type": "reset", "data": {}}))
        with pytest.raises(WebSocketDisconnect):
            ws.receive_text()


def test_step_timeout_ends_session_and_holds_slot_until_the_env_returns():
    client, host = make_client(limits=EnvLimits(max_concurrent_envs=1, step_timeout_s=0.3))
    with client, client.websocket_connect("/ws") as ws:
        reply = ask(ws, {"type": "step", "data": {"tool_name": "hang", "arguments": {"seconds": 1.0}}})
        assert reply["data"]["code"] == "SESSION_ERROR"
        assert "exceeded step_timeout_s=0.3s" in reply["data"]["message"]
        with pytest.raises(WebSocketDisconnect):
            ws.receive_text()
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["stuck_sessions"] == 1
        with pytest.raises(RuntimeError, match="session slots are held"):
            host.check()
        deadline = time.monotonic() + 5
        while host.active and time.monotonic() < deadline:  # the step returns after ~1 s; close frees the slot
            client.get("/health")  # lets the server's loop run the release
            time.sleep(0.05)
        assert host.active == 0 and host.stuck == 0
        host.check()


def test_idle_session_is_closed():
    client, host = make_client(limits=EnvLimits(max_concurrent_envs=1, idle_timeout_s=0.2))
    with client, client.websocket_connect("/ws") as ws:
        reply = ws.receive_json()
        assert reply["data"]["code"] == "SESSION_ERROR" and "idle" in reply["data"]["message"]
    assert host.active == 0


def test_token_guards_websocket_and_info_routes():
    client, _ = make_client(token="tok")
    with client:
        with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect("/ws"):
            pass
        assert refused.value.code == 1008
        with client.websocket_connect("/ws", headers={"Authorization": "Bearer tok"}) as ws:
            assert ask(ws, {"type": "reset", "data": {}})["type"] == "observation"
        assert client.get("/schema").status_code == 401
        assert client.get("/health").status_code == 200
        meta = client.get("/metadata", headers={"Authorization": "Bearer tok"}).json()
        assert meta["name"] == "CounterEnv" and meta["tools"][0]["function"]["name"] == "bump"
        schema = client.get("/schema", headers={"Authorization": "Bearer tok"}).json()
        assert schema["action"]["required"] == ["tool_name"]


def test_observation_frame_sanitises_reward_and_info():
    frame = json.loads(encode_frame(observation_frame(StepResult("x", reward=math.nan, info={"obj": object(), "n": 1}))))
    assert frame["data"]["reward"] is None
    assert frame["data"]["metadata"]["n"] == 1 and isinstance(frame["data"]["metadata"]["obj"], str)
    assert "metadata" not in observation_frame(StepResult("y", reward=True))["data"]
    assert observation_frame(StepResult("y", reward=True))["data"]["reward"] == 1.0


def test_config_errors_name_the_fix():
    with pytest.raises(DeploymentConfigError, match="max_ongoing_requests >= 10"):
        check_capacity_fits(EnvLimits(max_concurrent_envs=8), 8)
    with pytest.raises(DeploymentConfigError, match=r"unknown key\(s\) \['max_envs'\]"):
        EnvLimits.from_user_config({"max_envs": 2})
    with pytest.raises(DeploymentConfigError, match="not a subclass of twinkle_agentic Env"):
        env_factory("tests.support.deployment_samples:AddTool")
    with pytest.raises(DeploymentConfigError, match=r"unknown key\(s\) \['environment'\]"):
        build_app({"environment": "tests.support.deployment_samples:CounterEnv"})
    with pytest.raises(DeploymentConfigError, match="need 'env'"):
        build_app({})
    with pytest.raises(DeploymentConfigError, match="max_ongoing_requests >= 6"):
        env_server_app(CounterEnv, user_config={"max_concurrent_envs": 4}, max_ongoing_requests=5)
    assert EnvLimits.from_user_config({"step_timeout_s": None}).step_timeout_s is None


@pytest.fixture
def uvicorn_env_url(free_port):
    """The env app on a real socket (uvicorn in a thread), for clients that need one."""
    import threading

    import uvicorn

    host = EnvHost(env_factory(CounterEnv, {}), EnvLimits(max_concurrent_envs=2), token="tok")
    server = uvicorn.Server(uvicorn.Config(make_env_app(host), host="127.0.0.1", port=free_port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{free_port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_our_adapter_sends_the_token_and_reads_a_refusal_as_an_error(uvicorn_env_url):
    from twinkle_agentic.envs.openenv import OpenEnv

    env = OpenEnv(uvicorn_env_url, env_kwargs={"headers": {"Authorization": "Bearer tok"}})
    try:
        assert env.reset().observation == "count=0"
        assert env.step("bump", {"by": 2}).observation == "count=2"
    finally:
        env.close()
    refused = OpenEnv(uvicorn_env_url, retry_attempts=0)
    result = refused.reset()
    assert result.observation.startswith("Error: ") and result.done is True
    refused.close()
