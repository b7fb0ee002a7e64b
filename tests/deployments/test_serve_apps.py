"""Tool server and env server on a real local Ray Serve (127.0.0.1, free port), driven by real clients.

Covers: HTTP tool calls and bearer token through the Serve proxy, RemoteTool in a ToolManager (also
pickled into a Ray task), a hung tool, the env server driven by openenv's own clients (sync and
async) and by our OpenEnv adapter, per-connection state, the per-replica capacity limit, and a tool
replica killed under load.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import time

import pytest

from tests.support.deployment_samples import AddTool, CounterEnv, FailingTool, SleepTool, wait_until

pytestmark = pytest.mark.integration

httpx = pytest.importorskip("httpx")
pytest.importorskip("ray.serve")

TOKEN = "t0ken"
TOOLS_APP, ENV_APP = "tools_under_test", "env_under_test"


@pytest.fixture(scope="module")
def apps(serve_http):
    """Both apps deployed at once: tools on 2 replicas with a token, env capped at 2 sessions per replica."""
    from ray import serve
    from ray.serve.api import RunTarget
    from twinkle_agentic.deployments.env_server import env_server_app
    from twinkle_agentic.deployments.tool_server import tool_server_app

    light = {"ray_actor_options": {"num_cpus": 0.1}, "health_check_period_s": 1}
    tools = tool_server_app(
        [AddTool(), FailingTool(), SleepTool()],
        token=TOKEN,
        user_config={"call_timeout_s": 1.0, "max_concurrent_calls": 4},
        num_replicas=2,
        **light,
    )
    env = env_server_app(
        CounterEnv, env_kwargs={"limit": 100}, user_config={"max_concurrent_envs": 2, "step_timeout_s": 10}, **light
    )
    serve.run_many(
        [RunTarget(tools, name=TOOLS_APP, route_prefix="/tools"), RunTarget(env, name=ENV_APP, route_prefix="/env")]
    )
    return {"tools": f"{serve_http}/tools", "env": f"{serve_http}/env"}


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- tool server ---------------------------------------------------------------------------------------


def test_tool_server_http_api_through_serve(apps):
    url = apps["tools"]
    listed = httpx.get(f"{url}/tools", headers=auth()).json()["tools"]
    assert [t["function"]["name"] for t in listed] == ["add", "fail", "sleep"]
    assert httpx.get(f"{url}/tools").status_code == 401
    assert httpx.post(f"{url}/call", json={"name": "add", "arguments": {}}, headers=auth("bad")).status_code == 401
    call = lambda body: httpx.post(f"{url}/call", json=body, headers=auth())  # noqa: E731
    assert call({"name": "add", "arguments": {"a": 2, "b": 3}}).json() == {"result": "5"}
    failed = call({"name": "fail", "arguments": {"x": 3}})
    assert failed.status_code == 200
    assert failed.json() == {"result": "Error: tool 'fail' raised ValueError: cannot handle 3"}
    assert call({"name": "add", "arguments": "oops"}).json()["result"].startswith("Error: invalid JSON in arguments:")
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"


def test_remote_tools_register_in_a_tool_manager(apps, ray_local):
    from twinkle_agentic.tools.remote import RemoteTool, ToolServerError
    from twinkle_agentic.tools.tool_manager import ToolManager

    manager = ToolManager(RemoteTool.from_server(apps["tools"], token=TOKEN, timeout_s=10))
    assert manager.names() == ["add", "fail", "sleep"]
    assert manager.tool_infos()[0]["function"]["parameters"]["properties"]["a"] == {"type": "number"}
    call = lambda name, args: manager({"id": "c1", "type": "function", "function": {"name": name, "arguments": args}})  # noqa: E731
    assert call("add", '{"a": 2, "b": 40}') == "42"
    assert call("fail", {"x": "y"}) == "Error: tool 'fail' raised ValueError: cannot handle 'y'"
    assert call("missing", {}) == "Error: unknown tool 'missing'. Available: add, fail, sleep."

    with pytest.raises(ToolServerError, match="HTTP 401") as refused:
        RemoteTool.from_server(apps["tools"], token="bad", retries=0)
    assert refused.value.status == 401
    wrong = RemoteTool(apps["tools"], manager.get("add").schema)
    assert wrong("add", {"a": 1, "b": 1}).startswith("Error: tool 'add' was refused by")

    @ray_local.remote(num_cpus=0.1)
    def call_in_worker(tool, arguments):  # the tool travels pickled and reconnects in the worker
        return tool("add", arguments)

    assert ray_local.get(call_in_worker.remote(manager.get("add"), {"a": 5, "b": 6}), timeout=60) == "11"


def test_hung_tool_answers_a_timeout_string(apps):
    from twinkle_agentic.tools.remote import RemoteTool

    sleep = {t.name: t for t in RemoteTool.from_server(apps["tools"], token=TOKEN, timeout_s=10)}["sleep"]
    started = time.monotonic()
    assert sleep("sleep", {"seconds": 3}) == "Error: tool 'sleep' timed out after 1s."
    assert time.monotonic() - started < 2.5


# -- env server ----------------------------------------------------------------------------------------


def test_openenv_sync_client_drives_the_env_server(apps):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=apps["env"]).sync() as client:
        first = client.reset()
        assert first.observation == {"result": "count=0", "metadata": {"start": 0}}
        result = client.step({"tool_name": "bump", "arguments": {"by": 2}})
        assert result.observation["result"] == "count=2" and result.reward == 2.0 and result.done is False
        result = client.step({"tool_name": "bump", "arguments": {"by": 3}})
        assert result.reward == 5.0
        state = client.state()
        assert state["step_count"] == 2 and state["episode_reward"] == 7.0
        with pytest.raises(RuntimeError, match=r"code: VALIDATION_ERROR"):
            client.step({"message": "hi"})
        with pytest.raises(RuntimeError, match=r"exploded \(code: EXECUTION_ERROR\)"):
            client.step({"tool_name": "boom"})
        assert client.step({"tool_name": "bump"}).observation["result"] == "count=6"  # session survived


def test_openenv_async_clients_keep_separate_state(apps):
    from openenv.core.generic_client import GenericEnvClient

    async def episode(by: int, steps: int) -> tuple[str, int]:
        async with GenericEnvClient(base_url=apps["env"]) as client:
            await client.reset()
            for _ in range(steps):
                result = await client.step({"tool_name": "bump", "arguments": {"by": by}})
                await asyncio.sleep(0.01)  # interleave the two sessions
            state = await client.state()
            return result.observation["result"], state["step_count"]

    async def both():
        return await asyncio.gather(episode(1, 5), episode(10, 3))

    assert asyncio.run(both()) == [("count=5", 5), ("count=30", 3)]


def test_capacity_limit_answers_capacity_reached_then_closes(apps):
    from openenv.core.generic_client import GenericEnvClient
    from websockets.exceptions import ConnectionClosedOK
    from websockets.sync.client import connect

    ws_url = apps["env"].replace("http://", "ws://") + "/ws"
    with connect(ws_url) as one, connect(ws_url) as two:
        for ws in (one, two):
            ws.send(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        with connect(ws_url) as third:
            reply = json.loads(third.recv(timeout=10))
            assert reply["type"] == "error" and reply["data"]["code"] == "CAPACITY_REACHED"
            assert reply["data"]["active_sessions"] == 2 and reply["data"]["max_sessions"] == 2
            third.send(json.dumps({"type": "reset", "data": {}}))  # the server closes once the client speaks
            with pytest.raises(ConnectionClosedOK):
                third.recv(timeout=10)
        for _ in range(3):  # openenv's own client reads the refusal as the answer to its reset, every time
            client = GenericEnvClient(base_url=apps["env"]).sync()
            with pytest.raises(RuntimeError, match=r"Server at capacity: 2/2 .*\(code: CAPACITY_REACHED\)"):
                client.reset()
            with contextlib.suppress(ConnectionClosedOK):  # its close() trips over the socket we closed
                client.close()
        health = httpx.get(f"{apps['env']}/health").json()
        assert health == {"status": "healthy", "active_sessions": 2, "max_sessions": 2, "stuck_sessions": 0}
    wait_until(lambda: httpx.get(f"{apps['env']}/health").json()["active_sessions"] == 0, timeout_s=10)


def test_our_openenv_adapter_drives_the_env_server(apps):
    openenv_adapter = pytest.importorskip("twinkle_agentic.envs.openenv")
    from twinkle_agentic.envs.env_tool import EnvTool
    from twinkle_agentic.tools.tool_manager import ToolManager

    schema = httpx.get(f"{apps['env']}/metadata").json()["tools"]
    env = openenv_adapter.OpenEnv(apps["env"], tool_schema=schema)
    try:
        reset = env.reset()
        assert reset.observation == "count=0" and reset.info["metadata"] == {"start": 0}
        manager = ToolManager(EnvTool.from_env(env))
        answer = manager({"id": "c", "function": {"name": "bump", "arguments": '{"by": 4}'}})
        assert answer == "count=4"
        result = env.step("bump", {"by": 1})
        assert (result.observation, result.reward, result.done) == ("count=5", 5.0, False)
        assert result.info["episode_reward"] == 9.0 and result.info["metadata"] == {"count": 5}
        failed = env.step("boom", {})
        assert failed.observation.startswith("Error: ") and "exploded" in failed.observation
        assert failed.info["error_code"] == "EXECUTION_ERROR"
    finally:
        env.close()


# -- failure: a tool replica dies under load (keep last: it disturbs the tools app) --------------------


def test_killing_a_tool_replica_under_load_fails_over_without_hanging(apps, ray_local):
    from twinkle_agentic.tools.remote import RemoteTool

    add = {t.name: t for t in RemoteTool.from_server(apps["tools"], token=TOKEN, timeout_s=10, retries=6)}["add"]
    replicas = [a for a in ray_local.util.list_named_actors(all_namespaces=True) if f"{TOOLS_APP}#ToolServer" in a["name"]]
    assert len(replicas) == 2, replicas

    def hammer(worker: int) -> list[str]:
        answers, deadline = [], time.monotonic() + 4.0
        while time.monotonic() < deadline:
            answers.append(add("add", {"a": worker, "b": len(answers)}))
        return [answer if answer.startswith("Error:") else "ok" for answer in answers]

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(hammer, worker) for worker in range(4)]
        time.sleep(1.0)
        victim = ray_local.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"])
        ray_local.kill(victim, no_restart=True)
        answers = [a for f in concurrent.futures.as_completed(futures, timeout=60) for a in f.result()]
    errors = [a for a in answers if a != "ok"]
    assert len(answers) > 20 and len(errors) <= len(answers) // 10, errors[:5]
    assert all(e.startswith("Error: tool 'add'") for e in errors)
    # Serve routes around the dead replica and replaces it.
    assert [add("add", {"a": 1, "b": i}) for i in range(20)] == [str(1 + i) for i in range(20)]
