"""APIMultiTurnRollout end to end over real HTTP against the scripted OpenAI-compatible server
(strict about message fields, so unsanitised history would fail the second turn with 400)."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter

import pytest

from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.protocol import OpenAI, RetryPolicy
from twinkle_agentic.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle_agentic.tools import Tool, ToolManager

pytestmark = pytest.mark.integration


class Lookup(Tool):
    """A thread-safe stateless tool: answers ``found <key>``."""

    def __call__(self, tool_name, arguments):
        return f"found {arguments.get('key')}"

    def tool_info(self):
        return {"type": "function", "function": {
            "name": "lookup", "description": "Look a key up.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}


def user(text):
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture(params=["auto", "direct"])
def api(chat_server, request):
    return OpenAI("scripted", base_url=chat_server.url + "/v1", async_transport=request.param,
                  retry=RetryPolicy(attempts=3, base_s=0.01, max_s=0.05))


def test_mixed_batch_over_http(api, chat_server):
    rollout = APIMultiTurnRollout(api, ToolManager([Lookup()]), sampling_params=SamplingParams(temperature=0.0),
                                  max_turns=3, concurrency=4, extra_body={"top_k": 1})
    prompts = ["two lookups #calls=2 #reasoning", "no id please #noid #calls=1", "endless #calls=9",
               "cut #length", "flaky #fail=503:2", "gone #fail=404:1", "broken args #badjson"]
    results = rollout([user(f"[{api.async_transport}] {p}") for p in prompts])  # failure counters are per prompt
    summary = [(r["stop_reason"], r["turns"], r["truncated"]) for r in results]
    assert summary == [("stop", 3, False), ("stop", 2, False), ("max_turns", 3, True), ("length", 1, True),
                       ("stop", 2, False), ("api_error", 0, True), ("stop", 2, False)]
    two = results[0]["messages"]
    assert [m["content"] for m in two if m["role"] == "tool"] == ["found key 1", "found key 2"]
    assert two[-1]["content"] == "final answer after 2 tool turns; last tool said: found key 2"
    assert two[1]["reasoning_content"] == "thinking about turn 1" and two[1]["finish_reason"] == "tool_calls"
    assert results[1]["messages"][1]["tool_calls"][0]["id"] == "call_1_0"
    assert results[1]["messages"][2]["tool_call_id"] == "call_1_0"
    assert results[5]["error"].startswith("BadRequestError: HTTP 404")
    assert results[6]["messages"][2]["content"].startswith("Error: invalid JSON in arguments")
    with urllib.request.urlopen(chat_server.url + "/debug/requests") as response:
        sent = json.load(response)["requests"]
    assert all(body.get("top_k") == 1 for body in sent[-10:])


def test_many_trajectories_share_one_event_loop(api):
    rollout = APIMultiTurnRollout(api, ToolManager([Lookup()]), max_turns=4, concurrency=64)
    results = rollout([user(f"item {i} #calls=2") for i in range(200)])
    assert Counter(r["stop_reason"] for r in results) == {"stop": 200}
    assert [r["messages"][0]["content"] for r in results] == [f"item {i} #calls=2" for i in range(200)]


@pytest.mark.parametrize("event_loop, tool_concurrency", [("asyncio", None), ("auto", 0)])
def test_loop_implementations_and_tools_on_the_loop(chat_server, event_loop, tool_concurrency):
    api = OpenAI("scripted", base_url=chat_server.url + "/v1", async_transport="direct")
    rollout = APIMultiTurnRollout(api, ToolManager([Lookup()]), max_turns=4, concurrency=16,
                                  event_loop=event_loop, tool_concurrency=tool_concurrency)
    results = rollout([user(f"loop {event_loop} {i} #calls=2") for i in range(40)])
    assert Counter(r["stop_reason"] for r in results) == {"stop": 40}
    assert results[7]["messages"][-1]["content"] == "final answer after 2 tool turns; last tool said: found key 2"


def test_kept_loop_reuses_connections_between_calls_and_close_releases_them(chat_server):
    api = OpenAI("scripted", base_url=chat_server.url + "/v1", async_transport="direct")
    rollout = APIMultiTurnRollout(api, ToolManager([Lookup()]), max_turns=3, concurrency=8)
    rollout([user(f"first {i} #calls=1") for i in range(8)])
    (entry,) = api._async_clients.values()
    idle = set(entry.client._pool._idle)
    assert 1 <= len(idle) <= 8
    rollout([user(f"second {i} #calls=1") for i in range(8)])
    assert list(api._async_clients.values()) == [entry] and set(entry.client._pool._idle) == idle
    rollout.close()
    assert not api._async_clients and all(connection.closed for connection in idle)
    assert rollout([user("after close")])[0]["stop_reason"] == "stop"  # a new loop, new connections
    rollout.close()
