"""Multi-turn tool-calling rollouts: on a vLLM sampler (``MultiTurnRollout``, turn-synchronous; or
``AsyncMultiTurnRollout``, per-trajectory on the async engine) or an OpenAI-compatible API
(``APIMultiTurnRollout``). Names are resolved lazily so importing this package is cheap."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Rollout": ".base",
    "STOP_REASONS": ".base",
    "TraceWriter": ".traces",
    "MultiTurnRollout": ".multi_turn",
    "AsyncMultiTurnRollout": ".async_multi_turn",
    "FailurePolicy": ".failure_policy",
    "ToolLimit": ".tool_scheduler",
    "APIMultiTurnRollout": ".api_multi_turn",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
