"""deployments/configs/tools_and_envs.yaml: valid for Serve, coherent with the code, and deployable.

The first tests need no cluster (schema, builders, user_config, capacity arithmetic). The last one
deploys the file through Serve's own config path (the controller's ``apply_config``, as ``serve
deploy`` does) on 127.0.0.1 and drives the demo tools and the demo env it serves.
"""

from __future__ import annotations

import copy
import time

import pytest

yaml = pytest.importorskip("yaml")
schema_module = pytest.importorskip("ray.serve.schema")

from twinkle_agentic.deployments.common import load_object  # noqa: E402
from twinkle_agentic.deployments.env_server import EnvHost, EnvLimits, check_capacity_fits, env_factory  # noqa: E402
from twinkle_agentic.deployments.tool_server import ToolCallLimits, build_tools  # noqa: E402

from tests.support.paths import REPO_ROOT  # noqa: E402

CONFIG_PATH = REPO_ROOT / "deployments" / "configs" / "tools_and_envs.yaml"
LIMITS = {"twinkle_agentic.deployments.tool_server:build_app": ToolCallLimits, "twinkle_agentic.deployments.env_server:build_app": EnvLimits}


@pytest.fixture(scope="module")
def raw_config() -> dict:
    return yaml.safe_load(CONFIG_PATH.read_text())


def test_config_validates_with_serve_schema(raw_config):
    config = schema_module.ServeDeploySchema.model_validate(raw_config)
    assert config.http_options.host == "127.0.0.1"
    assert {app.import_path for app in config.applications} == set(LIMITS)
    for app in config.applications:
        assert app.runtime_env, f"{app.name}: runtime_env missing"
        for deployment in app.deployments:
            assert deployment.autoscaling_config or deployment.num_replicas, deployment.name


def test_every_yaml_deployment_exists_and_its_user_config_is_accepted(raw_config):
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

    for app in raw_config["applications"]:
        built = call_user_app_builder_with_args_if_necessary(load_object(app["import_path"]), app["args"])
        names_in_code = {built._bound_deployment.name}
        names_in_yaml = {d["name"] for d in app["deployments"]}
        assert names_in_yaml <= names_in_code, f"{app['name']}: YAML names {names_in_yaml}, code has {names_in_code}"
        for deployment in app["deployments"]:
            limits = LIMITS[app["import_path"]].from_user_config(deployment.get("user_config"))
            if isinstance(limits, EnvLimits):
                check_capacity_fits(limits, deployment["max_ongoing_requests"])
            else:
                assert deployment["max_ongoing_requests"] >= limits.max_concurrent_calls


def test_yaml_args_build_the_demo_tools_and_env(raw_config):
    apps = {app["import_path"]: app["args"] for app in raw_config["applications"]}
    tools = build_tools(apps["twinkle_agentic.deployments.tool_server:build_app"]["tools"])
    assert [t.tool_info()["function"]["name"] for t in tools] == ["get_weather", "calculator"]
    env_args = apps["twinkle_agentic.deployments.env_server:build_app"]
    host = EnvHost(env_factory(env_args["env"], env_args.get("env_kwargs")))
    assert host.name == "GuessNumberEnv" and host.tools[0]["function"]["name"] == "guess"


@pytest.mark.integration
def test_yaml_deploys_through_serve_and_serves_demo_tools_and_env(raw_config, serve_http):
    httpx = pytest.importorskip("httpx")
    from ray import serve
    from ray.serve.context import _get_global_client

    from twinkle_agentic.envs.env_tool import EnvTool
    from twinkle_agentic.tools.remote import RemoteTool
    from twinkle_agentic.tools.tool_manager import ToolManager

    config = copy.deepcopy(raw_config)
    config["http_options"]["port"] = int(serve_http.rsplit(":", 1)[1])  # the fixture's free port
    for app in config["applications"]:
        for deployment in app["deployments"]:  # fit a shared 4-CPU test cluster; all else as written
            deployment["ray_actor_options"]["num_cpus"] = 0.1
    _get_global_client().deploy_apps(schema_module.ServeDeploySchema.model_validate(config))
    names = [app["name"] for app in config["applications"]]
    deadline = time.monotonic() + 90
    while True:
        statuses = {name: serve.status().applications.get(name) for name in names}
        failed = {n: s.message for n, s in statuses.items() if s is not None and s.status == "DEPLOY_FAILED"}
        assert not failed, failed
        if all(s is not None and s.status == "RUNNING" for s in statuses.values()):
            break
        assert time.monotonic() < deadline, {n: s and s.status for n, s in statuses.items()}
        time.sleep(0.5)

    prefixes = {app["name"]: app["route_prefix"] for app in config["applications"]}
    manager = ToolManager(RemoteTool.from_server(serve_http + prefixes["demo_tools"], timeout_s=30))
    assert manager.names() == ["get_weather", "calculator"]
    assert manager({"function": {"name": "calculator", "arguments": '{"expression": "6*7"}'}}) == "42"
    assert "Paris" in manager({"function": {"name": "get_weather", "arguments": {"city": "Paris"}}})

    env_url = serve_http + prefixes["guess_number_env"]
    metadata = httpx.get(f"{env_url}/metadata").json()
    assert metadata["name"] == "GuessNumberEnv"
    health = httpx.get(f"{env_url}/health").json()
    assert health["max_sessions"] == config["applications"][1]["deployments"][0]["user_config"]["max_concurrent_envs"]

    from twinkle_agentic.envs.openenv import OpenEnv

    env = OpenEnv(env_url, tool_schema=metadata["tools"])
    try:
        assert env.reset().observation.startswith("I picked a number")
        (guess,) = EnvTool.from_env(env)
        manager = ToolManager([guess])
        low, high, answers = 1, 10, []
        while len(answers) < 8 and (not answers or answers[-1] != "Correct!"):  # bisect, as the model should
            number = (low + high) // 2
            answers.append(manager({"function": {"name": "guess", "arguments": {"number": number}}}))
            low, high = (number + 1, high) if answers[-1] == "Too low." else (low, number - 1)
        assert answers[-1] == "Correct!" and set(answers[:-1]) <= {"Too low.", "Too high."}, answers
        assert guess.done and guess.episode_reward == 1.0
    finally:
        env.close()
