"""The tool server's logic and HTTP API in-process (FastAPI TestClient, no Ray): fast and exact."""

from __future__ import annotations

import time

import pytest

from tests.support.deployment_samples import AddTool, FailingTool, SleepTool

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402
from twinkle_agentic.deployments.common import DeploymentConfigError  # noqa: E402
from twinkle_agentic.deployments.tool_server import (  # noqa: E402
    ToolCallLimits,
    ToolHost,
    build_app,
    build_tools,
    make_tool_app,
    tool_server_app,
)

from twinkle_agentic.tools.tool_manager import ToolManager  # noqa: E402

# (name, arguments) sent as the POST /call body; the answer must equal local ToolManager dispatch.
CALL_CASES = [
    ("add", {"a": 2, "b": 3}),
    ("add", '{"a": 1.5, "b": 1}'),
    ("add", "{not json"),
    ("add", "[1, 2]"),
    ("add", 7),
    ("add", {"a": 1}),
    ("fail", {"x": 1}),
    ("nope", {}),
    ("", {}),
]


@pytest.fixture
def client():
    host = ToolHost([AddTool(), FailingTool(), SleepTool()], ToolCallLimits(call_timeout_s=0.5, max_concurrent_calls=2))
    with TestClient(make_tool_app(host, token="s3cret")) as test_client:
        test_client.headers["Authorization"] = "Bearer s3cret"
        yield test_client, host
    host.close()


def test_lists_schemas_in_order(client):
    test_client, _ = client
    tools = test_client.get("/tools").json()["tools"]
    assert [t["function"]["name"] for t in tools] == ["add", "fail", "sleep"]
    assert tools[0]["function"]["parameters"]["properties"]["a"] == {"type": "number"}


@pytest.mark.parametrize("name, arguments", CALL_CASES)
def test_call_answers_exactly_like_local_tool_manager(client, name, arguments):
    test_client, _ = client
    local = ToolManager([AddTool(), FailingTool(), SleepTool()])
    expected = local({"function": {"name": name, "arguments": arguments}})
    response = test_client.post("/call", json={"name": name, "arguments": arguments})
    assert response.status_code == 200
    assert response.json() == {"result": expected}


def test_error_strings_are_the_tool_manager_ones(client):
    test_client, _ = client
    answer = lambda name, args: test_client.post("/call", json={"name": name, "arguments": args}).json()["result"]  # noqa: E731
    assert answer("add", {"a": 2, "b": 3}) == "5"
    assert answer("fail", {"x": 1}) == "Error: tool 'fail' raised ValueError: cannot handle 1"
    assert answer("nope", {}) == "Error: unknown tool 'nope'. Available: add, fail, sleep."
    assert answer("add", "[1]") == 'Error: "arguments" must decode to a JSON object, got list.'


def test_bearer_token_required(client):
    test_client, _ = client
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
        response = test_client.post("/call", json={"name": "add", "arguments": {}}, headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Bearer"
    assert test_client.get("/tools", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert test_client.get("/health", headers={"Authorization": ""}).status_code == 200


def test_malformed_envelope_is_422_not_500(client):
    test_client, _ = client
    assert test_client.post("/call", json={"arguments": {}}).status_code == 422
    assert test_client.post("/call", json={"name": "add", "extra": 1}).status_code == 422
    assert test_client.post("/call", content=b"{oops", headers={"content-type": "application/json"}).status_code == 422


def test_hung_tool_times_out_and_wedged_replica_reports_unhealthy(client):
    test_client, host = client
    started = time.monotonic()
    result = test_client.post("/call", json={"name": "sleep", "arguments": {"seconds": 2.5}}).json()["result"]
    assert result == "Error: tool 'sleep' timed out after 0.5s."
    assert time.monotonic() - started < 2.0
    assert host.health()["stuck"] == 1
    host.check()  # one of two threads stuck: still serving
    assert test_client.post("/call", json={"name": "add", "arguments": {"a": 1, "b": 1}}).json() == {"result": "2"}
    test_client.post("/call", json={"name": "sleep", "arguments": {"seconds": 2.5}})
    health = test_client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "wedged"
    with pytest.raises(RuntimeError, match="all 2 tool threads"):
        host.check()
    # A queued call waits for a thread within its own timeout, then gives up with the same string.
    assert test_client.post("/call", json={"name": "add", "arguments": {"a": 1, "b": 1}}).json()["result"] == (
        "Error: tool 'add' timed out after 0.5s."
    )


def test_reconfigure_resizes_pool_and_timeout():
    host = ToolHost([SleepTool()])
    assert host.health()["max_concurrent_calls"] == 8
    host.configure(ToolCallLimits.from_user_config({"call_timeout_s": 0.1, "max_concurrent_calls": 3}))
    assert host.health()["max_concurrent_calls"] == 3 and host.limits.call_timeout_s == 0.1
    host.close()


@pytest.mark.parametrize(
    "config, message",
    [
        ({"call_timeout": 5}, r"unknown key\(s\) \['call_timeout'\]"),
        ({"call_timeout_s": 0}, "call_timeout_s must be a positive number"),
        ({"max_concurrent_calls": 2.5}, "max_concurrent_calls must be a positive integer"),
        ({"max_concurrent_calls": True}, "max_concurrent_calls must be a positive integer"),
    ],
)
def test_user_config_is_validated(config, message):
    with pytest.raises(DeploymentConfigError, match=message):
        ToolCallLimits.from_user_config(config)


def test_build_tools_from_import_paths_and_factories():
    tools = build_tools(
        [
            "twinkle_agentic.demo.tools:demo_tools",  # a factory returning several tools
            {"import_path": "tests.support.deployment_samples:AddTool", "kwargs": {}},
            FailingTool(),
        ]
    )
    assert ToolManager(tools).names() == ["get_weather", "calculator", "add", "fail"]


@pytest.mark.parametrize(
    "specs, message",
    [
        ([], "non-empty list"),
        ("tests.support.deployment_samples:AddTool", "non-empty list"),
        ([{"path": "x:y"}], r"unknown key\(s\) \['path'\]"),
        ([{"kwargs": {}}], "needs an import_path"),
        (["tests.support.deployment_samples"], "must look like 'package.module:Name'"),
        (["tests.support.deployment_samples:Missing"], "has no attribute 'Missing'"),
        (["no_such_module_xyz:Tool"], "cannot import module"),
        (["tests.support.deployment_samples:schema"], "failed"),
        (["tests.support.deployment_samples:CounterEnv"], "not a twinkle_agentic Tool"),
        (["tests.support.deployment_samples:AddTool", "tests.support.deployment_samples:AddTool"], "two tools are named 'add'"),
    ],
)
def test_bad_tool_specs_name_the_problem(specs, message):
    with pytest.raises(DeploymentConfigError, match=message):
        build_tools(specs)


def test_build_app_rejects_unknown_args():
    with pytest.raises(DeploymentConfigError, match=r"unknown key\(s\) \['tool'\]"):
        build_app({"tool": ["x:y"]})
    with pytest.raises(DeploymentConfigError, match="need 'tools'"):
        build_app({})
    with pytest.raises(DeploymentConfigError, match="either token or token_env"):
        tool_server_app(["tests.support.deployment_samples:AddTool"], token="a", token_env="B")
    with pytest.raises(DeploymentConfigError, match="unknown key"):
        tool_server_app(["tests.support.deployment_samples:AddTool"], user_config={"timeout": 1})
