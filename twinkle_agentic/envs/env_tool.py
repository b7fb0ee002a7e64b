"""``EnvTool``: an ``Env`` seen as a ``Tool``, so environments plug into ``ToolManager`` and rollouts."""

from __future__ import annotations

from typing import Any

from twinkle_agentic.data_format import ToolInfo
from twinkle_agentic.tools.base import Tool

from .base import Env, StepResult

DEFAULT_TOOL_NAME = "env_action"
DEFAULT_DESCRIPTION = "Execute an action in the environment."
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class StepResultHolder:
    """The latest ``StepResult`` of one environment, shared by all tools built over it."""

    __slots__ = ("last_result",)

    def __init__(self) -> None:
        self.last_result: StepResult | None = None


class EnvTool(Tool):
    """Calls ``env.step(tool_name, arguments)`` and answers with ``str(observation)``.

    ``last_result``, ``done`` and ``episode_reward`` describe the latest step taken through any tool
    sharing this tool's result holder (all tools from one ``from_env`` call share one).
    """

    def __init__(
        self,
        env: Env,
        tool_name: str = DEFAULT_TOOL_NAME,
        description: str = DEFAULT_DESCRIPTION,
        parameters: dict[str, Any] | None = None,
        *,
        holder: StepResultHolder | None = None,
        timeout_s: float | None = None,
    ):
        if not isinstance(tool_name, str) or not tool_name:
            raise ValueError(f"EnvTool tool_name must be a non-empty string, got {tool_name!r}")
        self.env = env
        self.tool_name = tool_name
        self.description = description
        self.parameters = dict(parameters) if parameters is not None else dict(EMPTY_PARAMETERS)
        self._holder = holder if holder is not None else StepResultHolder()
        if timeout_s is not None:
            self.timeout_s = timeout_s

    @classmethod
    def from_env(cls, env: Env, *, timeout_s: float | None = None) -> list[EnvTool]:
        """One tool per ``env.tools()`` schema (a generic ``env_action`` tool when there is none)."""
        holder = StepResultHolder()
        schemas = env.tools() or []
        if not schemas:
            return [cls(env, holder=holder, timeout_s=timeout_s)]
        tools = []
        for schema in schemas:
            function = (schema or {}).get("function") or {}
            name = function.get("name")
            if not name:
                raise ValueError(f"{type(env).__name__}.tools() has an entry without function.name: {schema!r}")
            tools.append(
                cls(
                    env,
                    tool_name=name,
                    description=function.get("description", DEFAULT_DESCRIPTION),
                    parameters=function.get("parameters"),
                    holder=holder,
                    timeout_s=timeout_s,
                )
            )
        return tools

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        result = self.env.step(tool_name, arguments)
        self._holder.last_result = result
        return str(result.observation)

    def tool_info(self) -> ToolInfo:
        return {
            "type": "function",
            "function": {"name": self.tool_name, "description": self.description, "parameters": self.parameters},
        }

    @property
    def last_result(self) -> StepResult | None:
        return self._holder.last_result

    @property
    def done(self) -> bool:
        result = self._holder.last_result
        return bool(result.done) if result is not None else False

    @property
    def episode_reward(self) -> float:
        result = self._holder.last_result
        if result is None:
            return 0.0
        info = result.info or {}
        if "episode_reward" in info:
            return float(info["episode_reward"])
        return float(result.reward or 0.0)
