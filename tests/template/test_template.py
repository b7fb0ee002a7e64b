"""Template: rendering, encoding with assistant labels, truncation, tool-call parsing, token drift."""

from __future__ import annotations

import pytest

from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.template import (
    HermesToolCallParser,
    Template,
    TemplateLengthError,
    get_tool_call_parser,
    register_tool_call_parser,
    sequence_drift,
)

TOOLS = [t.tool_info() for t in demo_tools()]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "Paris: sunny, 24 C"},
    {"role": "assistant", "content": "It is sunny and 24 C in Paris."},
]


def test_turn_end_is_derived_from_the_template(tiny_template):
    assert (tiny_template.end_of_turn, tiny_template.turn_suffix) == ("<|im_end|>", "\n")
    assert tiny_template.end_of_turn_id == tiny_template.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tiny_template.max_length == 1024  # from the tokenizer's model_max_length


def test_render_includes_tools_and_hermes_calls(tiny_template):
    text = tiny_template.render(CONVERSATION, TOOLS)
    assert text.startswith("<|im_start|>system\nTools:\nget_weather(city): Get the weather of a city.\n")
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' in text
    assert "<|im_start|>user\n<tool_response>\nParis: sunny, 24 C\n</tool_response><|im_end|>\n" in text
    assert tiny_template.render(CONVERSATION[:1], add_generation_prompt=True).endswith("<|im_start|>assistant\n")
    # the Arrow-stable JSON-string form of tool_calls and dict arguments render the same
    import json

    as_string = [dict(CONVERSATION[1], tool_calls=json.dumps([CALL]))]
    as_dict = [dict(CONVERSATION[1], tool_calls=[{**CALL, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])]
    assert tiny_template.render(as_string) == tiny_template.render(as_dict) == tiny_template.render([CONVERSATION[1]])


def test_encode_labels_assistant_turns_only(tiny_template):
    feature = tiny_template.encode({"messages": CONVERSATION, "tools": TOOLS}, add_generation_prompt=False)
    ids, labels = feature["input_ids"], feature["labels"]
    assert feature["length"] == len(ids) == len(labels) == len(feature["attention_mask"])
    trained = tiny_template.decode([t for t, lab in zip(ids, labels, strict=True) if lab != -100], skip_special_tokens=False)
    assert trained == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
        "It is sunny and 24 C in Paris.<|im_end|>"
    )
    prompt = tiny_template.encode({"messages": CONVERSATION[:1]})
    assert all(lab == -100 for lab in prompt["labels"])


def test_truncation_strategies(tiny_template):
    tok = tiny_template.tokenizer
    trajectory = {"messages": CONVERSATION, "tools": TOOLS}
    full = tiny_template.encode(trajectory)["input_ids"]
    with pytest.raises(TemplateLengthError, match=f"{len(full)} tokens > max_length=20"):
        Template(tokenizer=tok, max_length=20).encode(trajectory)
    assert Template(tokenizer=tok, max_length=20, truncation_strategy="left").encode(trajectory)["input_ids"] == full[-20:]
    assert Template(tokenizer=tok, max_length=20, truncation_strategy="right").encode(trajectory)["input_ids"] == full[:20]
    with pytest.raises(ValueError, match="truncation_strategy"):
        Template(tokenizer=tok, truncation_strategy="split")


def test_hermes_parser_keeps_malformed_blocks_in_the_content():
    parser = HermesToolCallParser()
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>\n'
        "<tool_call>\n{not json}\n</tool_call>\n"
        '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1 + 1\\"}"}</tool_call>'
    )
    calls = parser.parse(text)
    assert [c["function"] for c in calls] == [
        {"name": "get_weather", "arguments": '{"city": "Rome"}'},
        {"name": "calculator", "arguments": '{"expression": "1 + 1"}'},
    ]
    assert parser.clean(text) == "Let me check.\n\n<tool_call>\n{not json}\n</tool_call>"
    assert parser.clean("  plain answer \n") == "  plain answer \n"  # nothing parsed: unchanged
    assert parser.parse('<tool_call>\n{"name": "x"') == []  # cut mid-call


def test_parser_registry():
    assert isinstance(get_tool_call_parser("hermes"), HermesToolCallParser)
    with pytest.raises(ValueError, match="unknown tool_call_parser 'nope'; registered: .*hermes"):
        get_tool_call_parser("nope")
    register_tool_call_parser("hermes-again", HermesToolCallParser)
    assert get_tool_call_parser("hermes-again").parse("<tool_call>{\"name\": \"a\"}</tool_call>")[0]["function"]["name"] == "a"
    with pytest.raises(TypeError, match="parse\\(\\) and clean\\(\\)"):
        get_tool_call_parser(object())


def test_token_drift_counts_differences(tiny_template):
    prompt = tiny_template.encode({"messages": CONVERSATION[:1], "tools": TOOLS})["input_ids"]
    answer = tiny_template.encode_text("Hi there.") + [tiny_template.end_of_turn_id]
    messages = [*CONVERSATION[:1], {"role": "assistant", "content": "Hi there."}]
    assert tiny_template.token_drift(prompt + answer, messages, TOOLS) == 0
    assert tiny_template.token_drift(prompt + answer[:-1], messages, TOOLS) == 0  # cut before <|im_end|>
    edited = [*CONVERSATION[:1], {"role": "assistant", "content": "Hi there!"}]
    assert tiny_template.token_drift(prompt + answer, edited, TOOLS) == 2  # '.' vs '!'
    assert sequence_drift([1, 2, 3], [1, 2, 3]) == 0 and sequence_drift([1, 2, 3], [1, 3]) == 1


def test_template_needs_a_chat_template(tiny_template):
    with pytest.raises(ValueError, match="exactly one of model"):
        Template()
    with pytest.raises(ValueError, match="max_length"):
        Template(tokenizer=tiny_template.tokenizer, max_length=0)
