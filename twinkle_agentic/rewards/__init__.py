"""Reward functions of rollouts: their configuration (``RewardSpec``), the scorer that runs them on
finished trajectories (``RewardScorer``) and built-in functions (``builtin``)."""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

_EXPORTS = {
    "RewardSpec": ".spec",
    "RewardConfigError": ".spec",
    "check_reward_specs": ".spec",
    "RewardScorer": ".scorer",
    "score_trajectories": ".scorer",
    "contains_ground_truth": ".builtin",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
