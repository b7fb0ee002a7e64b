from __future__ import annotations

import pytest

from twinkle_agentic.net import free_port
from twinkle_agentic.testing.openenv_echo import scaffold_echo_env, start_echo_server

ECHO_SESSIONS = 2


@pytest.fixture(scope="session")
def echo_server(tmp_path_factory):
    """A real openenv-core echo env: scaffolded by ``openenv init`` now, served by uvicorn on a free
    port with ECHO_SESSIONS concurrent WebSocket sessions, stopped by PID."""
    package = scaffold_echo_env(tmp_path_factory.mktemp("openenv"), max_concurrent_envs=ECHO_SESSIONS)
    server = start_echo_server(package, free_port())
    server.max_sessions = ECHO_SESSIONS
    yield server
    server.stop()
