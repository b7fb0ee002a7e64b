"""The step: row shapes, column dicts, tool calls, reasoning, roles, counts, no mutation, idempotence."""

from __future__ import annotations

import copy
import difflib
import json
import pickle

from twinkle_agentic.preprocessor.pii import PIIPresidioFilter

EMAIL = "john.smith@gmail.com"
PHONE = "13812345678"


def _arrow_row():
    calls = [{"id": "c1", "type": "function",
              "function": {"name": "send", "arguments": json.dumps({"to": EMAIL, "note": f"call {PHONE}"})}}]
    return {
        "id": "r1",
        "messages": [
            {"role": "system", "content": "You are helpful.", "tool_calls": "", "tool_call_id": ""},
            {"role": "user", "content": f"I'm John Smith, mail {EMAIL}", "tool_calls": "", "tool_call_id": ""},
            {"role": "assistant", "content": "<think>user is John Smith</think>Sending.",
             "tool_calls": json.dumps(calls), "tool_call_id": ""},
            {"role": "tool", "content": json.dumps({"sent_to": EMAIL}), "tool_calls": "", "tool_call_id": "c1"},
        ],
        "user_data": [["k", "\"v\""]],
    }


def _memory_row():
    return {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"我叫王小明，手机{PHONE}"},
                                         {"type": "image_url", "image_url": {"url": "http://x/1.png"}}]},
            {"role": "assistant", "content": "好的", "reasoning_content": f"用户手机是{PHONE}",
             "tool_calls": [{"id": "c2", "type": "function",
                             "function": {"name": "sms", "arguments": {"phone": PHONE, "n": 3, "tags": ["王小明"]}}}]},
            {"role": "assistant", "content": "ok", "thinking": f"email {EMAIL}"},
        ]
    }


def _all_text(row) -> str:
    return json.dumps(row, ensure_ascii=False)


def test_step_contract(pii_filter):
    assert PIIPresidioFilter.name == "PIIPresidioFilter" and PIIPresidioFilter.needs_actor is True
    rows = [_arrow_row(), _memory_row(), "not a row"]
    before = copy.deepcopy(rows)
    kept, dropped = pii_filter(rows)
    assert dropped == [] and len(kept) == 3 and kept[2] == "not a row"
    assert rows == before  # inputs never mutated
    assert kept[0] is not rows[0]


def test_arrow_stable_row(pii_filter):
    out = pii_filter([_arrow_row()])[0][0]
    text = _all_text(out)
    assert EMAIL not in text and "John Smith" not in text and PHONE not in text
    messages = out["messages"]
    assert messages[0] == _arrow_row()["messages"][0]
    assert isinstance(messages[2]["tool_calls"], str) and messages[2]["content"].startswith("<think>")
    call = json.loads(messages[2]["tool_calls"])[0]
    args = json.loads(call["function"]["arguments"])
    assert set(args) == {"to", "note"} and call["function"]["name"] == "send" and call["id"] == "c1"
    # consistent within the row: the same e-mail has the same fake in content, arguments and tool output
    fake = args["to"]
    assert fake in messages[1]["content"] and json.loads(messages[3]["content"])["sent_to"] == fake
    assert out["user_data"] == [["k", "\"v\""]] and messages[3]["tool_call_id"] == "c1"


def test_in_memory_row(pii_filter):
    out = pii_filter([_memory_row()])[0][0]
    messages = out["messages"]
    assert PHONE not in _all_text(out) and "王小明" not in _all_text(out) and EMAIL not in _all_text(out)
    assert messages[0]["content"][1] == _memory_row()["messages"][0]["content"][1]  # media part untouched
    arguments = messages[1]["tool_calls"][0]["function"]["arguments"]
    assert isinstance(arguments, dict) and arguments["n"] == 3
    assert arguments["phone"] in messages[1]["reasoning_content"]
    assert arguments["phone"] in messages[0]["content"][0]["text"]
    assert "email" in messages[2]["thinking"]


def test_tool_call_json_keeps_its_style(pii_filter):
    compact = json.dumps({"to": EMAIL, "city": "北京"}, separators=(",", ":"), ensure_ascii=True)
    row = {"messages": [{"role": "assistant", "content": "",
                         "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": compact}}]}]}
    new = pii_filter([row])[0][0]["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert EMAIL not in new and ", " not in new and new.isascii() and "\\u" in new
    untouched = {"messages": [{"role": "assistant", "content": "",
                               "tool_calls": '[{"id": "1", "function": {"name": "f", "arguments": "{\\"n\\": 1}"}}]'}]}
    assert pii_filter([untouched])[0][0] == untouched


def test_column_dict(pii_filter):
    batch = {"id": [1, 2], "messages": [_arrow_row()["messages"], _memory_row()["messages"]]}
    kept, dropped = pii_filter(batch)
    assert dropped == [] and [r["id"] for r in kept] == [1, 2]
    assert EMAIL not in _all_text(kept) and PHONE not in _all_text(kept)


def test_roles_and_counts():
    step = PIIPresidioFilter(roles=("user",), record_counts=True, use_ner=False)
    row = {"messages": [{"role": "system", "content": f"admin {EMAIL}"}, {"role": "user", "content": f"me {EMAIL}"},
                        {"role": "developer", "content": f"dev {EMAIL}"}]}
    out = step([row])[0][0]
    assert out["messages"][0]["content"] == f"admin {EMAIL}" and out["messages"][2]["content"] == f"dev {EMAIL}"
    assert EMAIL not in out["messages"][1]["content"]
    assert out["_pii_hits"] == {"EMAIL_ADDRESS": 1}


def test_pickles_small_and_works_after_unpickling(pii_filter):
    blob = pickle.dumps(pii_filter)
    assert len(blob) < 2000
    clone = pickle.loads(blob)
    assert clone([_arrow_row()]) == pii_filter([_arrow_row()])


def _changed_regions(before: str, after: str) -> list[tuple[int, int]]:
    """Regions of ``before`` that differ in ``after``, and regions of ``after`` that were written."""
    ops = difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
    return [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def test_second_pass_never_rewrites_a_replacement(pii_filter, eval_records):
    """A second pass leaves every fake of the first alone. The only change it may make is to catch
    an original that NER missed in its first context (one case in this set: spaCy finds a name once
    the names around it changed)."""
    texts = [r["text"] for r in eval_records]
    once = [r["messages"][0]["content"] for r in pii_filter([{"messages": [{"role": "user", "content": t}]}
                                                                for t in texts])[0]]
    twice = [r["messages"][0]["content"] for r in pii_filter([{"messages": [{"role": "user", "content": t}]}
                                                                 for t in once])[0]]
    rewritten_fakes, caught_late = [], []
    for original, a, b in zip(texts, once, twice, strict=True):
        if a == b:
            continue
        written = [(j1, j2) for _, _, j1, j2 in _changed_regions(original, a)]
        regions = [(i1, i2) for i1, i2, _, _ in _changed_regions(a, b)]
        if any(i1 < w2 and w1 < i2 for i1, i2 in regions for w1, w2 in written):
            rewritten_fakes.append((a, b))
        else:
            caught_late.append((a, b))
    assert rewritten_fakes == []
    assert len(caught_late) <= 2, caught_late


def test_pattern_only_second_pass_is_identical(eval_records):
    step = PIIPresidioFilter(use_ner=False)
    rows = [{"messages": [{"role": "user", "content": r["text"]}]} for r in eval_records[::3]]
    once, _ = step(rows)
    assert step(once)[0] == once


def test_detected_originals_never_appear_in_output(pii_filter, analyzer, eval_records):
    rows = [{"messages": [{"role": "user", "content": r["text"]}]} for r in eval_records]
    out, _ = pii_filter(rows)
    leaked = []
    for record, spans, row in zip(eval_records, analyzer.analyze([r["text"] for r in eval_records]), out, strict=True):
        content = row["messages"][0]["content"]
        for s in spans:
            value = record["text"][s.start : s.end]
            if len(value) >= 4 and value in content:
                leaked.append((record["id"], s.entity, value))
    assert leaked == []


def test_documentation_addresses_are_left_as_they_are(pii_filter):
    """E-mails at RFC 2606 / 6761 domains and IPs in the documentation ranges count as the filter's own
    replacements, so they stay even when a user wrote them; a real address beside them is rewritten."""
    reserved = ["jane.doe@example.com", "ops@mail.example.org", "bob@host.test", "192.0.2.15", "2001:db8::7"]
    text = (
        f"Write to {reserved[0]} or {reserved[1]} (test box {reserved[2]}); the server is at "
        f"{reserved[3]}, v6 {reserved[4]}. My own mail is {EMAIL}."
    )
    out = pii_filter([{"messages": [{"role": "user", "content": text}]}])[0][0]["messages"][0]["content"]
    assert all(value in out for value in reserved), out
    assert EMAIL not in out
