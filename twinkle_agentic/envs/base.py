"""The environment interface: reset, step through tool actions, evaluate finished trajectories."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.data_format import ToolInfo, Trajectory


@dataclass
class StepResult:
    """What one ``reset`` or ``step`` returns."""

    observation: str = ""
    reward: float | None = 0.0  # None: no reward for this step (e.g. a remote env's null or non-finite one)
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class Env(ABC):
    """An RL environment driven by tool actions.

    Interactive use: ``reset(trajectory)`` then ``step(tool_name, arguments)`` until ``done``.
    Batch use: ``evaluate(trajectories)`` scores finished trajectories. One instance holds one
    episode; concurrent trajectories need one instance each.
    """

    def reset(self, trajectory: Trajectory | None = None) -> StepResult:
        """Start a new episode (optionally conditioned on ``trajectory``)."""
        return StepResult()

    @abstractmethod
    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        """Apply one action and return the observation, reward and done flag."""
        raise NotImplementedError

    def tools(self) -> list[ToolInfo]:
        """The tool schemas this environment accepts as actions."""
        return []

    def evaluate(self, trajectories: list[Trajectory], **kwargs: Any) -> list[float]:
        """Score finished trajectories; the default gives 0.0 each."""
        return [0.0 for _ in trajectories]

    def close(self) -> None:
        """Release resources (sockets, processes, files)."""
        return None

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
