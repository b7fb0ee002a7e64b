"""vLLM samplers behind the sampler contract (SPEC 17.2). vLLM is imported only when an engine starts."""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

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

__getattr__ = lazy_exports(__name__, _EXPORTS)
