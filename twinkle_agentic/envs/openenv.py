"""``OpenEnv``: a running OpenEnv server (WebSocket ``/ws``) as a synchronous ``Env``.

One instance is one server session and one episode: concurrent trajectories need one instance
each (e.g. a ``tool_manager`` factory in ``APIMultiTurnRollout``). Nothing raises out of
``reset``/``step``: every failure becomes a final ``Error: ...`` observation with
``info['error_code']``, so a rollout records it and moves on. The instance pickles its
configuration only and reconnects lazily, so copies work inside Ray actors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from twinkle_agentic.data_format import ToolInfo, Trajectory
from twinkle_agentic.loading import load_object
from twinkle_agentic.retry import RetryPolicy

from .base import Env, StepResult
from .openenv_types import ClientErrorCode, FrameType, WSErrorCode
from .openenv_wire import OpenEnvClientTransport, WireClient, WireError, parse_observation_frame

ActionMapper = Callable[[str, dict[str, Any]], Any]
WIRE_CLIENT_OPTIONS = frozenset({"connect_timeout_s", "message_timeout_s", "max_message_size_mb", "headers"})
DEFAULT_RETRY_ATTEMPTS = 8  # extra attempts of a retryable failure; the farm's env specs default to it


def default_action_mapper(tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_name": tool_name, "arguments": arguments}


def mcp_action_mapper(tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """For MCP environments (openenv 0.10 ``CallToolAction``)."""
    return {"type": "call_tool", "tool_name": tool_name, "arguments": arguments}


def _resolve_env_cls(env_cls: type | str) -> type:
    """The typed client ``env_cls`` names: a class, ``"package.module:Class"`` or ``"package.module.Class"``."""
    if isinstance(env_cls, type):
        return env_cls
    if not isinstance(env_cls, str) or ("." not in env_cls and ":" not in env_cls):
        raise ValueError(f"env_cls must be a class, 'package.module:Class' or a dotted path 'package.module.Class', got {env_cls!r}")
    spec = env_cls if ":" in env_cls else ":".join(env_cls.rsplit(".", 1))
    cls = load_object(spec, what="OpenEnv env_cls")
    if not hasattr(cls, "sync"):
        raise TypeError(f"OpenEnv env_cls {env_cls!r} is not an openenv EnvClient (it has no .sync())")
    return cls


class OpenEnv(Env):
    """Adapter for an OpenEnv server at ``base_url`` (``http(s)://`` or ``ws(s)://``).

    ``env_cls=None`` uses the project's own blocking client (needs only ``websockets``; options
    from ``env_kwargs``: ``connect_timeout_s`` 10, ``message_timeout_s`` 60,
    ``max_message_size_mb`` 100, ``headers``). A class or dotted path of an openenv ``EnvClient``
    uses that client through ``.sync()`` with ``env_kwargs`` as its constructor arguments.
    ``action_mapper(tool_name, arguments)`` builds each step's action (default
    ``{'tool_name', 'arguments'}``; ``mcp_action_mapper`` for MCP servers; ``lambda n, a: a`` for
    servers whose action is the arguments themselves). ``reset_kwargs`` are sent with every reset
    (e.g. ``{'seed': 1}``). ``CAPACITY_REACHED`` and failed connections are retried up to
    ``retry_attempts`` times, waiting ``min(retry_max_s, retry_base_s * 2**k)`` +-20%. A step whose
    reward is null or not a finite number returns ``reward=None`` and adds nothing to
    ``episode_reward``.
    """

    def __init__(
        self,
        base_url: str,
        env_cls: type | str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        tool_schema: list[ToolInfo] | None = None,
        action_mapper: ActionMapper | None = None,
        *,
        reset_kwargs: Mapping[str, Any] | None = None,
        retry_attempts: int = DEFAULT_RETRY_ATTEMPTS,
        retry_base_s: float = 0.5,
        retry_max_s: float = 8.0,
    ):
        if not isinstance(base_url, str) or not base_url.strip():
            raise ValueError(f"OpenEnv base_url must be a URL string, got {base_url!r}")
        if isinstance(retry_attempts, bool) or not isinstance(retry_attempts, int) or retry_attempts < 0:
            raise ValueError(f"retry_attempts must be an integer >= 0, got {retry_attempts!r}")
        if retry_base_s < 0 or retry_max_s < 0:
            raise ValueError("retry_base_s and retry_max_s must be >= 0")
        self.base_url = base_url
        self.env_kwargs = dict(env_kwargs or {})
        if env_cls is None:
            unknown = sorted(set(self.env_kwargs) - WIRE_CLIENT_OPTIONS)
            if unknown:
                raise TypeError(f"OpenEnv env_kwargs {unknown} are not options of the built-in client; "
                                f"allowed: {sorted(WIRE_CLIENT_OPTIONS)} (or pass env_cls=)")
        else:
            _resolve_env_cls(env_cls)  # import failures surface here, not at the first step
        self.env_cls = env_cls
        self.tool_schema = list(tool_schema or [])
        self.action_mapper = action_mapper or default_action_mapper
        self.reset_kwargs = dict(reset_kwargs or {})
        self.retry_attempts = retry_attempts
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self._backoff = RetryPolicy(attempts=retry_attempts + 1, base_s=retry_base_s, max_s=retry_max_s)
        self._init_runtime()

    # -- runtime state (never pickled) -----------------------------------------------------------------

    def _init_runtime(self) -> None:
        self._transport: Any = None
        self._lock = threading.Lock()
        self._session_started = False  # a session existed in this episode: a lost one is not reopened
        self.episode_reward = 0.0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_transport", "_lock", "_session_started", "episode_reward"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        return f"OpenEnv({self.base_url!r}, env_cls={self.env_cls!r})"

    def _new_transport(self) -> Any:
        if self.env_cls is None:
            return WireClient(self.base_url, **self.env_kwargs)
        return OpenEnvClientTransport(_resolve_env_cls(self.env_cls), self.base_url, self.env_kwargs)

    # -- Env API ----------------------------------------------------------------------------------------

    def reset(self, trajectory: Trajectory | None = None) -> StepResult:
        with self._lock:
            self.episode_reward = 0.0
            if self._transport is not None and not self._transport.connected:
                self._transport = None
            frame = {"type": FrameType.RESET, "data": dict(self.reset_kwargs)}
            return self._exchange(frame, may_open=True)

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        with self._lock:
            try:
                action = self.action_mapper(tool_name, dict(arguments or {}))
            except Exception as exc:
                return self._failure(WireError(ClientErrorCode.ACTION_MAPPER_ERROR, f"{type(exc).__name__}: {exc}"))
            if hasattr(action, "model_dump") and self.env_cls is None:
                action = action.model_dump()
            frame = {"type": FrameType.STEP, "data": action}
            return self._exchange(frame, may_open=not self._session_started)

    def tools(self) -> list[ToolInfo]:
        return list(self.tool_schema)

    def close(self) -> None:
        with self._lock:
            transport, self._transport = self._transport, None
            self._session_started = False
            if transport is not None:
                transport.close()

    # -- exchange ---------------------------------------------------------------------------------------

    def _exchange(self, frame: dict[str, Any], may_open: bool) -> StepResult:
        for attempt in range(self.retry_attempts + 1):
            data, error, opened_now = self._attempt(frame, may_open)
            if error is None:
                break
            # capacity and connection failures happen before the session holds any state: retry
            if error.retryable and (opened_now or error.code != WSErrorCode.CAPACITY_REACHED) and attempt < self.retry_attempts:
                self._transport = None
                time.sleep(self._backoff.delay_s(attempt))
                continue
            return self._failure(error)
        try:
            parsed = parse_observation_frame(data)
        except WireError as error:
            return self._failure(error)
        if parsed.reward is not None:  # no reward (null, non-finite on the server) adds nothing
            self.episode_reward += parsed.reward
        info = {"episode_reward": self.episode_reward, "metadata": parsed.metadata, "raw_result": parsed.raw}
        return StepResult(parsed.text, parsed.reward, parsed.done, info)

    def _attempt(self, frame: dict[str, Any], may_open: bool) -> tuple[Any, WireError | None, bool]:
        """One send/receive; returns ``(data, error, opened_a_new_session)``."""
        opened_now = False
        try:
            if self._transport is None or not self._transport.connected:
                if not may_open:
                    raise WireError(ClientErrorCode.CONNECTION_LOST, "the session was lost mid-episode; call reset() to start a new one")
                self._transport = self._transport or self._new_transport()
                self._transport.connect()
                opened_now = True
                self._session_started = True
            return self._transport.request(frame), None, opened_now
        except WireError as error:
            return None, error, opened_now
        except Exception as exc:  # e.g. an action that is not JSON: never raise out of reset/step
            if self._transport is not None:
                self._transport.drop()
            return None, WireError(ClientErrorCode.CLIENT_ERROR, f"{type(exc).__name__}: {exc}"), opened_now

    def _failure(self, error: WireError) -> StepResult:
        info = {"error": error.message, "error_code": error.code, "episode_reward": self.episode_reward}
        return StepResult(f"Error: {error.message}", 0.0, True, info)
