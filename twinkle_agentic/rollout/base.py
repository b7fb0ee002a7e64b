"""The rollout contract, its closed set of stop reasons, and the helpers both rollouts share.

A rollout takes a list of trajectories and returns the same number, in order, each extended with
``messages``, ``turns``, ``stop_reason``, ``truncated`` and (when set) ``error``. Failures are values
on the affected trajectory, never exceptions for the whole batch.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twinkle_agentic.checks import check_positive
from twinkle_agentic.data_format import SamplingParams, ToolCall, Trajectory
from twinkle_agentic.data_format.tool_calls import decode_tool_calls, tool_call_id
from twinkle_agentic.tools.tool_manager import ToolManager

# -- stop reasons (closed set, SPEC 17.1) ---------------------------------------------------------------
STOP = "stop"  # the assistant turn had no tool call (or an environment ended the episode)
LENGTH = "length"  # a per-turn token limit, the trajectory budget or the template max_length
MAX_TURNS = "max_turns"  # turn max_turns produced tool calls; they were not executed
ERROR = "error"  # engine rollout: a failure in this trajectory only
API_ERROR = "api_error"  # API rollout: the API call or the tool execution failed
STOP_REASONS = frozenset({STOP, LENGTH, MAX_TURNS, ERROR, API_ERROR})

# -- defaults every rollout and the farm's RolloutSpec share ------------------------------------------
DEFAULT_MAX_TURNS = 6  # assistant turns per trajectory (the seeds' default)
DEFAULT_TOOL_CONCURRENCY = 8  # tool calls a turn-synchronous rollout (and a farm worker) runs at once

# A per-trajectory source of tools: a manager, or a factory building a fresh one for a trajectory.
ManagerFactory = Callable[[Trajectory], ToolManager]
ToolManagerSpec = ToolManager | ManagerFactory | None


class Rollout(ABC):
    """Turns prompts into finished multi-turn trajectories."""

    @abstractmethod
    def __call__(self, trajectories: list[Trajectory], **kwargs: Any) -> list[Trajectory]:
        raise NotImplementedError


# -- input checks -------------------------------------------------------------------------------------


_ATOMS = (str, int, float, bool, type(None))


def copy_json_like(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, strings, numbers), several times faster than
    ``copy.deepcopy`` on messages; anything else inside is copied by ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {key: copy_json_like(item) for key, item in value.items()}
    if kind is list:
        return [copy_json_like(item) for item in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def prepare_trajectories(trajectories: Any) -> list[dict[str, Any]]:
    """Validate the batch and return private copies (the caller's objects are never mutated).

    A single trajectory dict is refused (a common mistake that would otherwise iterate its keys).
    """
    if isinstance(trajectories, Mapping):
        raise TypeError("a rollout takes a list of trajectories, got a single dict; wrap it in a list")
    if isinstance(trajectories, (str, bytes)) or not isinstance(trajectories, Sequence):
        raise TypeError(f"a rollout takes a list of trajectories, got {type(trajectories).__name__}")
    out = []
    for index, trajectory in enumerate(trajectories):
        if not isinstance(trajectory, Mapping):
            raise TypeError(f"trajectory {index} must be a dict, got {type(trajectory).__name__}")
        messages = trajectory.get("messages")
        if messages is not None and not isinstance(messages, (list, tuple)):
            raise TypeError(f"trajectory {index}: 'messages' must be a list, got {type(messages).__name__}")
        copied = dict(trajectory)
        copied["messages"] = [copy_json_like(m) for m in messages or []]
        out.append(copied)
    return out


def check_max_turns(max_turns: Any) -> int:
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
    return max_turns


def check_tool_concurrency(tool_concurrency: Any, *, allow_zero: bool = False) -> int:
    """``tool_concurrency`` when it is an integer >= 1 (>= 0 with ``allow_zero``), else a ``ValueError``
    (``ConfigError``) naming the setting."""
    return check_positive("tool_concurrency", tool_concurrency, integer=True, allow_zero=allow_zero)


def check_sampling_params(params: SamplingParams | Mapping[str, Any] | None) -> SamplingParams:
    """Accept a ``SamplingParams`` or a dict; rollouts produce one sample per trajectory."""
    if params is None:
        params = SamplingParams()
    elif isinstance(params, Mapping):
        params = SamplingParams.from_dict(params)
    elif not isinstance(params, SamplingParams):
        raise TypeError(f"sampling_params must be SamplingParams, a dict or None, got {type(params).__name__}")
    if params.num_samples != 1:
        raise ValueError(
            f"rollouts sample one continuation per trajectory (num_samples=1), got num_samples="
            f"{params.num_samples}; repeat the trajectory instead"
        )
    return params


# -- tool managers --------------------------------------------------------------------------------------


def is_tool_manager(value: Any) -> bool:
    return isinstance(value, ToolManager) or (callable(value) and hasattr(value, "tool_infos"))


def resolve_tool_managers(
    per_call: ToolManagerSpec | Sequence[ToolManagerSpec],
    default: ToolManagerSpec | Sequence[ToolManagerSpec],
    count: int,
    *,
    required: bool = True,
) -> list[ToolManagerSpec]:
    """One tool-manager spec per trajectory: the per-call value, else the constructor's.

    A spec is a manager (shared by every trajectory it is given to; its tools must be thread-safe),
    a factory ``f(trajectory) -> ToolManager`` (a fresh manager per trajectory, for stateful tools
    such as an ``OpenEnv`` session), or a list of either aligned with the trajectories.
    """
    value = per_call if per_call is not None else default
    if value is None:
        if required:
            raise ValueError("no tool_manager: pass one to the constructor or to this call")
        return [None] * count
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"tool_manager list has {len(value)} entries for {count} trajectories")
        specs = list(value)
    else:
        specs = [value] * count
    for index, spec in enumerate(specs):
        if spec is None:
            if required:
                raise ValueError(f"tool_manager entry {index} is None")
        elif not (is_tool_manager(spec) or callable(spec)):
            raise TypeError(
                f"tool_manager entry {index} must be a ToolManager or a factory returning one, got "
                f"{type(spec).__name__}"
            )
    return specs


def open_tool_manager(spec: ToolManagerSpec, trajectory: Trajectory) -> tuple[ToolManager | None, bool]:
    """Materialise a spec for one trajectory; returns ``(manager, owned)`` (owned: built here, close it)."""
    if spec is None or is_tool_manager(spec):
        return spec, False
    manager = spec(trajectory)
    if not is_tool_manager(manager):
        raise TypeError(f"tool_manager factory returned {type(manager).__name__}, expected a ToolManager")
    return manager, True


def request_tools(trajectory: Trajectory, manager: ToolManager | None) -> list[dict[str, Any]] | None:
    """Tools to offer the model: the trajectory's own, else the manager's, else none."""
    tools = trajectory.get("tools")
    if tools:
        return list(tools)
    if manager is not None:
        return manager.tool_infos() or None
    return None


# -- messages -------------------------------------------------------------------------------------------


def with_call_ids(tool_calls: Any, turn: int) -> list[ToolCall]:
    """The decoded calls, each with an id (``call_{turn}_{i}`` when missing) and ``type='function'``.

    Malformed entries are kept as they are so the tool manager can answer them with its ``Error:``
    string (the model learns from that); arguments are left in the form the model produced.
    """
    out: list[ToolCall] = []
    for index, call in enumerate(decode_tool_calls(tool_calls)):
        if not isinstance(call, Mapping):
            out.append(call)
            continue
        call = dict(call)
        if not call.get("id"):
            call["id"] = tool_call_id(turn, index)
        call["type"] = "function"
        if isinstance(call.get("function"), Mapping):
            call["function"] = dict(call["function"])
        out.append(call)
    return out


def tool_message(call: Any, content: str, turn: int, index: int) -> dict[str, Any]:
    call_id = call.get("id") if isinstance(call, Mapping) else None
    return {"role": "tool", "tool_call_id": call_id or tool_call_id(turn, index), "content": content}


def tools_report_done(manager: ToolManager | None, tool_calls: Sequence[Any]) -> bool:
    """True when a tool called this turn reports its episode finished (e.g. an ``EnvTool`` whose
    environment returned ``done=True``)."""
    if manager is None:
        return False
    for call in tool_calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        tool = manager.get(name) if isinstance(name, str) else None
        if tool is not None and getattr(tool, "done", False) is True:
            return True
    return False


def format_error(exc: BaseException, prefix: str | None = None) -> str:
    """``'Type: message'`` (optionally prefixed, e.g. ``'ToolExecution Type: message'``)."""
    text = f"{type(exc).__name__}: {exc}"
    return f"{prefix} {text}" if prefix else text


def finish(trajectory: dict[str, Any], stop_reason: str, turns: int, error: str | None = None) -> dict[str, Any]:
    """Stamp the outcome; only a natural ``stop`` is untruncated."""
    if stop_reason not in STOP_REASONS:
        raise ValueError(f"unknown stop_reason {stop_reason!r}; expected one of {sorted(STOP_REASONS)}")
    trajectory["turns"] = turns
    trajectory["stop_reason"] = stop_reason
    trajectory["truncated"] = stop_reason != STOP
    if error is not None:
        trajectory["error"] = error
    else:
        trajectory.pop("error", None)
    return trajectory
