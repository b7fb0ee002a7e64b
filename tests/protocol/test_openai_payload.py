"""to_request / from_choice: pure mapping, tested on recorded response shapes (vLLM hermes parser,
OpenAI with logprobs and two choices, a reasoning model) and the SPEC 13 sanitising table."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.protocol.openai_payload import (
    RequestError,
    from_choice,
    from_completion,
    sanitize_messages,
    to_request,
)

PAYLOADS = Path(__file__).with_name("payloads")


def load(name):
    return json.loads((PAYLOADS / name).read_text())


def test_vllm_tool_call_choice():
    (message,) = from_completion(load("vllm_hermes_tool_call.json"))
    assert message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "chatcmpl-tool-4b2e", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
        "finish_reason": "tool_calls",
    }


def test_choices_come_back_in_index_order_with_float_logprobs():
    first, second = from_completion(load("openai_two_choices_logprobs.json"))
    assert first == {"role": "assistant", "content": "Paris is", "finish_reason": "length", "logprobs": [-0.01, -1.25]}
    assert second["content"] == "Lyon" and second["logprobs"] == [-2.5]


def test_reasoning_content_is_kept():
    (message,) = from_completion(load("deepseek_reasoning.json"))
    assert message["reasoning_content"] == "6 times 7 is 42." and message["content"] == "42"


def test_from_choice_accepts_sdk_objects_and_fills_dict_arguments():
    openai = pytest.importorskip("openai")
    completion = openai.types.chat.ChatCompletion.model_validate(load("vllm_hermes_tool_call.json"))
    assert from_choice(completion.choices[0])["tool_calls"][0]["function"]["name"] == "get_weather"
    raw = {"message": {"content": "x", "reasoning": "r",
                       "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}}
    message = from_choice(raw)
    assert message["reasoning_content"] == "r"
    assert message["tool_calls"] == [{"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    with pytest.raises(ValueError, match="not a chat-completion choice"):
        from_choice({"text": "legacy completion"})


HISTORY = [
    {"role": "developer", "content": "be brief"},
    {"role": "user", "content": "weather?", "name": "ann", "user_data": [("k", "1")]},
    {"role": "assistant", "content": None, "finish_reason": "tool_calls", "logprobs": [-0.1],
     "reasoning_content": "think", "thinking": "think",
     "tool_calls": json.dumps([{"id": "c1", "function": {"name": "w", "arguments": {"city": "Oslo"}}}])},
    {"role": "tool", "tool_call_id": "c1", "content": "cold", "name": "w"},
    {"role": "assistant", "content": "Cold.", "tool_calls": "[]", "finish_reason": "stop"},
    {"role": "assistant", "content": "again", "tool_calls": [{"function": {"name": "w", "arguments": ""}}]},
]


def test_sanitising_table():
    original = copy.deepcopy(HISTORY)
    wire = sanitize_messages(HISTORY)
    assert original == HISTORY  # never mutated
    assert wire == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?", "name": "ann"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "content": "cold", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Cold."},
        {"role": "assistant", "content": "again",
         "tool_calls": [{"id": "call_3_0", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
    ]


def test_send_reasoning_content_keeps_it_and_maps_thinking():
    wire = sanitize_messages([{"role": "assistant", "content": "a", "thinking": "t"}], send_reasoning_content=True)
    assert wire == [{"role": "assistant", "content": "a", "reasoning_content": "t"}]


@pytest.mark.parametrize(
    "messages, match",
    [
        ("hi", "must be a list"),
        ([{"role": "robot", "content": "x"}], "role 'robot'"),
        (["text"], "must be a dict"),
        ([{"role": "assistant", "tool_calls": "{nope"}], "not JSON"),
        ([{"role": "assistant", "tool_calls": [{"function": {}}]}], "no function.name"),
    ],
)
def test_bad_messages_raise_request_error(messages, match):
    with pytest.raises(RequestError, match=match):
        sanitize_messages(messages)


def test_request_body_fields():
    tools = [{"type": "function", "function": {"name": "w", "parameters": {}}}]
    params = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=64, seed=3, stop="END", logprobs=2,
                            repetition_penalty=1.25, num_samples=2)
    body = to_request({"messages": [{"role": "user", "content": "hi"}], "tools": tools}, params, model="m")
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2, "temperature": 0.7,
                    "top_p": 0.9, "tools": tools, "max_tokens": 64, "seed": 3, "stop": ["END"], "logprobs": True,
                    "top_logprobs": 2, "frequency_penalty": 0.25}
    minimal = to_request({"messages": [{"role": "user", "content": "hi"}]})
    assert set(minimal) == {"messages", "n", "temperature", "top_p"}


def test_explicit_tools_override_trajectory_tools():
    body = to_request({"messages": [{"role": "user", "content": "x"}], "tools": [{"a": 1}]}, tools=[{"b": 2}])
    assert body["tools"] == [{"b": 2}]


def test_token_id_stops_are_dropped_with_one_warning(caplog):
    warned: set[str] = set()
    params = SamplingParams(stop=[151645, 151643])
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            body = to_request({"messages": [{"role": "user", "content": "x"}]}, params, warned=warned)
    assert "stop" not in body
    assert sum("token ids" in r.getMessage() for r in caplog.records) == 1


def test_empty_trajectory_is_refused():
    with pytest.raises(RequestError, match="no messages"):
        to_request({"messages": []})
