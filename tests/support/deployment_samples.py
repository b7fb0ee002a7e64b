"""Small tools and envs the deployment tests serve (independent of the demo package)."""

from __future__ import annotations

import time
from typing import Any

from twinkle_agentic.envs.base import Env, StepResult
from twinkle_agentic.tools.base import Tool


def schema(name: str, description: str = "", properties: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or name,
            "parameters": {"type": "object", "properties": properties or {}},
        },
    }


class AddTool(Tool):
    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        return str(arguments["a"] + arguments["b"])

    def tool_info(self) -> dict[str, Any]:
        return schema("add", "Add two numbers.", {"a": {"type": "number"}, "b": {"type": "number"}})


class FailingTool(Tool):
    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        raise ValueError(f"cannot handle {arguments.get('x')!r}")

    def tool_info(self) -> dict[str, Any]:
        return schema("fail", "Always raises.")


class SleepTool(Tool):
    """Sleeps ``seconds``: a hung tool when that is longer than the server's call timeout."""

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        time.sleep(float(arguments.get("seconds", 0)))
        return "slept"

    def tool_info(self) -> dict[str, Any]:
        return schema("sleep", "Sleep a while.", {"seconds": {"type": "number"}})


class CounterEnv(Env):
    """Per-instance state: ``bump`` adds ``by`` to a counter; reward = the new count; done at ``limit``."""

    instances = 0

    def __init__(self, limit: int = 3):
        CounterEnv.instances += 1
        self.limit = limit
        self.count = 0
        self.closed = False

    def reset(self, trajectory: dict[str, Any] | None = None) -> StepResult:
        start = ((trajectory or {}).get("user_data") or {}).get("start", 0)
        self.count = int(start)
        return StepResult(observation=f"count={self.count}", info={"start": self.count})

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        if tool_name == "boom":
            raise RuntimeError("exploded")
        if tool_name == "hang":
            time.sleep(float(arguments.get("seconds", 30)))
        self.count += int(arguments.get("by", 1))
        return StepResult(
            observation=f"count={self.count}",
            reward=float(self.count),
            done=self.count >= self.limit,
            info={"count": self.count},
        )

    def tools(self) -> list[dict[str, Any]]:
        return [schema("bump", "Add to the counter.", {"by": {"type": "integer"}})]

    def close(self) -> None:
        self.closed = True


class BrokenEnv(Env):
    """Constructs once (the replica's probe), then fails: exercises FACTORY_ERROR."""

    built = 0

    def __init__(self) -> None:
        BrokenEnv.built += 1
        if BrokenEnv.built > 1:
            raise OSError("sandbox unavailable")

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        return StepResult()


# -- helpers for the Serve tests -----------------------------------------------------------------------


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1):
    """Poll ``predicate`` until it returns something truthy; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"condition not met within {timeout_s}s")

