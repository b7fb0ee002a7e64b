"""OpenAI client against a real HTTP server: transport, retries, structured errors, async path."""

from __future__ import annotations

import asyncio
import json
import pickle
import urllib.request

import pytest

from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.net import free_port
from twinkle_agentic.protocol import (
    AuthenticationFailedError,
    BadRequestError,
    OpenAI,
    ProtocolConnectionError,
    ProtocolTimeoutError,
    RateLimitedError,
    RetryPolicy,
    ServerError,
)


def recorded_requests(server) -> list[dict]:
    with urllib.request.urlopen(server.url + "/debug/requests") as response:
        return json.load(response)["requests"]


FAST_RETRY = RetryPolicy(attempts=3, base_s=0.01, max_s=0.05)
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "find",
                                            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}]


def user(text):
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture
def api(chat_server):
    return OpenAI("scripted", base_url=chat_server.url + "/v1", retry=FAST_RETRY)


def test_key_resolution(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert OpenAI("m", base_url="http://127.0.0.1:1/v1").api_key == "EMPTY"
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAI("m")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert OpenAI("m").api_key == "sk-env" and OpenAI("m", api_key="sk-arg").api_key == "sk-arg"
    assert OpenAI("m", base_url="http://x/v1", client_kwargs={"max_retries": 4}).retry.attempts == 5


def test_tool_call_reply_is_structured_and_request_is_sanitised(api, chat_server):
    trajectory = {"messages": [{"role": "user", "content": "look it up"}], "tools": TOOLS}
    reply = api(trajectory, SamplingParams(temperature=0.0, max_tokens=16))
    assert reply == {"role": "assistant", "content": "", "finish_reason": "tool_calls",
                     "tool_calls": [{"id": "call_srv_1_0", "type": "function",
                                     "function": {"name": "lookup", "arguments": '{"key": "key 1"}'}}]}
    history = trajectory["messages"] + [dict(reply, logprobs=[-1.0], reasoning_content="r"),
                                        {"role": "tool", "tool_call_id": "call_srv_1_0", "content": "found"}]
    final = api({"messages": history, "tools": TOOLS})
    assert final["content"] == "final answer after 1 tool turns; last tool said: found"
    sent = recorded_requests(chat_server)[-1]
    assert sent["messages"][1] == {"role": "assistant", "content": "", "tool_calls": reply["tool_calls"]}
    assert sent["tools"] == TOOLS and "finish_reason" not in str(sent["messages"])


def test_num_samples_returns_a_list_and_logprobs_are_floats(api):
    replies = api(user("q"), SamplingParams(num_samples=3, logprobs=0))
    assert isinstance(replies, list) and len(replies) == 3
    assert all(isinstance(lp, float) for lp in replies[0]["logprobs"]) and replies[0]["logprobs"]


def test_extra_body_and_call_kwargs_are_merged_last(api, chat_server):
    api(user("q"), SamplingParams(top_k=5), extra_body={"top_k": 5, "repetition_penalty": 1.1})
    assert api.async_transport == "auto"
    sent = recorded_requests(chat_server)[-1]
    assert sent["top_k"] == 5 and sent["repetition_penalty"] == 1.1


@pytest.mark.parametrize("code, error", [(500, ServerError), (429, RateLimitedError), (503, ServerError)])
def test_transient_failures_are_retried_then_succeed(api, code, error):
    reply = api(user(f"transient {code} #fail={code}:2"))
    assert reply["content"].startswith("final answer")


def test_exhausted_retries_raise_structured_error(api):
    with pytest.raises(ServerError) as caught:
        api(user("always #fail=502:99"))
    err = caught.value
    assert err.code == 502 and err.attempts == 3 and err.retryable and err.message == "scripted failure 3"
    assert "HTTP 502" in str(err) and "after 3 attempts" in str(err)


@pytest.mark.parametrize("code, error", [(400, BadRequestError), (404, BadRequestError),
                                         (401, AuthenticationFailedError), (422, BadRequestError)])
def test_client_errors_are_not_retried(api, code, error):
    with pytest.raises(error) as caught:
        api(user(f"client error {code} #fail={code}:1"))
    assert caught.value.code == code and caught.value.attempts == 1 and not caught.value.retryable


def test_strict_server_400_carries_the_server_message(api):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError, match="unsupported fields"):
        api.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x", "junk": 1}])
    # the same through our client: junk is stripped before sending
    assert api({"messages": [{"role": "user", "content": "x", "junk": 1}]})["finish_reason"] == "stop"


def test_connection_refused_and_timeout():
    dead = OpenAI("m", base_url=f"http://127.0.0.1:{free_port()}/v1", retry=RetryPolicy(attempts=2, base_s=0.01))
    with pytest.raises(ProtocolConnectionError) as caught:
        dead(user("x"))
    assert caught.value.code is None and caught.value.attempts == 2


def test_timeout_comes_from_client_kwargs(chat_server):
    api = OpenAI("m", base_url=chat_server.url + "/v1", client_kwargs={"timeout": 0.3},
                 retry=RetryPolicy(attempts=1))
    with pytest.raises(ProtocolTimeoutError):
        api(user("slow #hang=2"))


@pytest.mark.parametrize("transport", ["httpx", "aiohttp", "direct"])
def test_async_path_matches_sync_path(chat_server, transport):
    api = OpenAI("scripted", base_url=chat_server.url + "/v1", retry=FAST_RETRY, async_transport=transport)
    trajectory = {"messages": [{"role": "user", "content": "go #reasoning"}], "tools": TOOLS}

    async def replies():
        async with api.session():
            return await asyncio.gather(*(api.acall(trajectory) for _ in range(5)))

    async def failures():
        async with api.session():
            retried = await api.acall(user(f"async {transport} #fail=503:1"))
            with pytest.raises(BadRequestError) as caught:
                await api.acall(user(f"async {transport} #fail=404:1"))
        return retried, caught.value

    first = asyncio.run(replies())
    assert all(r == api(trajectory) for r in first)
    assert first[0]["reasoning_content"] == "thinking about turn 1"
    retried, error = asyncio.run(failures())
    assert retried["finish_reason"] == "stop" and error.code == 404
    assert asyncio.run(replies()) == first  # a second event loop gets a fresh client


def test_pickle_round_trip_rebuilds_clients(api):
    api(user("warm"))
    clone = pickle.loads(pickle.dumps(api))
    assert clone.model == "scripted" and clone.retry == FAST_RETRY
    assert clone(user("hello"))["finish_reason"] == "stop"
