from __future__ import annotations

import pytest

from twinkle_agentic.protocol.local_server import free_port
from twinkle_agentic.protocol.scripted_server import start_scripted_server


@pytest.fixture(scope="module")
def chat_server():
    """The scripted OpenAI-compatible server over real HTTP on 127.0.0.1 (stopped by PID)."""
    server = start_scripted_server(free_port())
    yield server
    server.stop()

