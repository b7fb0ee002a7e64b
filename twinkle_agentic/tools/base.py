"""The tool interface: a callable that answers one function call with a string."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from twinkle_agentic.data_format import ToolInfo


class InvalidToolError(TypeError, ValueError):
    """An object a ``ToolManager`` cannot register: not a Tool, or a schema that names no function.

    A ``ValueError`` as the documented API promises, and a ``TypeError`` so callers that caught the
    type error an object of the wrong kind used to raise keep working.
    """


class Tool(ABC):
    """One or more OpenAI functions served by a Python object.

    ``timeout_s`` (class or instance attribute) bounds one call when the tool runs under a
    ``ToolManager``; None defers to the manager's ``timeout_s``. Tools shared between trajectories
    must be thread-safe: a rollout calls them from several worker threads at once.
    """

    timeout_s: float | None = None

    @abstractmethod
    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        """Run the tool and return its result as text."""
        raise NotImplementedError

    @abstractmethod
    def tool_info(self) -> ToolInfo:
        """Return the OpenAI function schema ``{type:'function', function:{name, description, parameters}}``."""
        raise NotImplementedError
