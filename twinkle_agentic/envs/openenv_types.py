"""The OpenEnv WebSocket wire format (SPEC 16.1), declared once for both ends.

The Serve env server (``deployments/env_server.py`` with ``deployments/openenv_protocol.py``) and
the client adapter (``OpenEnv`` with :mod:`.openenv_wire`) take the error codes, the frame types,
the reward rule and the pydantic frame models from here, so the two cannot drift apart.

The pydantic models are built on first access (``openenv_types.ResetFrame``...), so the client,
which needs only the codes and the reward rule, imports without pydantic.
"""

from __future__ import annotations

import math
import sys
from enum import StrEnum
from typing import Any, Literal


class FrameType(StrEnum):
    """The ``type`` of a frame. A client sends reset/step/state/close; a server answers
    observation/state/error."""

    RESET = "reset"
    STEP = "step"
    STATE = "state"
    CLOSE = "close"
    OBSERVATION = "observation"
    ERROR = "error"


class WSErrorCode(StrEnum):
    """``data.code`` of an error frame, as a server sends it."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"


class ClientErrorCode(StrEnum):
    """Codes the client reports for failures no server frame describes."""

    CONNECTION_FAILED = "CONNECTION_FAILED"  # could not open the socket (refused, handshake timeout, 5xx)
    CONNECTION_LOST = "CONNECTION_LOST"  # the socket closed mid-episode
    TIMEOUT = "TIMEOUT"  # no reply within message_timeout_s
    PROTOCOL_ERROR = "PROTOCOL_ERROR"  # a reply that is not a frame we understand
    CLIENT_ERROR = "CLIENT_ERROR"  # the request could not be built or sent (e.g. an action that is not JSON)
    ACTION_MAPPER_ERROR = "ACTION_MAPPER_ERROR"  # the action mapper raised


# A server closes the socket after sending these; the client must open a new session.
SOCKET_CLOSING_CODES = frozenset(
    {WSErrorCode.CAPACITY_REACHED, WSErrorCode.FACTORY_ERROR, WSErrorCode.SESSION_ERROR}
)
# Failures before a session holds any state: trying again cannot repeat an action.
RETRYABLE_CODES = frozenset({WSErrorCode.CAPACITY_REACHED, ClientErrorCode.CONNECTION_FAILED})


def wire_reward(value: Any) -> float | None:
    """A reward as the wire carries it: a finite float, else None (no reward, not a legal 0.0).

    Numbers and bools become floats; None, NaN, infinities, strings and anything else that is not
    a number become None, on the server (encoding) and the client (decoding) alike.
    """
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        reward = float(value)
    except (TypeError, ValueError):
        return None
    return reward if math.isfinite(reward) else None


# -- pydantic frame models (built on first access) --------------------------------------------------

MODEL_NAMES = frozenset(
    {
        "ResetFrame",
        "StepFrame",
        "StateFrame",
        "CloseFrame",
        "StepAction",
        "ListToolsAction",
        "ObservationData",
        "ErrorData",
        "SessionState",
        "FRAME_MODELS",
    }
)


def __getattr__(name: str) -> Any:
    if name not in MODEL_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    models = _build_models()
    module = sys.modules[__name__]
    for key, value in models.items():
        setattr(module, key, value)
    return models[name]


def _build_models() -> dict[str, Any]:
    from pydantic import BaseModel, ConfigDict, Field

    class _Frame(BaseModel):
        model_config = ConfigDict(extra="forbid")  # as in openenv: a misspelt key is an error

    class ResetFrame(_Frame):
        type: Literal["reset"]
        data: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of Env.reset")

    class StepFrame(_Frame):
        type: Literal["step"]
        data: dict[str, Any] = Field(description="The action: a StepAction or a ListToolsAction")

    class StateFrame(_Frame):
        type: Literal["state"]

    class CloseFrame(_Frame):
        type: Literal["close"]

    class StepAction(_Frame):
        """The ``data`` of a step frame: one tool action for ``Env.step``."""

        type: Literal["call_tool"] | None = Field(default=None, description="openenv MCP discriminator; optional")
        tool_name: str = Field(min_length=1, description="Passed to Env.step as tool_name")
        arguments: dict[str, Any] = Field(default_factory=dict, description="Passed to Env.step as arguments")
        metadata: dict[str, Any] = Field(default_factory=dict, description="Accepted from openenv clients; unused")

    class ListToolsAction(_Frame):
        type: Literal["list_tools"]
        metadata: dict[str, Any] = Field(default_factory=dict)

    class ObservationData(BaseModel):
        result: str = Field(description="str(StepResult.observation)")
        metadata: dict[str, Any] = Field(default_factory=dict, description="StepResult.info")

    class ErrorData(BaseModel):
        """The ``data`` of an error frame; extra keys (``errors``, ``factory_name``...) carry details."""

        model_config = ConfigDict(extra="allow")
        message: str
        code: WSErrorCode

    class SessionState(BaseModel):
        episode_id: str | None = None
        step_count: int = Field(default=0, ge=0)
        episode_reward: float = 0.0
        done: bool = False

    models: dict[str, Any] = {
        cls.__name__: cls
        for cls in (ResetFrame, StepFrame, StateFrame, CloseFrame, StepAction, ListToolsAction,
                    ObservationData, ErrorData, SessionState)
    }
    for cls in models.values():  # importable (and picklable) by name from this module
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    models["FRAME_MODELS"] = {
        FrameType.RESET: ResetFrame,
        FrameType.STEP: StepFrame,
        FrameType.STATE: StateFrame,
        FrameType.CLOSE: CloseFrame,
    }
    return models
