"""The rollout job's tools and environments on Ray Serve, and the catalog workers use to reach them.

Each ``tools`` entry of the config is a tool server (``deployments/tool_server.py``) and each
``envs`` entry an OpenEnv-protocol env server (``deployments/env_server.py``), deployed as their own
Serve applications (``route_prefix`` ``/<name>`` unless set) with the entry's ``deployment`` options
(``num_replicas`` or ``autoscaling_config``, ``ray_actor_options``, ``max_ongoing_requests``...) and
``user_config``. Applications are deployed imperatively by name, so other applications on the
cluster are left alone. An entry with ``url`` uses a server that is already running instead.

Serve listens on ``serve_host`` (127.0.0.1 unless configured) with a proxy on every node, so a
worker reaches the services through the proxy on its own node at the same URL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.actors.catalog import EnvEndpoint, EnvOpenError, ToolCatalog, ToolServerEndpoint

from twinkle_agentic.net import free_port
from twinkle_agentic.tools.remote import ToolServerError

from .config import ConfigError, EnvServerSpec, RolloutJobConfig, ToolServerSpec

logger = logging.getLogger(__name__)

DEFAULT_SERVE_PORT = 8000
HEALTH_POLL_S = 0.5


class ServiceError(RuntimeError):
    """A tool or env service did not come up; the message names it and says why."""


@dataclass
class Services:
    """What the job deployed, and the catalog the workers receive."""

    catalog: ToolCatalog
    deploy_timeout_s: float  # the job's setting of that name
    base_url: str | None = None
    deployed: list[str] = field(default_factory=list)
    started_serve: bool = False
    urls: dict[str, str] = field(default_factory=dict)

    def wait_ready(self) -> None:
        """Wait until every application runs and every server answers and lists its tools."""
        deadline = time.monotonic() + self.deploy_timeout_s
        if self.deployed:
            _wait_running(self.deployed, self.deploy_timeout_s)
        for name, endpoint in [*self.catalog.toolsets.items(), *self.catalog.envs.items()]:
            _wait_healthy(name, endpoint.url, deadline)
        for name, endpoint in self.catalog.toolsets.items():
            try:
                if not endpoint.tools():
                    raise ServiceError(f"tool server '{name}' at {endpoint.url} serves no tools")
            except ToolServerError as exc:
                raise ServiceError(f"tool server '{name}': {exc}") from exc
        for name, endpoint in self.catalog.envs.items():
            try:
                endpoint.tool_schemas()
            except EnvOpenError as exc:
                raise ServiceError(f"env server '{name}': {exc}") from exc

    def teardown(self) -> None:
        """Delete the applications this job deployed (and Serve, if this job started it)."""
        if not self.deployed:
            return
        from ray import serve

        for name in self.deployed:
            try:
                serve.delete(name, _blocking=False)
            except Exception as exc:  # the cluster may be going away already
                logger.warning("could not delete Serve application %s: %s", name, exc)
        if self.started_serve:
            try:
                serve.shutdown()
            except Exception as exc:
                logger.warning("could not shut Serve down: %s", exc)


def _token(spec: ToolServerSpec | EnvServerSpec) -> str | None:
    if spec.token_env is None:
        return None
    value = os.environ.get(spec.token_env, "")
    if not value:
        raise ConfigError(
            f"'{spec.name}': token_env={spec.token_env!r} is unset or empty in the job's environment"
        )
    return value


def start_serve(cfg: RolloutJobConfig, embedded: bool) -> tuple[str, bool]:
    """Start Serve unless it runs already; returns ``(http://host:port, started_here)``."""
    from ray import serve
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    started = client is None
    if started:
        port = cfg.serve_port
        if port is None:
            port = free_port() if embedded else DEFAULT_SERVE_PORT
        serve.start(http_options={"host": cfg.serve_host, "port": port}, proxy_location="EveryNode")
        client = _get_global_client()
    http = client.http_config
    if not started and cfg.serve_port is not None and http.port != cfg.serve_port:
        logger.warning("Serve already runs on port %s; serve_port=%s is ignored", http.port, cfg.serve_port)
    host = "127.0.0.1" if http.host in ("0.0.0.0", "::", "", None) else http.host
    return f"http://{host}:{http.port}", started


def _route(spec: ToolServerSpec | EnvServerSpec) -> str:
    prefix = spec.route_prefix or f"/{spec.name}"
    return prefix if prefix.startswith("/") else "/" + prefix


def build_apps(cfg: RolloutJobConfig) -> list[tuple[str, str, Any]]:
    """``(name, route_prefix, bound application)`` for every entry to deploy; bad options raise ConfigError."""
    from twinkle_agentic.deployments.common import DeploymentConfigError
    from twinkle_agentic.deployments.env_server import env_server_app
    from twinkle_agentic.deployments.tool_server import tool_server_app

    apps = []
    for spec in cfg.tools:
        if spec.url is not None:
            continue
        try:
            app = tool_server_app(
                spec.tools, token_env=spec.token_env, user_config=spec.user_config, **dict(spec.deployment)
            )
        except (DeploymentConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"tools '{spec.name}': {exc}") from exc
        apps.append((spec.name, _route(spec), app))
    for spec in cfg.envs:
        if spec.url is not None:
            continue
        try:
            app = env_server_app(
                spec.env,
                env_kwargs=spec.env_kwargs,
                name=spec.name,
                token_env=spec.token_env,
                user_config=spec.user_config,
                **dict(spec.deployment),
            )
        except (DeploymentConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"envs '{spec.name}': {exc}") from exc
        apps.append((spec.name, _route(spec), app))
    return apps


def deploy(cfg: RolloutJobConfig, embedded: bool) -> Services:
    """Start Serve and submit the applications the config asks for; returns at once with the catalog.

    The catalog holds only addresses, so the engines can start while the applications come up; call
    ``Services.wait_ready`` before rolling out.
    """
    apps = build_apps(cfg)
    services = Services(ToolCatalog(), deploy_timeout_s=cfg.deploy_timeout_s)
    if apps:
        from ray import serve

        with _quiet_serve():
            services.base_url, services.started_serve = start_serve(cfg, embedded)
            serve.run_many(
                [serve.RunTarget(app, name=name, route_prefix=route) for name, route, app in apps],
                wait_for_applications_running=False,
            )
        services.deployed = [name for name, _, _ in apps]
        services.urls = {name: services.base_url + route for name, route, _ in apps}
    for spec in cfg.tools:
        url = (spec.url or services.urls[spec.name]).rstrip("/")
        services.catalog.toolsets[spec.name] = ToolServerEndpoint(
            spec.name, url, token=_token(spec), timeout_s=spec.timeout_s, retries=spec.retries
        )
    for spec in cfg.envs:
        url = (spec.url or services.urls[spec.name]).rstrip("/")
        services.catalog.envs[spec.name] = _env_endpoint(spec, url)
    return services


@contextlib.contextmanager
def _quiet_serve() -> Iterator[None]:
    """Hide Serve's INFO lines about starting (and then reusing) its controller; warnings still show."""
    serve_logger = logging.getLogger("ray.serve")

    def warnings_only(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING

    serve_logger.addFilter(warnings_only)  # a filter, not a level: starting Serve resets the level
    try:
        yield
    finally:
        serve_logger.removeFilter(warnings_only)


def _wait_running(names: list[str], timeout_s: float) -> None:
    from ray import serve

    deadline = time.monotonic() + timeout_s
    while True:
        statuses = serve.status().applications
        failed = {
            n: statuses[n].message for n in names if n in statuses and statuses[n].status == "DEPLOY_FAILED"
        }
        if failed:
            raise ServiceError(f"Serve could not deploy {sorted(failed)}: {failed}")
        waiting = [n for n in names if n not in statuses or statuses[n].status != "RUNNING"]
        if not waiting:
            return
        if time.monotonic() > deadline:
            detail = {n: statuses[n].status if n in statuses else "missing" for n in waiting}
            raise ServiceError(
                f"Serve applications not running after deploy_timeout_s={timeout_s:g}: {detail}"
            )
        time.sleep(HEALTH_POLL_S)


def _wait_healthy(name: str, url: str, deadline: float) -> None:
    """Poll ``GET <url>/health`` until it answers 200 (the proxy may lag behind the application)."""
    import httpx

    problem = "no answer"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{url}/health", timeout=5, trust_env=False)
            if response.status_code == 200:
                return
            problem = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        time.sleep(HEALTH_POLL_S)
    raise ServiceError(f"'{name}' at {url} is not healthy ({problem})")


def _env_endpoint(spec: EnvServerSpec, url: str) -> EnvEndpoint:
    token = _token(spec)
    client = dict(spec.client)
    if token:
        client["headers"] = {**dict(client.get("headers") or {}), "Authorization": f"Bearer {token}"}
    return EnvEndpoint(
        spec.name,
        url,
        client=client,
        reset_kwargs=dict(spec.reset_kwargs),
        retry_attempts=spec.retry_attempts,
    )
