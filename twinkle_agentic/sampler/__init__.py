"""vLLM samplers behind the sampler contract (SPEC 17.2). vLLM is imported only when an engine starts."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Sampler": ".base",
    "DeviceMesh": ".base",
    "check_responses": ".base",
    "map_finish_reason": ".base",
    "to_sample_response": ".base",
    "VLLMEngineConfig": ".engine",
    "VLLMSampler": ".vllm_sampler",
    "vLLMSampler": ".vllm_sampler",
    "AsyncVLLMSampler": ".async_sampler",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
