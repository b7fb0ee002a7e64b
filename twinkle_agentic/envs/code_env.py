"""``CodeExecutionEnv``: run model-written Python in ``LocalSubprocessSandbox``.

Each ``step`` runs the code in a fresh interpreter (no variables carry over) inside the episode's
private directory (files do carry over until ``reset``/``close``). The reward is 1.0 for a run
that exits 0 within its limits, else 0.0. ``evaluate`` re-runs each finished trajectory's last
submitted code followed by its tests (user_data ``tests`` or a top-level ``tests`` key).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from twinkle_agentic.data_format import ToolInfo, Trajectory, user_data_get
from twinkle_agentic.data_format.tool_calls import ToolCallsError, decode_tool_calls

from .base import Env, StepResult
from .sandbox import LocalSubprocessSandbox, SandboxLimits

DEFAULT_TOOL_NAME = "execute_code"
CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)
LIMIT_NOTES = {
    "wall_time": "killed: wall-clock limit of {timeout_s:g}s reached",
    "cpu_time": "killed: CPU-time limit reached",
    "memory": "failed: memory limit reached",
    "file_size": "killed: file-size limit reached",
    "processes": "failed: process limit reached",
    "policy": "refused by the sandbox policy",
}


def format_run(result: Mapping[str, Any], max_chars: int, timeout_s: float) -> str:
    """The observation the model sees: exit status, limit note, stdout, stderr (each tail-capped)."""
    lines = [f"exit_code: {result['exit_code']}" if not result["timed_out"] else "exit_code: none (timed out)"]
    if result.get("limit"):
        lines.append(LIMIT_NOTES[result["limit"]].format(timeout_s=timeout_s))
    for stream in ("stdout", "stderr"):
        text = result.get(stream) or ""
        if text:
            if len(text) > max_chars:
                text = f"[... {len(text) - max_chars} chars cut]\n" + text[-max_chars:]
            lines.append(f"{stream}:\n{text.rstrip()}")
    return "\n".join(lines)


def last_submitted_code(trajectory: Mapping[str, Any], tool_name: str = DEFAULT_TOOL_NAME) -> str | None:
    """The code of the last ``tool_name`` call, else the last fenced Python block of an assistant."""
    for message in reversed(trajectory.get("messages") or []):
        if message.get("role") != "assistant":
            continue
        try:
            calls = decode_tool_calls(message.get("tool_calls"))
        except ToolCallsError:
            calls = []
        for call in reversed(calls):
            function = (call.get("function") if isinstance(call, Mapping) else None) or {}
            if function.get("name") != tool_name:
                continue
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    continue
            if isinstance(arguments, Mapping) and isinstance(arguments.get("code"), str):
                return arguments["code"]
        blocks = CODE_BLOCK.findall(message.get("content") or "") if isinstance(message.get("content"), str) else []
        if blocks:
            return blocks[-1]
    return None


class CodeExecutionEnv(Env):
    """Python execution environment over ``LocalSubprocessSandbox`` (see its module for guarantees)."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        isolation: str = "auto",
        timeout_s: float = 10.0,
        tool_name: str = DEFAULT_TOOL_NAME,
        max_observation_chars: int = 4000,
    ):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.limits = limits or SandboxLimits(cpu_time_s=timeout_s)
        self.isolation = isolation
        self.timeout_s = timeout_s
        self.tool_name = tool_name
        self.max_observation_chars = max_observation_chars
        self.episode_reward = 0.0
        self._sandbox: LocalSubprocessSandbox | None = None

    @property
    def sandbox(self) -> LocalSubprocessSandbox:
        if self._sandbox is None:
            self._sandbox = LocalSubprocessSandbox(self.limits, isolation=self.isolation)
        return self._sandbox

    def reset(self, trajectory: Trajectory | None = None) -> StepResult:
        self.close()
        self.episode_reward = 0.0
        isolation = self.sandbox.isolation
        return StepResult("Sandbox ready.", 0.0, False, {"isolation": isolation, "episode_reward": 0.0})

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        code = (arguments or {}).get("code")
        if not isinstance(code, str):
            return StepResult(f'Error: "{self.tool_name}" needs a string argument "code".', 0.0, False,
                              {"episode_reward": self.episode_reward})
        stdin = (arguments or {}).get("stdin")
        result = self.sandbox.run(code, stdin=stdin if isinstance(stdin, str) else None, timeout_s=self.timeout_s)
        reward = 1.0 if result["exit_code"] == 0 and not result["timed_out"] else 0.0
        self.episode_reward += reward
        info = {"run": result, "episode_reward": self.episode_reward}
        return StepResult(format_run(result, self.max_observation_chars, self.timeout_s), reward, False, info)

    def tools(self) -> list[ToolInfo]:
        return [
            {
                "type": "function",
                "function": {
                    "name": self.tool_name,
                    "description": "Run a Python 3 program in a sandbox (no network; files persist within "
                    "the episode) and return its exit code, stdout and stderr.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "code": {"type": "string", "description": "The complete program to run."},
                            "stdin": {"type": "string", "description": "Text passed on standard input."},
                        },
                        "required": ["code"],
                    },
                },
            }
        ]

    def evaluate(self, trajectories: list[Trajectory], **kwargs: Any) -> list[float]:
        """1.0 per trajectory whose last submitted code, followed by its tests, exits 0."""
        rewards = []
        with LocalSubprocessSandbox(self.limits, isolation=self.isolation) as sandbox:
            for trajectory in trajectories:
                code = last_submitted_code(trajectory, self.tool_name)
                tests = trajectory.get("tests")
                if tests is None:
                    tests = user_data_get(trajectory.get("user_data"), "tests", "")
                if code is None:
                    rewards.append(0.0)
                    continue
                result = sandbox.run(code + "\n\n" + str(tests or ""), timeout_s=self.timeout_s)
                rewards.append(1.0 if result["exit_code"] == 0 and not result["timed_out"] else 0.0)
        return rewards

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.cleanup()
            self._sandbox = None
