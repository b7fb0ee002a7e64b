"""ModelFilter, MessageNormalizer and IntentClassifier."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.preprocessor_rows import LONG_Q, assistant, call, row, system, tool, user
from twinkle_agentic.data_format import user_data_get
from twinkle_agentic.preprocessor import IntentClassifier, MessageNormalizer, ModelFilter
from twinkle_agentic.preprocessor.intent import (
    CodeDetector,
    ComplexLogicDetector,
    MathDetector,
    ReasoningDetector,
)

# --- ModelFilter -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model_id, kept",
    [("qwen3.5-4b", True), (" Qwen3.5-32B ", True), ("qwen3.5-7b", False), ("", False), (None, False), (3, False)],
)
def test_model_filter_exact_ids(model_id, kept, verdict):
    f = ModelFilter(allowed_models=["qwen3.5-4b", "qwen3.5-32b"])
    assert verdict(f, {"model_id": model_id}) == (None if kept else "model_not_allowed")


def test_model_filter_patterns_and_case(verdict):
    f = ModelFilter(patterns=["deepseek-*", "re:qwen3-\\d+b", re.compile(r"kimi-k\d")], field="model")
    assert verdict(f, {"model": "DeepSeek-V3"}) is None
    assert verdict(f, {"model": "qwen3-32b"}) is None
    assert verdict(f, {"model": "qwen3-32b-instruct"}) == "model_not_allowed"  # regex must match the whole id
    assert verdict(f, {"model": "kimi-k2"}) is None
    assert verdict(f, {"model_id": "kimi-k2"}) == "model_not_allowed"
    strict = ModelFilter(allowed_models=["Qwen"], case_sensitive=True)
    assert verdict(strict, {"model_id": "qwen"}) == "model_not_allowed"


def test_model_filter_needs_a_list():
    with pytest.raises(ValueError, match="allowed_models"):
        ModelFilter()
    upstream = ModelFilter(patterns=ModelFilter.UPSTREAM_DEFAULT_PATTERNS)
    assert upstream.allows("deepseek-ai/DeepSeek-R1") and not upstream.allows("gpt-4o")


# --- MessageNormalizer -----------------------------------------------------------------------

N = MessageNormalizer()


def norm(*messages):
    kept, dropped = N([row(*messages)])
    assert dropped == []
    return kept[0]["messages"]


def calls_of(message):
    return json.loads(message["tool_calls"])


def test_heartbeats_and_developer():
    assert norm({"role": "developer", "content": "sys"}, user("hi"), assistant("a")) == [system("sys"), user("hi"), assistant("a")]
    assert norm(user("heartbeat"), assistant("ok"), user("real question"), assistant("answer")) == [user("real question"), assistant("answer")]
    assert norm(user("keep-alive"), assistant("pong"), user("KEEPALIVE"), assistant("p"), user("q"), assistant("a")) == [user("q"), assistant("a")]
    assert norm(user("x" * 310 + " heartbeat"), assistant("ok"))[0]["content"].endswith("heartbeat")  # beyond 300 chars
    assert norm(assistant("lead"), tool("t"), user("q"), assistant("a")) == [user("q"), assistant("a")]


def test_hermes_rewrite_keeps_reasoning_decision():
    out = norm(user("q"), assistant('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "巴黎"}}\n</tool_call>', reasoning_content="think", name="bot"), user('{"temp": 20}'), assistant("20C"))
    rewritten = out[1]
    assert rewritten["content"] == "Let me check."
    assert rewritten["reasoning_content"] == "think" and rewritten["name"] == "bot"  # upstream drops both
    assert calls_of(rewritten) == [{"id": "call_norm_0001", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "巴黎"}'}}]
    assert out[2] == {"role": "tool", "content": '{"temp": 20}', "tool_calls": "", "tool_call_id": "call_norm_0001"}


def test_hermes_function_form_and_ids_per_conversation():
    out = norm(user("q"), assistant("<tool_call><function=search><parameter=query>cats</parameter><parameter=n>3</parameter></function></tool_call>"), user("found"), assistant('<tool_call>{"tool_name": "g", "arguments": "{}"}</tool_call>'), user("r2"), assistant("done"))
    assert json.loads(calls_of(out[1])[0]["function"]["arguments"]) == {"query": "cats", "n": 3}
    assert calls_of(out[3])[0]["id"] == "call_norm_0002"


def test_two_calls_without_prefix_consume_nothing():
    out = norm(user("q"), assistant('<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g", "arguments": {}}</tool_call>'), user("r1"), user("r2"), assistant("done"))
    assert [m["role"] for m in out] == ["user", "assistant", "user", "assistant"]
    assert out[2]["content"] == "r1\nr2"


def test_cline_vcp_react():
    out = norm(user("read"), assistant("I will read it.\n<read_file>\n<path> a.py </path>\n</read_file>"), user("[read_file for 'a.py'] Result:\nprint(1)"), assistant("ok"))
    assert calls_of(out[1])[0]["function"] == {"name": "read_file", "arguments": '{"path": "a.py"}'}
    assert out[2]["content"] == "print(1)"
    assert norm(user("q"), assistant("<think><path>a</path></think>"), user("r"))[1]["content"] == "<think><path>a</path></think>"
    vcp = norm(user("q"), assistant("<<<[TOOL_REQUEST]>>>\ntool_name:「始」Search「末」,\nquery:「始」cats「末」\n<<<[END_TOOL_REQUEST]>>>"), user("res"))
    assert calls_of(vcp[1])[0]["function"] == {"name": "Search", "arguments": '{"query": "cats"}'}
    react = norm(user("q"), assistant("Thought: search\nAction: search[cats and dogs]"), user("Observation: found"))
    assert react[1]["content"] == "Thought: search"
    assert json.loads(calls_of(react[1])[0]["function"]["arguments"]) == {"input": "cats and dogs"}


def test_merge_runs():
    assert norm(user("thanks"), user("again"), assistant("a")) == [user("thanks\nagain"), assistant("a")]
    assert norm(user([{"type": "text", "text": "a"}]), user([{"type": "text", "text": "b"}]), assistant("x"))[0]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert len(norm(user("a"), user([{"type": "text", "text": "b"}]), assistant("x"))) == 3  # mixed stay apart
    assert norm(user("q"), assistant("  "), user("q2"), assistant("a2")) == [user("q"), user("q2"), assistant("a2")]
    tc = assistant("", tool_calls=[call()])
    assert norm(user("q"), tc, tool("", "c1"), assistant("b"), assistant("c")) == [user("q"), tc, assistant("b\nc")]


def test_merge_joins_reasoning_decision():
    out = norm(user("q"), assistant("a", reasoning_content="r1"), assistant("b", reasoning_content="r2"))
    assert out[1] == {"role": "assistant", "content": "a\nb", "reasoning_content": "r1\nr2"}


def test_list_format_and_passthrough():
    out = MessageNormalizer(tool_calls_format="list")([row(user("q"), assistant('<tool_call>{"name": "f", "arguments": {}}</tool_call>'), user("r"))])[0][0]
    assert out["messages"][1]["tool_calls"][0]["function"]["name"] == "f"
    for bad in ({"messages": "x"}, {"messages": []}, {"id": 1}, {"messages": [1, 2]}):
        assert N([bad]) == ([bad], [])
    with pytest.raises(ValueError, match="tool_calls_format"):
        MessageNormalizer(tool_calls_format="xml")


# --- IntentClassifier ------------------------------------------------------------------------


def test_detectors():
    msgs = lambda t: [user("q"), assistant(t)]  # noqa: E731
    assert CodeDetector()(msgs("```\nprint('hello')\n```")) == [1]
    assert CodeDetector()(msgs("def f class A import os")) == [1]
    assert CodeDetector()(msgs("def f class A")) == []
    assert MathDetector()(msgs("$x^2$ and α β and ½")) == [1]
    assert ComplexLogicDetector()(msgs("Firstly a. Moreover b. Therefore c. In conclusion d. Pros and cons. A trade-off.")) == [1]
    assert ComplexLogicDetector()([user("Firstly a. Moreover b. Therefore c. In conclusion d. Pros and cons. A trade-off."), assistant("ok")]) == []
    assert ReasoningDetector()([user("q"), assistant("a", reasoning_content="x" * 200)]) == [1]
    assert ReasoningDetector()([user("q"), assistant("<think> " + "x" * 199 + "</think>a")]) == []
    assert CodeDetector()([user("def f class A import os"), assistant("ok")]) == [1]  # user match -> next assistant


def test_classify_combines_rounds_and_ties():
    c = IntentClassifier()
    r = row(user("write code"), assistant("```python\nprint(1)\n```"), user("that is wrong"), assistant("ok"), user_data=[("a", "1"), ("key_rounds", "[9]")])
    out = c([r])[0][0]
    assert out["intent"] == "code"  # tie between code and dissatisfaction: the earlier detector wins
    assert out["user_data"] == [("a", "1"), ("key_rounds", "[1, 3]"), ("intents", '{"1": "code", "3": "user_dissatisfaction"}')]


def test_tool_call_detector_is_definitive():
    r = row(user("q"), assistant("```\ncode here!\n```", tool_calls=[call()]), tool("r"), assistant("```\nmore code\n```"))
    out = IntentClassifier()([r])[0][0]
    assert out["intent"] == "tool_call"
    assert user_data_get(out["user_data"], "key_rounds") == [1]


def test_undetected_rows_are_annotated_not_dropped_decision():
    r = row(user(LONG_Q), assistant("Plain answer."))
    kept, dropped = IntentClassifier()([r])
    assert dropped == [] and kept[0]["intent"] == "other"
    assert user_data_get(kept[0]["user_data"], "key_rounds") == [] and user_data_get(kept[0]["user_data"], "intents") == {}
    kept, dropped = IntentClassifier(drop_no_key_rounds=True)([r])
    assert kept == [] and dropped[0]["drop_reason"] == "no_key_rounds"


def test_user_data_shapes_and_field():
    r = row(user("q"), assistant("a", reasoning_content="x" * 300), user_data={"k": "v"})
    out = IntentClassifier(intent_field="label")([r, {**r, "user_data": "opaque"}, {"messages": 5}])[0]
    assert out[0]["label"] == "reasoning" and out[0]["user_data"]["k"] == "v"
    assert json.loads(out[0]["user_data"]["key_rounds"]) == [1]
    assert out[1]["user_data"] == "opaque"
    assert out[2]["label"] == "other"
    assert "user_data" not in r or r["user_data"] == {"k": "v"}  # input untouched
