"""RemoteTool over a plain HTTP server: the per-attempt ``timeout_s`` named the same from the farm's
tool server endpoint down to the HTTP policy, and a call that overruns it answers an ``Error:`` string."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from twinkle_agentic.actors.catalog import ToolServerEndpoint

from twinkle_agentic.tools.remote import DEFAULT_TIMEOUT_S, HttpPolicy, RemoteTool

SCHEMA = {"type": "function", "function": {"name": "slow", "description": "sleeps", "parameters": {"type": "object"}}}


class SlowToolServer(BaseHTTPRequestHandler):
    """Lists one tool; a call sleeps ``arguments['sleep_s']`` before answering."""

    def log_message(self, *args):
        pass

    def _answer(self, payload):
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer({"tools": [SCHEMA]})

    def do_POST(self):
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(call["arguments"].get("sleep_s", 0))
        self._answer({"result": f"slept {call['arguments'].get('sleep_s', 0)}"})


@pytest.fixture
def server_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowToolServer)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_endpoint_timeout_reaches_the_policy_and_bounds_each_call(server_url):
    (tool,) = ToolServerEndpoint("slow", server_url, timeout_s=0.3, retries=0).tools()
    assert tool.policy.timeout_s == 0.3 and tool.policy.retries == 0
    assert tool("slow", {"sleep_s": 0}) == "slept 0"
    answer = tool("slow", {"sleep_s": 2})
    assert answer.startswith("Error: tool 'slow' timed out after 0.3s"), answer


def test_defaults_are_the_policys():
    endpoint = ToolServerEndpoint("t", "http://127.0.0.1:1")
    assert (endpoint.timeout_s, endpoint.retries) == (HttpPolicy().timeout_s, HttpPolicy().retries)
    assert HttpPolicy().timeout_s == DEFAULT_TIMEOUT_S


def test_from_server_takes_timeout_s(server_url):
    (tool,) = RemoteTool.from_server(server_url, timeout_s=5.0)
    assert isinstance(tool, RemoteTool) and tool.policy.timeout_s == 5.0


@pytest.mark.parametrize("kwargs", [{"timeout_s": 0}, {"connect_timeout_s": -1}])
def test_non_positive_timeouts_are_refused_by_name(kwargs):
    with pytest.raises(ValueError, match="timeout_s and connect_timeout_s must be > 0"):
        HttpPolicy(**kwargs)
