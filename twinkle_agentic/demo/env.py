"""``GuessNumberEnv``: the number-guessing game as an ``Env`` with one action tool, ``guess``.

Deterministic: the target comes from the trajectory (``user_data['target']``), else from ``seed``
(``user_data['seed']`` or the constructor's). Reward is 1.0 on the step that finds the target and
0.0 otherwise; ``info['episode_reward']`` is 1.0 once the game is won, so a rollout can read the
episode's outcome from the env tool. ``evaluate`` scores finished trajectories from their messages
alone, so it also works on trajectories produced elsewhere.
"""

from __future__ import annotations

import random
from typing import Any

from twinkle_agentic.data_format import ToolInfo, Trajectory, user_data_get
from twinkle_agentic.envs.base import Env, StepResult

from .guessing import CORRECT, GAME_OVER, GUESS_TOOL, HIGH, LOW, judge, parse_guess

INTRO = f"I picked a number from {LOW} to {HIGH}. Call guess to play."


class GuessNumberEnv(Env):
    """One episode of the guessing game; use one instance per concurrent trajectory."""

    def __init__(self, target: int | None = None, seed: int = 0, max_guesses: int | None = None):
        if target is not None and not LOW <= target <= HIGH:
            raise ValueError(f"GuessNumberEnv target must be in [{LOW}, {HIGH}], got {target!r}")
        if max_guesses is not None and max_guesses < 1:
            raise ValueError(f"GuessNumberEnv max_guesses must be None or >= 1, got {max_guesses!r}")
        self._fixed_target = target
        self._seed = seed
        self.max_guesses = max_guesses
        self.target = target if target is not None else random.Random(seed).randint(LOW, HIGH)
        self.guesses: list[int] = []
        self.won = False

    def reset(self, trajectory: Trajectory | None = None) -> StepResult:
        user_data = (trajectory or {}).get("user_data")
        target = user_data_get(user_data, "target", self._fixed_target)
        if target is None:
            target = random.Random(user_data_get(user_data, "seed", self._seed)).randint(LOW, HIGH)
        if not isinstance(target, int) or not LOW <= target <= HIGH:
            raise ValueError(f"GuessNumberEnv target must be an integer in [{LOW}, {HIGH}], got {target!r}")
        self.target, self.guesses, self.won = target, [], False
        return StepResult(observation=INTRO, info={"episode_reward": 0.0})

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        if tool_name != "guess":
            return StepResult(observation=f"Error: unknown action {tool_name!r}; use guess.", info=self._info())
        if self.won or (self.max_guesses is not None and len(self.guesses) >= self.max_guesses):
            return StepResult(observation=GAME_OVER, done=True, info=self._info())
        guess = parse_guess(arguments)
        if isinstance(guess, str):
            return StepResult(observation=guess, info=self._info())
        self.guesses.append(guess)
        verdict = judge(guess, self.target)
        self.won = verdict == CORRECT
        out_of_guesses = self.max_guesses is not None and len(self.guesses) >= self.max_guesses
        return StepResult(
            observation=verdict,
            reward=1.0 if self.won else 0.0,
            done=self.won or out_of_guesses,
            info=self._info(),
        )

    def _info(self) -> dict[str, Any]:
        return {"episode_reward": 1.0 if self.won else 0.0, "guesses": len(self.guesses), "target": self.target}

    def tools(self) -> list[ToolInfo]:
        return [GUESS_TOOL]

    def evaluate(self, trajectories: list[Trajectory], **kwargs: Any) -> list[float]:
        """1.0 for a trajectory whose tool messages include a ``Correct!`` verdict, else 0.0."""
        return [1.0 if _won(t) else 0.0 for t in trajectories]


def _won(trajectory: Trajectory) -> bool:
    return any(
        m.get("role") == "tool" and str(m.get("content", "")).strip() == CORRECT
        for m in trajectory.get("messages") or []
    )


def game_tool_manager(trajectory: Trajectory | None = None) -> Any:
    """A fresh game for one trajectory, served as a ``ToolManager`` of its ``guess`` tool.

    Pass this function as a rollout's ``tool_manager`` (a per-trajectory factory): the game is
    stateful, so trajectories must not share one.
    """
    from twinkle_agentic.envs.env_tool import EnvTool
    from twinkle_agentic.tools.tool_manager import ToolManager

    env = GuessNumberEnv()
    env.reset(trajectory)
    return ToolManager(EnvTool.from_env(env))
