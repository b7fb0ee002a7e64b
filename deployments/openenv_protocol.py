"""OpenEnv's WebSocket protocol (SPEC 16.1) spoken over a twinkle ``Env``: sessions, and the frames a
server sends. The frame models, error codes and reward rule are declared once, for the server and
the client alike, in :mod:`twinkle_agentic.envs.openenv_types`.

One ``EnvSession`` is one WebSocket connection: one ``Env`` instance, one episode at a time, driven
on one dedicated thread (sync envs keep thread affinity, and a slow env never blocks the event loop).

How a twinkle ``Env`` maps onto the wire:

* ``{"type":"reset","data":{...}}`` calls ``env.reset(**kw)`` with the data keys ``env.reset``
  accepts (``trajectory`` for the base ``Env``); other keys (``seed`` from a generic client) are
  ignored, as openenv does. ``episode_id`` in the data names the episode (else a fresh uuid).
* ``{"type":"step","data":{"tool_name": str, "arguments": {...}}}`` calls
  ``env.step(tool_name, arguments)``. This is ``OpenEnv``'s default action; openenv MCP actions
  (``"type": "call_tool"``, and an ignored ``metadata``) are accepted too, and
  ``{"type": "list_tools"}`` answers ``{"tools": env.tools()}`` without stepping.
* Both answer ``{"type":"observation","data":{"observation":{"result": str(observation),
  "metadata": info}, "reward": float|null, "done": bool, "metadata": info}}``: the text sits under
  ``result`` (the first key our adapter renders), ``info`` travels as metadata the way openenv 0.10
  sends it (inside the observation, repeated as ``data.metadata`` when non-empty). A non-finite
  reward is sent as null.
* ``{"type":"state"}`` answers ``{episode_id, step_count, episode_reward, done}``;
  ``{"type":"close"}`` ends the session.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from twinkle_agentic.envs.base import Env
from twinkle_agentic.envs.openenv_types import (
    FRAME_MODELS,
    CloseFrame,
    ErrorData,
    FrameType,
    ListToolsAction,
    ObservationData,
    ResetFrame,
    SessionState,
    StateFrame,
    StepAction,
    WSErrorCode,
    wire_reward,
)


def error_frame(code: WSErrorCode, message: str, **extra: Any) -> dict[str, Any]:
    """An error frame; ``extra`` keys (``errors``, ``factory_name``) travel beside message and code."""
    data = ErrorData(message=message, code=code, **extra).model_dump(mode="json")
    return {"type": FrameType.ERROR.value, "data": data}


def encode_frame(frame: dict[str, Any]) -> str:
    """JSON text of a frame; values JSON cannot carry (in an env's ``info``) become their ``str``."""
    return json.dumps(frame, default=str)


def observation_frame(result: Any) -> dict[str, Any]:
    """Encode a ``StepResult`` (anything with observation/reward/done/info) as an observation frame."""
    info = getattr(result, "info", None) or {}
    metadata = info if isinstance(info, dict) else {"info": info}
    data: dict[str, Any] = {
        "observation": {"result": str(result.observation), "metadata": metadata},
        "reward": wire_reward(getattr(result, "reward", None)),
        "done": bool(getattr(result, "done", False)),
    }
    if metadata:
        data["metadata"] = metadata
    return {"type": FrameType.OBSERVATION.value, "data": data}


def schemas() -> dict[str, Any]:
    """What ``GET /schema`` returns: JSON schemas of the action, observation and state."""
    return {
        "action": StepAction.model_json_schema(),
        "observation": ObservationData.model_json_schema(),
        "state": SessionState.model_json_schema(),
    }


# -- sessions ----------------------------------------------------------------------------------------


class FactoryError(Exception):
    """The env factory raised or returned something that is not an ``Env``."""


class SessionTimeout(Exception):
    """An env call overran ``step_timeout_s``; the env may still be running it."""


def reset_parameters(reset: Callable[..., Any]) -> set[str] | None:
    """Names ``reset`` accepts as keywords; None when it takes ``**kwargs`` (everything passes)."""
    params = inspect.signature(reset).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


class EnvSession:
    """One connection's env and episode bookkeeping. Call ``start``, then ``handle`` per frame, then ``close``."""

    def __init__(self, env_factory: Callable[[], Env], *, step_timeout_s: float | None):
        self._factory = env_factory
        self._step_timeout_s = step_timeout_s
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="env-session")
        self.env: Env | None = None
        self.state = SessionState()
        self.timed_out = False
        self._factory_future: concurrent.futures.Future | None = None
        self._reset_params: set[str] | None = None

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self._await(self._executor.submit(fn, *args, **kwargs), fn)

    async def _await(self, future: concurrent.futures.Future, fn: Any) -> Any:
        try:
            async with asyncio.timeout(self._step_timeout_s):  # no extra task per call, unlike wait_for
                return await asyncio.wrap_future(future)
        except TimeoutError:
            self.timed_out = not future.done()
            raise SessionTimeout(
                f"{getattr(fn, '__qualname__', fn)} exceeded step_timeout_s={self._step_timeout_s:g}s; "
                "the session is closed because the env may still be running it"
            ) from None

    async def start(self) -> None:
        """Build the env on the session thread; raises ``FactoryError`` or ``SessionTimeout``."""
        self._factory_future = self._executor.submit(self._factory)
        try:
            env = await self._await(self._factory_future, self._factory)
        except SessionTimeout:
            raise
        except Exception as exc:
            raise FactoryError(f"environment factory failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(env, Env):
            raise FactoryError(f"environment factory returned {type(env).__name__}, not a twinkle_agentic Env")
        self.env = env
        self._reset_params = reset_parameters(env.reset)

    async def handle(self, raw: str | bytes) -> tuple[dict[str, Any] | None, bool]:
        """Answer one client frame: ``(reply or None, close_after)``. Raises ``SessionTimeout``."""
        try:
            frame = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return error_frame(WSErrorCode.INVALID_JSON, f"Invalid JSON: {exc}"), False
        if not isinstance(frame, dict):
            return error_frame(WSErrorCode.VALIDATION_ERROR, f"a frame must be a JSON object, got {type(frame).__name__}"), False
        kind = frame.get("type")
        model = FRAME_MODELS.get(kind) if isinstance(kind, str) else None
        if model is None:
            return error_frame(WSErrorCode.UNKNOWN_TYPE, f"Unknown message type: {kind}"), False
        try:
            message = model.model_validate(frame)
            if isinstance(message, CloseFrame):
                return None, True
            if isinstance(message, StateFrame):
                return {"type": FrameType.STATE.value, "data": self.state.model_dump()}, False
            if isinstance(message, ResetFrame):
                return await self._reset(message.data), False
            return await self._step(message.data), False
        except ValidationError as exc:
            errors = json.loads(exc.json(include_url=False))
            return error_frame(WSErrorCode.VALIDATION_ERROR, "Invalid message", errors=errors), False
        except SessionTimeout:
            raise
        except Exception as exc:  # the env raised: report it, keep the session
            return error_frame(WSErrorCode.EXECUTION_ERROR, f"{type(exc).__name__}: {exc}"), False

    async def _reset(self, data: dict[str, Any]) -> dict[str, Any]:
        assert self.env is not None
        allowed = self._reset_params
        kwargs = {k: v for k, v in data.items() if allowed is None or k in allowed}
        episode_id = data.get("episode_id")
        self.state = SessionState(episode_id=str(episode_id) if episode_id else uuid.uuid4().hex)
        result = await self._run(self.env.reset, **kwargs)
        self.state.done = bool(getattr(result, "done", False))
        return observation_frame(result)

    async def _step(self, data: dict[str, Any]) -> dict[str, Any]:
        assert self.env is not None
        if data.get("type") == "list_tools":
            ListToolsAction.model_validate(data)
            tools = await self._run(self.env.tools)
            return {
                "type": FrameType.OBSERVATION.value,
                "data": {"observation": {"tools": tools, "metadata": {}}, "reward": None, "done": False},
            }
        action = StepAction.model_validate(data)
        result = await self._run(self.env.step, action.tool_name, action.arguments)
        if not hasattr(result, "observation"):
            raise TypeError(f"Env.step returned {type(result).__name__}, expected StepResult")
        frame = observation_frame(result)
        self.state.step_count += 1
        self.state.episode_reward += frame["data"]["reward"] or 0.0
        self.state.done = frame["data"]["done"]
        return frame

    def close(self) -> concurrent.futures.Future:
        """Close the env on its own thread, after any call still running; returns that work's future."""
        future = self._executor.submit(self._close_env)
        self._executor.shutdown(wait=False)
        return future

    def _close_env(self) -> None:
        env = self.env
        made = self._factory_future
        if env is None and made is not None and made.done() and made.exception() is None:
            env = made.result()  # the factory finished after start() stopped waiting for it
        close = getattr(env, "close", None)
        if callable(close):
            close()
