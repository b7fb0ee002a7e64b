import json

from twinkle_agentic.data_format import pack_value
from twinkle_agentic.preprocessor.score.contexts import answer_text, build_contexts, fit_prompt


def row(messages, key_rounds=None, intents=None, **extra):
    user_data = [("source", pack_value("x"))]
    if key_rounds is not None:
        user_data.append(("key_rounds", pack_value(key_rounds)))
    if intents is not None:
        user_data.append(("intents", pack_value(intents)))
    return {"id": "row-1", "messages": messages, "user_data": user_data, **extra}


MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "<think>hmm</think>a1"},
    {"role": "user", "content": "q2"},
    {"role": "assistant", "content": "<think>only thinking</think>"},
    {"role": "user", "content": "q3"},
    {"role": "assistant", "content": "a3"},
]


def rounds(contexts):
    return [c.round for c in contexts]


def test_all_assistant_rounds_without_key_rounds():
    contexts, had = build_contexts(0, row(MESSAGES), None)
    assert had is False
    assert rounds(contexts) == [2, 6]  # round 4 is think-only: empty text, skipped
    assert contexts[0].answer == "a1" and contexts[0].messages == MESSAGES[:2]
    assert contexts[0].row_id == "row-1" and contexts[0].intent == "other"


def test_empty_key_rounds_means_all_rounds():
    contexts, had = build_contexts(0, row(MESSAGES, key_rounds=[]), None)
    assert had is False and rounds(contexts) == [2, 6]


def test_key_rounds_skip_invalid_indices():
    contexts, had = build_contexts(0, row(MESSAGES, key_rounds=[6, "2", 1, 99, True, 6, 0, 4]), None)
    assert had is True
    assert rounds(contexts) == [6]  # str, user message, out of range, bool, duplicate, think-only


def test_intent_filter_uses_round_intents():
    r = row(MESSAGES, key_rounds=[2, 6], intents={"2": "code", "6": "math"})
    assert rounds(build_contexts(0, r, frozenset({"math"}))[0]) == [6]
    assert [c.intent for c in build_contexts(0, r, None)[0]] == ["code", "math"]
    # rounds without a label are 'other'
    assert rounds(build_contexts(0, row(MESSAGES), frozenset({"other"}))[0]) == [2, 6]


def test_dict_user_data_and_row_index_id():
    r = {"messages": MESSAGES, "user_data": {"key_rounds": [2]}}
    contexts, had = build_contexts(5, r, None)
    assert had and rounds(contexts) == [2] and contexts[0].row_id == "5"


def test_tool_call_rounds_are_scored_with_their_calls():
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": json.dumps(
            [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ]
        ),
    }
    assert (
        answer_text(message)
        == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    contexts, _ = build_contexts(
        0, row([{"role": "user", "content": "weather?"}, message], tools=json.dumps(tools)), None
    )
    assert rounds(contexts) == [1] and contexts[0].tools == tools


def test_no_history_or_bad_messages():
    assert build_contexts(0, row([{"role": "assistant", "content": "hi"}]), None)[0] == []
    assert build_contexts(0, {"messages": "not a list"}, None)[0] == []


# -- prompt fitting (one token per word, plus 2 per message for the role markup) -------------------


def encode(messages):
    ids = []
    for m in messages:
        ids += [0, 1] + [hash(w) % 1000 for w in str(m["content"]).split()]
    return ids + [2]  # generation prompt


def msg(role, n_words, tag="w"):
    return {"role": role, "content": " ".join(f"{tag}{i}" for i in range(n_words))}


def test_fits_unchanged():
    messages = [msg("user", 5)]
    kept, ids = fit_prompt(encode, messages, 100)
    assert kept == messages and ids == encode(messages)


def test_drops_oldest_non_system_cutting_at_user_turns():
    messages = [
        msg("system", 3),
        msg("user", 10),
        msg("assistant", 10),
        msg("user", 10),
        msg("assistant", 10),
        msg("user", 10),
    ]
    kept, ids = fit_prompt(encode, messages, 40)
    # 5 + 4x12 + 12 + 1 = 66 > 40; dropping q1, a1 (cut at the user turn q2) gives 5 + 36 + 1 = 42 > 40;
    # dropping q1..a2 gives 5 + 12 + 1 = 18 <= 40.
    assert kept == [messages[0], messages[5]]
    assert ids == encode(kept) and len(ids) <= 40


def test_cuts_mid_exchange_when_no_user_cut_fits():
    messages = [msg("user", 50), msg("assistant", 10), msg("tool", 5), msg("tool", 5)]
    kept, ids = fit_prompt(encode, messages, 20)
    assert kept == messages[2:] and len(ids) <= 20


def test_lone_overlong_message_keeps_its_tail():
    messages = [msg("system", 2), msg("user", 200)]
    kept, ids = fit_prompt(encode, messages, 30)
    assert kept[0] == messages[0]
    content = kept[1]["content"]
    assert messages[1]["content"].endswith(content) and content.split()[-1] == "w199"
    assert len(ids) <= 30 and len(ids) >= 28  # the longest tail that fits


def test_system_alone_too_long_cuts_ids():
    kept, ids = fit_prompt(encode, [msg("system", 100), msg("user", 3)], 10)
    assert len(ids) == 10 and kept[1]["content"] == ""
