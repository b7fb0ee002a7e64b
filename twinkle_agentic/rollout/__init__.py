"""Multi-turn tool-calling rollouts: on a vLLM sampler (``MultiTurnRollout``, turn-synchronous; or
``AsyncMultiTurnRollout``, per-trajectory on the async engine) or an OpenAI-compatible API
(``APIMultiTurnRollout``). Names are resolved lazily so importing this package is cheap."""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

_EXPORTS = {
    "Rollout": ".base",
    "STOP_REASONS": ".base",
    "TrajectoryTraces": ".traces",
    "MultiTurnRollout": ".multi_turn",
    "AsyncMultiTurnRollout": ".async_multi_turn",
    "FailurePolicy": ".failure_policy",
    "ToolLimit": ".tool_scheduler",
    "APIMultiTurnRollout": ".api_multi_turn",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
