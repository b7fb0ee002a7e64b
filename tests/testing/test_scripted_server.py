"""The scripted OpenAI-compatible server in a thread: one server answers the #directive chat policy,
vLLM's token routes and the scripted hooks, over real HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from twinkle_agentic.testing.scripted_chat import byte_tokens, render_chatml
from twinkle_agentic.testing.scripted_server import ScriptedServer

WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}}}},
}


def post(server: ScriptedServer, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def server():
    with ScriptedServer() as running:
        yield running


def test_directives_drive_tool_calls_then_a_final_answer(server):
    messages = [{"role": "user", "content": "weather please #calls=1"}]
    status, first = post(
        server, "/v1/chat/completions", {"model": "m", "messages": messages, "tools": [WEATHER]}
    )
    assert status == 200 and first["choices"][0]["finish_reason"] == "tool_calls"
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": json.dumps({"city": "city 1"})}
    messages += [
        first["choices"][0]["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
    ]
    status, final = post(
        server, "/v1/chat/completions", {"model": "m", "messages": messages, "tools": [WEATHER]}
    )
    assert final["choices"][0]["message"]["content"].endswith("last tool said: sunny")


def test_a_strict_server_refuses_fields_the_chat_api_does_not_take(server):
    status, body = post(
        server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x", "extra": 1}]}
    )
    assert status == 400 and "unsupported fields ['extra']" in body["error"]["message"]


def test_hooks_script_chat_texts_logprobs_and_failures(server):
    server.chat = lambda body: [f"reply {i}" for i in range(body["n"])]
    status, body = post(
        server, "/v1/chat/completions", {"model": "m", "n": 2, "messages": [{"role": "user", "content": "a"}]}
    )
    assert [c["message"]["content"] for c in body["choices"]] == ["reply 0", "reply 1"]
    server.logprob = lambda prefix, token: -1.0
    status, body = post(server, "/v1/completions", {"model": "m", "prompt": [1, 2, 3], "prompt_logprobs": 1})
    assert body["choices"][0]["prompt_logprobs"] == [
        None,
        {"2": {"logprob": -1.0, "rank": 1, "decoded_token": "\x02"}},
        {"3": {"logprob": -1.0, "rank": 1, "decoded_token": "\x03"}},
    ]
    server.fail_paths.add("/v1/completions")
    assert post(server, "/v1/completions", {"model": "m", "prompt": [1]})[0] == 500
    assert post(server, "/v1/completions", {"model": "m"})[0] == 500
    server.fail_paths.clear()
    status, body = post(server, "/v1/completions", {"model": "m", "prompt": [0] * 5000})
    assert status == 400 and "max_model_len" in body["error"]["message"]
    assert server.paths() == ["/v1/chat/completions"] + ["/v1/completions"] * 4
    assert server.requests[1][1]["prompt"] == [1, 2, 3]


def test_tokens_are_utf8_bytes_and_chats_render_as_chatml(server):
    messages = [{"role": "user", "content": "hé"}]
    status, body = post(server, "/tokenize", {"model": "m", "messages": messages})
    assert status == 200 and body["tokens"] == byte_tokens(render_chatml(messages, True))
    assert post(server, "/detokenize", {"model": "m", "tokens": byte_tokens("héllo")})[1] == {
        "prompt": "héllo"
    }
    assert post(server, "/v1/embeddings", {"model": "m", "input": ["abc", "d"]})[1]["data"][1][
        "embedding"
    ] == [1.0, 1.0]
    assert post(server, "/nowhere", {})[0] == 404


def test_stop_ends_the_server():
    server = ScriptedServer().start()
    url = server.url
    server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/health", timeout=2)
