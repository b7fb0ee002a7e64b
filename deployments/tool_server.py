"""Ray Serve tool server: any set of ``Tool`` objects behind HTTP, called like a local ``ToolManager``.

HTTP API (relative to the application's ``route_prefix``)::

    GET  /tools   -> {"tools": [<OpenAI function schema>, ...]}                  (token required if set)
    POST /call    {"name": str, "arguments": object | JSON string | null}
                  -> {"result": str}                                            (token required if set)
    GET  /health  -> {"status": "healthy"|"wedged", "tools", "busy", "stuck", "max_concurrent_calls"}

A tool failure is never an HTTP error: ``/call`` answers 200 with the ``Error: ...`` string the
project's ``ToolManager`` gives for the same call (unknown tool, bad arguments, the tool raised), plus
``Error: tool 'x' timed out after Ns.`` when a call overruns. Only a malformed request envelope
(422) or a missing/wrong bearer token (401) are HTTP errors.

Sync tools run on a bounded thread pool (``max_concurrent_calls`` per replica), never on the
replica's event loop; ``call_timeout_s`` bounds each call including its wait for a free thread.
Python cannot kill a thread, so a call that overruns keeps its thread until the tool returns; when
every thread of the pool is held by such calls, ``check_health`` fails and Serve replaces the replica.

Serve options (replicas, autoscaling, ``max_ongoing_requests``) live in the YAML
(deployments/configs/tools_and_envs.yaml), not in the decorator, so the two cannot drift.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from ray import serve

from twinkle_agentic.tools.base import Tool
from twinkle_agentic.tools.tool_manager import ToolManager

from .common import (
    DeploymentConfigError,
    check_keys,
    load_object,
    positive_number,
    replica_deployment_config,
    require_bearer,
    resolve_token,
)

TOOL_SERVER_ARGS = ("tools", "token", "token_env")
TOOL_SPEC_KEYS = ("import_path", "kwargs")
DEFAULT_CALL_TIMEOUT_S = 60.0
DEFAULT_MAX_CONCURRENT_CALLS = 8


@dataclass(frozen=True)
class ToolCallLimits:
    """The tool server's ``user_config``: applied by ``reconfigure`` without restarting replicas."""

    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS

    @classmethod
    def from_user_config(cls, config: Mapping[str, Any] | None) -> ToolCallLimits:
        config = {} if config is None else config
        check_keys("ToolServer user_config", config, ("call_timeout_s", "max_concurrent_calls"))
        return cls(
            call_timeout_s=positive_number(
                "call_timeout_s", config.get("call_timeout_s", DEFAULT_CALL_TIMEOUT_S)
            ),
            max_concurrent_calls=positive_number(
                "max_concurrent_calls",
                config.get("max_concurrent_calls", DEFAULT_MAX_CONCURRENT_CALLS),
                integer=True,
            ),
        )


ToolSpec = Tool | str | Mapping[str, Any]


def check_tool_specs(specs: Any) -> None:
    """Check the shape of ``tools`` without importing anything (cheap, runs in ``build_app``)."""
    if not isinstance(specs, Sequence) or isinstance(specs, str) or not specs:
        raise DeploymentConfigError(
            "tools must be a non-empty list of 'module:Name' strings or {import_path, kwargs} mappings"
        )
    for i, spec in enumerate(specs):
        if isinstance(spec, (Tool, str)):
            continue
        if not isinstance(spec, Mapping):
            raise DeploymentConfigError(f"tools[{i}] must be a Tool, a 'module:Name' string or a mapping")
        check_keys(f"tools[{i}]", spec, TOOL_SPEC_KEYS)
        if "import_path" not in spec:
            raise DeploymentConfigError(f"tools[{i}] needs an import_path ('module:Name')")
        if not isinstance(spec.get("kwargs", {}), Mapping):
            raise DeploymentConfigError(f"tools[{i}].kwargs must be a mapping")


def build_tools(specs: Sequence[ToolSpec]) -> list[Tool]:
    """Instantiate tool specs; a spec may name a Tool class, a Tool instance or a factory of Tools.

    A factory (any callable) may return one Tool or a list of them, e.g. ``demo_tools()``. Two tools
    with the same function name are an error: the second would silently shadow the first.
    """
    check_tool_specs(specs)
    tools: list[Tool] = []
    for i, spec in enumerate(specs):
        if isinstance(spec, Tool):
            tools.append(spec)
            continue
        import_path = spec if isinstance(spec, str) else spec["import_path"]
        kwargs = {} if isinstance(spec, str) else dict(spec.get("kwargs") or {})
        obj = load_object(import_path)
        if isinstance(obj, Tool):
            if kwargs:
                raise DeploymentConfigError(f"tools[{i}]: {import_path} is a Tool instance; it takes no kwargs")
            made: Any = obj
        elif callable(obj):
            try:
                made = obj(**kwargs)
            except Exception as exc:
                raise DeploymentConfigError(f"tools[{i}]: {import_path}(**{kwargs!r}) failed: {exc!r}") from exc
        else:
            raise DeploymentConfigError(f"tools[{i}]: {import_path} is neither a Tool nor callable")
        made_list = list(made) if isinstance(made, (list, tuple)) else [made]
        for tool in made_list:
            if not isinstance(tool, Tool):
                raise DeploymentConfigError(
                    f"tools[{i}]: {import_path} produced {type(tool).__name__}, not a twinkle_agentic Tool"
                )
        tools.extend(made_list)
    registry = ToolManager()
    for count, tool in enumerate(tools, start=1):
        name = registry.register(tool)
        if len(registry) < count:
            raise DeploymentConfigError(f"tools: two tools are named {name!r}; each served name must be unique")
    return tools


class CallRequest(BaseModel):
    """The body of ``POST /call``."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: Any = None  # checked by ToolManager, so the Error: strings match local dispatch


class _BoundedPool:
    """A thread pool plus a count of its threads held by calls whose caller already gave up."""

    def __init__(self, size: int):
        self.size = size
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=size, thread_name_prefix="tool-call")
        self._lock = threading.Lock()
        self.busy = 0
        self.stuck = 0

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future:
        with self._lock:
            self.busy += 1
        future = self.executor.submit(fn, *args)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future: concurrent.futures.Future) -> None:
        with self._lock:
            self.busy -= 1

    def abandon(self, future: concurrent.futures.Future) -> None:
        """The caller timed out; count the thread as stuck until the tool returns."""
        if future.cancel() or future.done():
            return
        with self._lock:
            self.stuck += 1

        def unstick(_future: concurrent.futures.Future) -> None:
            with self._lock:
                self.stuck -= 1

        future.add_done_callback(unstick)

    def wedged(self) -> bool:
        return self.stuck >= self.size


class ToolHost:
    """One replica's tools: dispatch through ``ToolManager`` on a bounded pool with a per-call timeout."""

    def __init__(self, tools: Sequence[Tool], limits: ToolCallLimits | None = None):
        self.manager = ToolManager(list(tools))
        self.limits = limits or ToolCallLimits()
        self._pool = _BoundedPool(self.limits.max_concurrent_calls)

    def configure(self, limits: ToolCallLimits) -> None:
        if limits.max_concurrent_calls != self._pool.size:
            old, self._pool = self._pool, _BoundedPool(limits.max_concurrent_calls)
            old.executor.shutdown(wait=False)  # calls already running finish and answer their callers
        self.limits = limits

    def schemas(self) -> list[dict[str, Any]]:
        return self.manager.tool_infos()

    async def call(self, name: str, arguments: Any) -> str:
        """Run one call; every outcome, including a timeout, is a string."""
        pool, timeout_s = self._pool, self.limits.call_timeout_s
        future = pool.submit(self.manager, {"function": {"name": name, "arguments": arguments}})
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except TimeoutError:
            pool.abandon(future)
            return f"Error: tool '{name}' timed out after {timeout_s:g}s."

    def health(self) -> dict[str, Any]:
        pool = self._pool
        return {
            "status": "wedged" if pool.wedged() else "healthy",
            "tools": len(self.manager),
            "busy": pool.busy,
            "stuck": pool.stuck,
            "max_concurrent_calls": pool.size,
        }

    def check(self) -> None:
        """Raise when every worker thread is held by an overrun call (Serve then replaces the replica)."""
        if self._pool.wedged():
            raise RuntimeError(
                f"all {self._pool.size} tool threads are held by calls that exceeded call_timeout_s="
                f"{self.limits.call_timeout_s:g}s; this replica cannot serve more calls"
            )

    def close(self) -> None:
        self._pool.executor.shutdown(wait=False, cancel_futures=True)


def make_tool_app(host: ToolHost, token: str | None = None) -> Any:
    """The FastAPI app for one replica (also runnable under plain uvicorn)."""
    authorized = require_bearer(token)
    app = FastAPI(title="twinkle-agentic tool server", docs_url=None, redoc_url=None)

    @app.get("/tools", dependencies=[Depends(authorized)])
    async def list_tools() -> dict[str, Any]:
        return {"tools": host.schemas()}

    @app.post("/call", dependencies=[Depends(authorized)])
    async def call_tool(request: CallRequest) -> dict[str, str]:
        return {"result": await host.call(request.name, request.arguments)}

    @app.get("/health")
    async def health() -> JSONResponse:
        report = host.health()
        return JSONResponse(report, status_code=200 if report["status"] == "healthy" else 503)

    return app


@serve.deployment
@serve.ingress()
class ToolServer:
    """Serve deployment around ``ToolHost``; ``user_config`` is a ``ToolCallLimits`` mapping."""

    def __init__(self, tools: Sequence[ToolSpec], token: str | None = None, token_env: str | None = None):
        self._token = resolve_token(token, token_env)
        limits = ToolCallLimits.from_user_config(getattr(replica_deployment_config(), "user_config", None))
        self._host = ToolHost(build_tools(tools), limits)

    async def reconfigure(self, user_config: Mapping[str, Any] | None) -> None:
        self._host.configure(ToolCallLimits.from_user_config(user_config))

    async def check_health(self) -> None:
        self._host.check()

    def __serve_build_asgi_app__(self) -> Any:
        return make_tool_app(self._host, self._token)

    def __del__(self) -> None:
        host = getattr(self, "_host", None)
        if host is not None:
            host.close()


def tool_server_app(
    tools: Sequence[ToolSpec],
    *,
    token: str | None = None,
    token_env: str | None = None,
    user_config: Mapping[str, Any] | None = None,
    **deployment_options: Any,
) -> Any:
    """Bind a ToolServer application from Python (tests, benches, notebooks).

    ``deployment_options`` go to ``ToolServer.options`` (``num_replicas``, ``max_ongoing_requests``,
    ``ray_actor_options``...); in production the YAML sets them instead.
    """
    check_tool_specs(tools)
    if token is not None and token_env is not None:
        raise DeploymentConfigError("give either token or token_env, not both")
    if user_config is not None:
        ToolCallLimits.from_user_config(user_config)  # fail at bind time, not in every replica
        deployment_options["user_config"] = dict(user_config)
    deployment = ToolServer.options(**deployment_options) if deployment_options else ToolServer
    return deployment.bind(list(tools), token=token, token_env=token_env)


def build_app(args: dict[str, Any]) -> Any:
    """Application builder for ``serve deploy``: ``args`` holds ``tools`` and optionally ``token``/``token_env``."""
    check_keys("tool server args", args, TOOL_SERVER_ARGS)
    if "tools" not in args:
        raise DeploymentConfigError("tool server args need 'tools': a list of 'module:Name' or {import_path, kwargs}")
    return tool_server_app(args["tools"], token=args.get("token"), token_env=args.get("token_env"))
