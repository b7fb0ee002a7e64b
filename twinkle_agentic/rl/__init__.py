"""Reinforcement-learning pieces a trainer uses on the farm's trajectories (torch only, no Ray)."""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

_EXPORTS = {
    "GRPOLossConfig": ".grpo",
    "GRPOConfigError": ".grpo",
    "TokenBatch": ".grpo",
    "grpo_loss": ".grpo",
    "mismatch": ".grpo",
    "policy_logprobs": ".grpo",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
