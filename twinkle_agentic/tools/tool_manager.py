"""``ToolManager``: the registry and dispatcher between model tool calls and ``Tool`` objects.

Dispatch never raises: every failure comes back as an ``Error: ...`` string so a rollout can hand it
to the model as the tool's answer and carry on (the exact strings are part of the contract, SPEC 14).
"""

from __future__ import annotations

import copy as _copy
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from twinkle_agentic.data_format import ToolInfo

from .base import InvalidToolError, Tool

logger = logging.getLogger(__name__)


class ToolTimeout(Exception):
    """Internal marker: the tool did not answer within its time limit."""


def _type_name(value: Any) -> str:
    return type(value).__name__


def _tool_name_of(tool: Tool) -> str:
    info = tool.tool_info() or {}
    function = info.get("function") if isinstance(info, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name.strip():
        raise InvalidToolError(
            f"{_type_name(tool)}.tool_info() has no function name; a tool registered without an explicit "
            "name needs tool_info()['function']['name']"
        )
    return name


class ToolManager:
    """Registry of tools keyed by function name, and dispatcher of OpenAI-shaped tool calls.

    ``tools`` is a list of ``Tool`` (keyed by ``tool_info()['function']['name']``), a dict of
    name -> ``Tool`` (keys used as given), or None. ``timeout_s`` bounds every call whose tool does not
    set its own ``timeout_s``; a call that overruns returns ``Error: tool 'x' timed out after Ns.``
    (the tool's thread is abandoned, not killed: Python threads cannot be killed, so a tool that may
    hang forever should also enforce its own deadline).
    """

    def __init__(self, tools: Iterable[Tool] | Mapping[str, Tool] | None = None, *, timeout_s: float | None = None):
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"ToolManager timeout_s must be None or > 0, got {timeout_s!r}")
        self.timeout_s = timeout_s
        self._tools: dict[str, Tool] = {}
        if tools is None:
            return
        if isinstance(tools, Mapping):
            for name, tool in tools.items():
                self.register(tool, name=name)
        elif isinstance(tools, (list, tuple)):
            for tool in tools:
                self.register(tool)
        else:
            raise InvalidToolError(
                f"ToolManager(tools) takes a list or dict of Tool, or None; got {_type_name(tools)}"
            )

    # -- registry -----------------------------------------------------------------------------------

    def register(self, tool: Tool, name: str | None = None) -> str:
        """Register ``tool`` under ``name`` (default: its schema name); a later tool of the same name wins.

        Raises ``InvalidToolError`` (a ``ValueError`` and a ``TypeError``) for an object that is not a
        Tool, a tool whose ``tool_info()`` names no function, or an empty ``name``.
        """
        if not callable(tool) or not hasattr(tool, "tool_info"):
            raise InvalidToolError(
                f"ToolManager.register expects a Tool (a callable with tool_info()), got {_type_name(tool)}"
            )
        if name is None:
            name = _tool_name_of(tool)
        elif not isinstance(name, str) or not name.strip():
            raise InvalidToolError(f"tool name must be a non-empty string, got {name!r}")
        self._tools[name] = tool
        return name

    def unregister(self, name: str) -> Tool | None:
        """Remove and return the tool registered as ``name`` (None when there is none)."""
        return self._tools.pop(name, None)

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def copy(self) -> ToolManager:
        """A new registry holding the same tool objects (shallow)."""
        other = ToolManager(timeout_s=self.timeout_s)
        other._tools = dict(self._tools)
        return other

    def tool_infos(self) -> list[ToolInfo]:
        """The schemas to send to a model; each carries the name this manager dispatches on."""
        infos: list[ToolInfo] = []
        for name, tool in self._tools.items():
            info = _copy.deepcopy(tool.tool_info() or {})
            info.setdefault("type", "function")
            function = info.setdefault("function", {})
            function["name"] = name
            infos.append(info)
        return infos

    def close(self) -> None:
        """Close what the tools hold (an ``EnvTool``'s environment, or a tool with ``close()``), each
        object once. Rollouts call this for managers they built from a factory; errors are logged."""
        seen: set[int] = set()
        for tool in self._tools.values():
            owner = getattr(tool, "env", tool)
            close = getattr(owner, "close", None)
            if id(owner) in seen or not callable(close):
                continue
            seen.add(id(owner))
            try:
                close()
            except Exception as exc:
                logger.warning("closing %s failed: %s: %s", type(owner).__name__, type(exc).__name__, exc)

    def __repr__(self) -> str:
        return f"ToolManager({self.names()!r}, timeout_s={self.timeout_s!r})"

    # -- dispatch -----------------------------------------------------------------------------------

    def __call__(self, tool_call: Any) -> str:
        """Run one ``{id, type, function:{name, arguments}}`` call; errors come back as ``Error: ...``."""
        if not isinstance(tool_call, Mapping):
            return f"Error: tool_call must be an object, got {_type_name(tool_call)}."
        function = tool_call.get("function")
        if not isinstance(function, Mapping):
            return 'Error: tool_call missing "function" object.'
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return 'Error: tool_call missing "function.name".'
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(sorted(self._tools)) or "(none)"
            return f"Error: unknown tool '{name}'. Available: {available}."
        arguments, problem = parse_arguments(function.get("arguments"))
        if problem is not None:
            return problem
        timeout_s = getattr(tool, "timeout_s", None) or self.timeout_s
        try:
            result = tool(name, arguments) if timeout_s is None else _call_with_timeout(tool, name, arguments, timeout_s)
        except ToolTimeout:
            return f"Error: tool '{name}' timed out after {timeout_s:g}s."
        except Exception as exc:  # a tool's failure is the model's observation, never the rollout's crash
            return f"Error: tool '{name}' raised {_type_name(exc)}: {exc}"
        return str(result)


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Decode tool-call arguments to a dict; returns ``(args, None)`` or ``({}, 'Error: ...')``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            return {}, f"Error: invalid JSON in arguments: {exc}"
        if not isinstance(raw, dict):
            return {}, f'Error: "arguments" must decode to a JSON object, got {_type_name(raw)}.'
        return raw, None
    if isinstance(raw, Mapping):
        return dict(raw), None
    return {}, f'Error: "arguments" must be a JSON string or object, got {_type_name(raw)}.'


def _call_with_timeout(tool: Tool, name: str, arguments: dict[str, Any], timeout_s: float) -> Any:
    """Run the tool on a daemon thread and stop waiting after ``timeout_s``.

    A dedicated daemon thread (not a shared pool) so a hung tool can never starve other calls, and
    never keeps the interpreter alive at exit.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["result"] = tool(name, arguments)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name=f"tool-{name}", daemon=True).start()
    if not done.wait(timeout_s):
        raise ToolTimeout(name)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
