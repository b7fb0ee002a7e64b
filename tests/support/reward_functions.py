"""Reward functions the reward tests name by import path (``tests.support.reward_functions:...``).

``hang`` and ``hang_async`` never return on their own within a test: ``hang`` blocks until
``RELEASE`` is set (tests set it when done, so no thread outlives them), ``hang_async`` sleeps.
"""

from __future__ import annotations

import asyncio
import math
import threading

RELEASE = threading.Event()
CALLS: list[str] = []  # trajectory ids seen by ``counted``


def length_of_answer(trajectory: dict) -> int:
    """The number of characters of the last message (an int: any real number is a reward)."""
    return len(str(trajectory["messages"][-1].get("content") or ""))


async def async_half(trajectory: dict) -> float:
    await asyncio.sleep(0.01)
    return 0.5


def raises(trajectory: dict) -> float:
    raise RuntimeError(f"grader broke on {trajectory.get('trajectory_id')}")


def hang(trajectory: dict) -> float:
    RELEASE.wait(120)
    return 1.0


async def hang_async(trajectory: dict) -> float:
    await asyncio.sleep(3600)
    return 1.0


def not_a_number(trajectory: dict) -> str:
    return "yes"


def nan(trajectory: dict) -> float:
    return math.nan


def forgot_await(trajectory: dict):
    return async_half(trajectory)


def counted(trajectory: dict) -> float:
    CALLS.append(trajectory.get("trajectory_id"))
    return 1.0


def raises_on_odd(trajectory: dict) -> float:
    """1.0, except for trajectories whose ``n`` is odd."""
    if trajectory.get("n", 0) % 2:
        raise ValueError("odd")
    return 1.0


NOT_CALLABLE = 3


def hang_when_asked(trajectory: dict) -> float:
    """Hangs (until ``RELEASE``) on trajectories with ``hang: true``, else 0.0."""
    if trajectory.get("hang"):
        RELEASE.wait(120)
    return 0.0


def scaled(trajectory: dict, factor: float = 1.0) -> float:
    return factor * trajectory.get("n", 0)


def batch_ranks(trajectories: list[dict]) -> list[float]:
    """Batch mode: each trajectory's rank by ``n`` within its batch (0 for the smallest)."""
    order = sorted(range(len(trajectories)), key=lambda i: trajectories[i].get("n", 0))
    ranks = [0.0] * len(trajectories)
    for rank, i in enumerate(order):
        ranks[i] = float(rank)
    return ranks


async def batch_one_short(trajectories: list[dict]) -> list[float]:
    return [1.0] * (len(trajectories) - 1)


def batch_raises(trajectories: list[dict]) -> list[float]:
    raise ConnectionError("grader unreachable")


class PickyEnv:
    """An evaluator class that needs a ``threshold`` to be built."""

    def __init__(self, threshold: int):
        self.threshold = threshold

    def evaluate(self, trajectories: list[dict], **kwargs) -> list[float]:
        return [1.0 if t.get("n", 0) >= self.threshold else 0.0 for t in trajectories]
