"""Ray Serve env server: twinkle ``Env`` classes behind OpenEnv's WebSocket protocol.

One application serves one ``Env`` class (give each env its own application and ``route_prefix``
in the YAML, so each scales on its own). Routes, relative to the ``route_prefix``::

    WS  /ws        stateful session: one Env instance per connection (frames: deployments/openenv_protocol.py)
    GET /health    {"status", "active_sessions", "max_sessions", "stuck_sessions"}  (503 when wedged)
    GET /schema    {"action", "observation", "state"} JSON schemas                  (token required if set)
    GET /metadata  {"name", "description", "env_class", "tools"}                    (token required if set)

openenv's ``GenericEnvClient(base_url)`` and our ``OpenEnv(base_url)`` both work against
``base_url = http://host:port/<route_prefix>`` (they append ``/ws``). The stateless HTTP
``/reset``/``/step``/``/state`` of openenv's simulation mode are deliberately not served: they
create a throwaway env per call, which is never what a rollout wants.

Capacity. ``max_concurrent_envs`` (``user_config``) caps live sessions **per replica**; a
connection past it gets ``CAPACITY_REACHED`` and is closed (``OpenEnv`` retries it with backoff).
Each open WebSocket holds one Serve "ongoing request" for its whole life, so
``max_ongoing_requests`` must exceed ``max_concurrent_envs`` (replicas check this at startup): if it
did not, Serve would queue connections at the proxy instead of answering them. With N replicas the
application holds up to N × ``max_concurrent_envs`` sessions; Serve's router sends each new
connection to the less loaded of two replicas, so the N × cap total is approached but not strictly
guaranteed. Autoscaling counts open sessions as ongoing requests; a replica being scaled down keeps
its sessions until ``graceful_shutdown_timeout_s`` and then drops them (clients see the socket close).

A step that overruns ``step_timeout_s`` ends the session with ``SESSION_ERROR``; its slot is freed
only when the env's thread returns (Python cannot kill it). When every slot is held by such
sessions, ``check_health`` fails and Serve replaces the replica. Sessions silent for
``idle_timeout_s`` are closed the same way, so vanished clients do not hold slots forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, WebSocket
from fastapi.responses import JSONResponse
from ray import serve
from starlette.websockets import WebSocketDisconnect

from twinkle_agentic.envs.base import Env
from twinkle_agentic.envs.openenv_types import WSErrorCode

from .common import (
    DeploymentConfigError,
    bearer_ok,
    check_keys,
    load_object,
    positive_number,
    replica_deployment_config,
    require_bearer,
    resolve_token,
)
from .openenv_protocol import (
    EnvSession,
    FactoryError,
    SessionTimeout,
    encode_frame,
    error_frame,
    schemas,
)

logger = logging.getLogger(__name__)

ENV_SERVER_ARGS = ("env", "env_kwargs", "name", "description", "token", "token_env")
ENV_USER_CONFIG = ("max_concurrent_envs", "step_timeout_s", "idle_timeout_s")
DEFAULT_MAX_CONCURRENT_ENVS = 8
DEFAULT_STEP_TIMEOUT_S = 300.0
DEFAULT_IDLE_TIMEOUT_S = 600.0
ONGOING_REQUEST_HEADROOM = 2  # beyond the sessions: /health, /schema and CAPACITY_REACHED answers
CLOSE_WAIT_S = 10.0  # how long a session's end waits for env.close() before freeing the slot later
REFUSAL_LINGER_S = 5.0  # how long a refused connection waits for the client's first frame
POLICY_VIOLATION = 1008  # WebSocket close code for a refused token


@dataclass(frozen=True)
class EnvLimits:
    """The env server's ``user_config``: applied by ``reconfigure`` without restarting replicas."""

    max_concurrent_envs: int = DEFAULT_MAX_CONCURRENT_ENVS
    step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S

    @classmethod
    def from_user_config(cls, config: Mapping[str, Any] | None) -> EnvLimits:
        config = {} if config is None else config
        check_keys("EnvServer user_config", config, ENV_USER_CONFIG)
        return cls(
            max_concurrent_envs=positive_number(
                "max_concurrent_envs", config.get("max_concurrent_envs", DEFAULT_MAX_CONCURRENT_ENVS), integer=True
            ),
            step_timeout_s=positive_number(
                "step_timeout_s", config.get("step_timeout_s", DEFAULT_STEP_TIMEOUT_S), allow_none=True
            ),
            idle_timeout_s=positive_number(
                "idle_timeout_s", config.get("idle_timeout_s", DEFAULT_IDLE_TIMEOUT_S), allow_none=True
            ),
        )


def env_factory(env: str | type[Env] | Callable[..., Env], env_kwargs: Mapping[str, Any] | None = None) -> Callable[[], Env]:
    """A zero-argument factory for ``env`` ("module:Class", a class, or a callable returning an Env)."""
    target = load_object(env) if isinstance(env, str) else env
    if not callable(target):
        raise DeploymentConfigError(f"env must be an Env class or factory, got {type(target).__name__}")
    if inspect.isclass(target) and not issubclass(target, Env):
        raise DeploymentConfigError(f"env {target.__qualname__} is not a subclass of twinkle_agentic Env")
    kwargs = dict(env_kwargs or {})

    def make() -> Env:
        return target(**kwargs)

    make.__name__ = make.__qualname__ = getattr(target, "__qualname__", repr(target))
    return make


class EnvHost:
    """One replica's sessions: capacity slots, the WebSocket loop, and the info routes."""

    def __init__(
        self,
        factory: Callable[[], Env],
        limits: EnvLimits | None = None,
        *,
        token: str | None = None,
        name: str | None = None,
        description: str | None = None,
    ):
        probe = factory()  # fail at deploy time, not on the first connection; also reads tools()
        if not isinstance(probe, Env):
            raise DeploymentConfigError(f"env factory {factory.__name__} returned {type(probe).__name__}, not an Env")
        try:
            self.tools = probe.tools()
        finally:
            probe.close()
        self.env_class = f"{type(probe).__module__}.{type(probe).__qualname__}"
        self.name = name or type(probe).__name__
        self.description = description or (inspect.getdoc(type(probe)) or "").split("\n\n")[0]
        self.factory = factory
        self.limits = limits or EnvLimits()
        self.token = token
        self.active = 0  # sessions holding a slot (until their env has closed)
        self.stuck = 0  # of those, sessions whose env call overran and is still running

    def configure(self, limits: EnvLimits) -> None:
        self.limits = limits  # a lower cap refuses new sessions; live ones carry on

    def health(self) -> dict[str, Any]:
        return {
            "status": "wedged" if self.wedged() else "healthy",
            "active_sessions": self.active,
            "max_sessions": self.limits.max_concurrent_envs,
            "stuck_sessions": self.stuck,
        }

    def wedged(self) -> bool:
        return self.stuck >= self.limits.max_concurrent_envs

    def check(self) -> None:
        if self.wedged():
            raise RuntimeError(
                f"all {self.limits.max_concurrent_envs} session slots are held by env calls that exceeded "
                f"step_timeout_s={self.limits.step_timeout_s}; this replica cannot open sessions"
            )

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "env_class": self.env_class, "tools": self.tools}

    # -- sessions ------------------------------------------------------------------------------------

    async def serve(self, websocket: Any) -> None:
        """Run one WebSocket connection to its end; never raises."""
        if not bearer_ok(websocket.headers.get("authorization"), self.token):
            await websocket.close(code=POLICY_VIOLATION, reason="missing or invalid bearer token")
            return
        await websocket.accept()
        limits = self.limits
        if self.active >= limits.max_concurrent_envs:
            active, cap = self.active, limits.max_concurrent_envs
            await _refuse(websocket, error_frame(
                WSErrorCode.CAPACITY_REACHED,
                f"Server at capacity: {active}/{cap} sessions active. Cannot accept new connections.",
                active_sessions=active,
                max_sessions=cap,
            ))
            return
        self.active += 1
        session = EnvSession(self.factory, step_timeout_s=limits.step_timeout_s)
        try:
            await self._drive(websocket, session, limits)
        except Exception as exc:  # the socket broke or the server failed: say so if we still can
            if not _is_disconnect(exc):
                logger.exception("env session failed")
                await _send_quietly(websocket, error_frame(WSErrorCode.SESSION_ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            await self._end(session)
            with contextlib.suppress(Exception):
                await websocket.close()

    async def _drive(self, websocket: Any, session: EnvSession, limits: EnvLimits) -> None:
        try:
            await session.start()
        except FactoryError as exc:
            await _refuse(websocket, error_frame(WSErrorCode.FACTORY_ERROR, str(exc), factory_name=self.factory.__name__))
            return
        except SessionTimeout as exc:
            await _send(websocket, error_frame(WSErrorCode.SESSION_ERROR, str(exc)))
            return
        while True:
            try:
                async with asyncio.timeout(limits.idle_timeout_s):
                    message = await websocket.receive()
            except TimeoutError:
                await _send(websocket, error_frame(
                    WSErrorCode.SESSION_ERROR, f"session idle for idle_timeout_s={limits.idle_timeout_s:g}s; closed"
                ))
                return
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            raw = message.get("bytes", b"") if raw is None else raw
            try:
                reply, close = await session.handle(raw)
            except SessionTimeout as exc:
                await _send(websocket, error_frame(WSErrorCode.SESSION_ERROR, str(exc)))
                return
            if reply is not None:
                await _send(websocket, reply)
            if close:
                return

    async def _end(self, session: EnvSession) -> None:
        """Close the env; free the slot once it has closed (later, if a timed-out call still runs)."""
        loop = asyncio.get_running_loop()
        stuck = session.timed_out
        if stuck:
            self.stuck += 1

        def release(future: concurrent.futures.Future) -> None:
            if not future.cancelled() and future.exception() is not None:
                logger.warning("env.close() raised %r; the session slot is freed anyway", future.exception())

            def on_loop() -> None:
                self.active -= 1
                if stuck:
                    self.stuck -= 1

            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the server
                loop.call_soon_threadsafe(on_loop)

        closed = session.close()
        closed.add_done_callback(release)  # added first, so the slot is free before we resume below
        if not stuck:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.wrap_future(closed), CLOSE_WAIT_S)


async def _send(websocket: Any, frame: dict[str, Any]) -> None:
    await websocket.send_text(encode_frame(frame))


async def _send_quietly(websocket: Any, frame: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):
        await _send(websocket, frame)


async def _refuse(websocket: Any, frame: dict[str, Any]) -> None:
    """Send a session-ending error right after accept, then close once the client has spoken.

    Clients send their first frame (usually ``reset``) without waiting: closing at once races that
    send, and a client whose send hits the closed socket never reads the error waiting for it
    (openenv's client then raises ConnectionClosedOK instead of CAPACITY_REACHED). Lingering until
    that first frame, at most ``REFUSAL_LINGER_S``, makes the error the answer to it.
    """
    await _send_quietly(websocket, frame)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(websocket.receive(), REFUSAL_LINGER_S)
    with contextlib.suppress(Exception):
        await websocket.close()


def _is_disconnect(exc: BaseException) -> bool:
    return isinstance(exc, WebSocketDisconnect) or type(exc).__name__ in {"ClientDisconnected", "ConnectionClosed"}


def make_env_app(host: EnvHost) -> Any:
    """The FastAPI app for one replica (also runnable under plain uvicorn)."""
    authorized = require_bearer(host.token)
    app = FastAPI(title=f"twinkle-agentic env server: {host.name}", docs_url=None, redoc_url=None)

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await host.serve(websocket)

    @app.get("/health")
    async def health() -> JSONResponse:
        report = host.health()
        return JSONResponse(report, status_code=200 if report["status"] == "healthy" else 503)

    @app.get("/schema", dependencies=[Depends(authorized)])
    async def schema() -> dict[str, Any]:
        return schemas()

    @app.get("/metadata", dependencies=[Depends(authorized)])
    async def metadata() -> dict[str, Any]:
        return host.metadata()

    return app


def check_capacity_fits(limits: EnvLimits, max_ongoing_requests: int | None) -> None:
    if max_ongoing_requests is not None and max_ongoing_requests < limits.max_concurrent_envs + ONGOING_REQUEST_HEADROOM:
        raise DeploymentConfigError(
            f"EnvServer max_ongoing_requests={max_ongoing_requests} is too small for max_concurrent_envs="
            f"{limits.max_concurrent_envs}: each WebSocket session holds one ongoing request, so set "
            f"max_ongoing_requests >= {limits.max_concurrent_envs + ONGOING_REQUEST_HEADROOM} "
            "(sessions + headroom for /health and capacity answers)"
        )


@serve.deployment
@serve.ingress()
class EnvServer:
    """Serve deployment around ``EnvHost``; ``user_config`` is an ``EnvLimits`` mapping."""

    def __init__(
        self,
        env: str | type[Env] | Callable[..., Env],
        env_kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        token: str | None = None,
        token_env: str | None = None,
    ):
        config = replica_deployment_config()
        limits = EnvLimits.from_user_config(getattr(config, "user_config", None))
        check_capacity_fits(limits, getattr(config, "max_ongoing_requests", None))
        self._host = EnvHost(
            env_factory(env, env_kwargs),
            limits,
            token=resolve_token(token, token_env),
            name=name,
            description=description,
        )

    async def reconfigure(self, user_config: Mapping[str, Any] | None) -> None:
        limits = EnvLimits.from_user_config(user_config)
        check_capacity_fits(limits, getattr(replica_deployment_config(), "max_ongoing_requests", None))
        self._host.configure(limits)

    async def check_health(self) -> None:
        self._host.check()

    def __serve_build_asgi_app__(self) -> Any:
        return make_env_app(self._host)


def env_server_app(
    env: str | type[Env] | Callable[..., Env],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    description: str | None = None,
    token: str | None = None,
    token_env: str | None = None,
    user_config: Mapping[str, Any] | None = None,
    **deployment_options: Any,
) -> Any:
    """Bind an EnvServer application from Python (tests, benches, notebooks).

    Without an explicit ``max_ongoing_requests`` it is sized from ``max_concurrent_envs`` (Serve's
    default of 5 would queue the sixth session at the proxy). In production the YAML sets it.
    """
    if token is not None and token_env is not None:
        raise DeploymentConfigError("give either token or token_env, not both")
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise DeploymentConfigError("env_kwargs must be a mapping")
    limits = EnvLimits.from_user_config(user_config)
    if user_config is not None:
        deployment_options["user_config"] = dict(user_config)
    deployment_options.setdefault("max_ongoing_requests", limits.max_concurrent_envs + ONGOING_REQUEST_HEADROOM)
    check_capacity_fits(limits, deployment_options["max_ongoing_requests"])
    return EnvServer.options(**deployment_options).bind(
        env, env_kwargs=dict(env_kwargs or {}), name=name, description=description, token=token, token_env=token_env
    )


def build_app(args: dict[str, Any]) -> Any:
    """Application builder for ``serve deploy``: ``args`` holds ``env`` ("module:Class") and options."""
    check_keys("env server args", args, ENV_SERVER_ARGS)
    if "env" not in args:
        raise DeploymentConfigError("env server args need 'env': the Env class as 'module:Class'")
    return env_server_app(**args)
