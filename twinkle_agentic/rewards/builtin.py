"""Reward functions for common tasks, usable by name in a rollout's ``rewards:`` list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def final_answer(trajectory: Mapping[str, Any]) -> str:
    """The text of the trajectory's last assistant message ('' when there is none)."""
    for message in reversed(trajectory.get("messages") or []):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            return content if isinstance(content, str) else ""
    return ""


def contains_ground_truth(trajectory: Mapping[str, Any]) -> float:
    """The share of the prompt row's ``ground_truth`` facts (a string or a list of strings) that the
    final answer states, compared case-insensitively: 1.0 when it states them all.

    ``twinkle_agentic.rewards.builtin:contains_ground_truth``; a row without ``ground_truth`` is an
    error (recorded as the trajectory's ``reward_error``), not a zero."""
    truth = trajectory.get("ground_truth")
    facts = [truth] if isinstance(truth, str) else truth
    if not isinstance(facts, list) or not facts or not all(isinstance(f, str) for f in facts):
        raise ValueError(
            f"contains_ground_truth needs the prompt row's 'ground_truth' (a string or a non-empty list of "
            f"strings), got {truth!r}"
        )
    answer = final_answer(trajectory).casefold()
    return sum(fact.casefold() in answer for fact in facts) / len(facts)
