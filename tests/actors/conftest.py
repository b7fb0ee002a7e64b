"""Fixtures of the farm tests (their job settings live in tests/support/farm_settings.py)."""

from __future__ import annotations

import pytest

from tests.support.farm_settings import DEMO_PROMPTS


@pytest.fixture(scope="session")
def demo_trajectories():
    """The bundled demo prompts as trajectories (ids, toolsets/envs selections, game targets)."""
    from twinkle_agentic.jobs.rollout.prompts import load_prompts, to_trajectories

    return to_trajectories(load_prompts(str(DEMO_PROMPTS)))
