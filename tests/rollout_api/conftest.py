from __future__ import annotations

import pytest

from twinkle_agentic.protocol.local_server import free_port
from twinkle_agentic.protocol.scripted_server import start_scripted_server
from twinkle_agentic.tools import Tool


class Lookup(Tool):
    """A thread-safe stateless tool: answers ``found <key>``."""

    def __call__(self, tool_name, arguments):
        return f"found {arguments.get('key')}"

    def tool_info(self):
        return {"type": "function", "function": {
            "name": "lookup", "description": "Look a key up.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}


@pytest.fixture(scope="module")
def chat_server():
    """The scripted OpenAI-compatible server over real HTTP (strict about message fields)."""
    server = start_scripted_server(free_port())
    yield server
    server.stop()
