"""decode_tool_calls: the one reading of a message's tool_calls field, and the callers built on it."""

from __future__ import annotations

import json

import pytest

from twinkle_agentic.data_format.tool_calls import ToolCallsError, decode_tool_calls, tool_call_id
from twinkle_agentic.preprocessor.text import tool_call_dicts
from twinkle_agentic.protocol.openai_payload import RequestError, sanitize_messages
from twinkle_agentic.rollout.base import with_call_ids
from twinkle_agentic.template.template import messages_for_template

CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, []),
        ("", []),
        ("  ", []),
        ("[]", []),
        (json.dumps([CALL]), [CALL]),
        (json.dumps(CALL), [CALL]),
        ([CALL], [CALL]),
        ((CALL,), [CALL]),
        (CALL, [CALL]),
        (["not a call", 3], ["not a call", 3]),  # entries are returned as they are
    ],
)
def test_decode_accepts_every_stored_form(value, expected):
    assert decode_tool_calls(value) == expected


@pytest.mark.parametrize(
    "value, match",
    [("{nope", "not JSON"), ('"text"', "must be a list"), ("null", "must be a list"), (5, "got int")],
)
def test_decode_refuses_what_is_not_a_call_list(value, match):
    with pytest.raises(ToolCallsError, match=match):
        decode_tool_calls(value)
    assert issubclass(ToolCallsError, ValueError)


def test_tool_call_id_is_turn_and_index():
    assert tool_call_id(2, 0) == "call_2_0"


def test_preprocessor_reading_is_lenient_and_decodes_nested_json():
    nested = [json.dumps(CALL), {"function": json.dumps({"name": "f"})}, "junk", 7]
    assert tool_call_dicts(nested) == [CALL, {"function": {"name": "f"}}]
    for none in (None, "", "[]", "{nope", "null", '"x"', 5, ["junk"], []):
        assert tool_call_dicts(none) is None


def test_rollout_gives_missing_ids_and_keeps_malformed_entries():
    calls = with_call_ids(json.dumps([{"function": {"name": "f"}}, "bad", CALL]), turn=3)
    assert calls == [{"function": {"name": "f"}, "id": "call_3_0", "type": "function"}, "bad", CALL]
    with pytest.raises(ValueError, match="not JSON"):
        with_call_ids("{nope", turn=1)


def test_payload_and_template_read_the_same_forms():
    message = {"role": "assistant", "content": "", "tool_calls": json.dumps(CALL)}
    assert sanitize_messages([message])[0]["tool_calls"] == [CALL]
    assert messages_for_template([message])[0]["tool_calls"] == [CALL]
    assert "tool_calls" not in messages_for_template([{**message, "tool_calls": "[]"}])[0]
    with pytest.raises(RequestError, match=r"message 0: tool_calls is a string but not JSON"):
        sanitize_messages([{**message, "tool_calls": "{nope"}])
