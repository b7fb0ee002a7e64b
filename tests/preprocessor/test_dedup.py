"""DedupFilter (SPEC 5): signature rules, longest-first selection, shapes, and the order-free winner rule."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinkle_agentic.preprocessor import DedupFilter
from twinkle_agentic.preprocessor.dedup import (
    dedup_key,
    full_hash,
    head_tail,
    is_real_user,
    signature,
    signature_parts,
)


def u(text, **extra):
    return {"role": "user", "content": text, **extra}


def a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def row(*messages, **extra):
    return {"messages": list(messages), **extra}


def kept_ids(kept):
    return [r["id"] for r in kept]


def test_seed_observation_extension_wins_over_identical_pair():
    short = [u("How do I sort a list in Python?"), a("Use sorted(xs) or xs.sort().")]
    rows = [
        {"id": 1, "messages": copy.deepcopy(short)},
        {"id": 2, "messages": copy.deepcopy(short)},
        {"id": 3, "messages": short + [u("And in reverse?"), a("Pass reverse=True.")]},
    ]
    kept, dropped = DedupFilter()(rows)
    assert kept_ids(kept) == [3]
    assert sorted(r["id"] for r in dropped) == [1, 2]
    assert {r["drop_reason"] for r in dropped} == {"duplicate"}


@pytest.mark.parametrize(
    "message, real",
    [
        (u("hello there"), True),
        (u("   "), False),
        (u(""), False),
        (u("<system-reminder>be brief</system-reminder> hi"), False),
        (u("<SYSTEM_REMINDER>x"), False),
        (u("<context>files...</context>"), False),
        (u("<user_info os=linux>"), False),
        (u("<attached_files>a.py"), False),
        (u("<contextual> is a real word here"), True),
        (u("  <context>leading spaces are stripped first"), False),
        (a("hello"), False),
        ({"role": "user", "content": [{"type": "text", "text": "parts count"}]}, True),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, False),
        ("not a dict", False),
    ],
)
def test_real_user_rule(message, real):
    assert is_real_user(message) is real


@pytest.mark.parametrize(
    "text, n, expected",
    [
        ("  abcdef  ", 3, "abcdef"),
        ("abcdefg", 3, "abcefg"),
        ("abcdefgh", 2, "abgh"),
        ("ab", 0, ""),
        ("", 5, ""),
    ],
)
def test_head_tail(text, n, expected):
    assert head_tail(text, n) == expected


def test_signature_uses_first_real_user_and_first_later_assistant_with_text():
    messages = [
        {"role": "system", "content": "You are a helpful agent."},
        a("an assistant message before the user is ignored"),
        u("<system-reminder>tools are available</system-reminder>"),
        u("What is the weather in Paris?"),
        a(
            "",
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
        ),
        {"role": "tool", "content": "18C, cloudy", "tool_call_id": "c1"},
        a("It is 18C and cloudy in Paris."),
        a("a later reply does not count"),
    ]
    assert signature_parts(messages) == ("What is the weather in Paris?", "It is 18C and cloudy in Paris.")
    expected = hashlib.md5(
        json.dumps(
            ["What is the weather in Paris?", "It is 18C and cloudy in Paris."], ensure_ascii=False
        ).encode()
    ).hexdigest()
    assert signature(messages) == expected


def test_signature_without_real_user_uses_first_two_assistant_texts():
    messages = [u("<context>boilerplate</context>"), a("first"), a("  "), a("second"), a("third")]
    assert signature_parts(messages, prefix_chars=1, asst_chars=100) == ("first", "second")
    assert signature_parts([a("only one")]) == ("only one", "")
    # the fallback uses asst_chars for both parts
    assert signature_parts([a("abcdef"), a("uvwxyz")], prefix_chars=100, asst_chars=1) == ("af", "uz")


def test_head_and_tail_windows_decide_collisions():
    middle_a = "x" * 100 + "A" * 300 + "y" * 100
    middle_b = "x" * 100 + "B" * 300 + "y" * 100
    rows = [
        {"id": 1, "messages": [u(middle_a), a("same reply")]},
        {"id": 2, "messages": [u(middle_b), a("same reply")]},  # differs only in the middle: duplicate
        {"id": 3, "messages": [u(middle_a + "!"), a("same reply")]},  # tail differs: distinct
    ]
    kept, dropped = DedupFilter(prefix_chars=100, asst_chars=100)(rows)
    assert kept_ids(kept) == [1, 3]
    assert [r["id"] for r in dropped] == [2]
    kept, _ = DedupFilter(prefix_chars=250, asst_chars=100)(rows)
    assert kept_ids(kept) == [1, 2, 3]


def test_tie_on_length_keeps_first_and_longer_replaces_earlier_winner():
    rows = [
        {"id": 1, "messages": [u("same question here"), a("same answer"), u("follow up one")]},
        {"id": 2, "messages": [u("same question here"), a("same answer"), u("follow up two")]},
        {"id": 3, "messages": [u("same question here"), a("same answer")]},
        {"id": 4, "messages": [u("same question here"), a("same answer"), u("x"), a("y")]},
        {"id": 5, "messages": [u("same question here"), a("same answer"), u("z"), a("w")]},
    ]
    kept, dropped = DedupFilter()(rows)
    assert kept_ids(kept) == [4]
    assert sorted(r["id"] for r in dropped) == [1, 2, 3, 5]


def test_empty_signature_rows_compare_by_full_hash_only():
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}}]}
    other = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "b.png"}}]}
    rows = [
        {"id": 1, "messages": [image]},
        {"id": 2, "messages": [other]},  # upstream would lump these together
        {"id": 3, "messages": [copy.deepcopy(image)]},  # exact copy: duplicate
        {"id": 4, "messages": []},
        {"id": 5},  # no messages at all: same (empty) content as id 4
        {"id": 6, "messages": "not a list"},
    ]
    kept, dropped = DedupFilter()(rows)
    assert kept_ids(kept) == [1, 2, 4, 6]
    assert sorted(r["id"] for r in dropped) == [3, 5]


def test_full_hash_ignores_key_order_and_keeps_unicode():
    m1 = [{"role": "user", "content": "你好"}]
    m2 = [{"content": "你好", "role": "user"}]
    assert full_hash(m1) == full_hash(m2)
    expected = hashlib.md5(json.dumps(m1, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
    assert full_hash(m1) == expected


def test_column_dict_input_and_invalid_rows():
    columns = {
        "id": [1, 2, 3],
        "messages": [
            [u("a real question"), a("ok")],
            [u("a real question"), a("ok")],
            [u("other q"), a("ok")],
        ],
    }
    kept, dropped = DedupFilter()(columns)
    assert kept_ids(kept) == [1, 3]
    assert [r["id"] for r in dropped] == [2]

    kept, dropped = DedupFilter()([row(u("q1"), a("r")), "garbage", None])
    assert len(kept) == 1
    assert [d["drop_reason"] for d in dropped] == ["invalid_row", "invalid_row"]


def test_dataframe_input():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"id": [1, 2], "messages": [[u("q one"), a("r")], [u("q one"), a("r")]]})
    kept, dropped = DedupFilter()(frame)
    assert kept_ids(kept) == [1]
    assert [r["id"] for r in dropped] == [2]


def test_kept_rows_never_carry_drop_reason_and_inputs_are_not_mutated():
    rows = [
        {"id": 1, "messages": [u("question"), a("answer")], "drop_reason": "stale"},
        {"id": 2, "messages": [u("question"), a("answer")]},
    ]
    before = copy.deepcopy(rows)
    kept, dropped = DedupFilter()(rows)
    assert rows == before
    assert "drop_reason" not in kept[0]
    assert dropped[0]["drop_reason"] == "duplicate"
    assert dropped[0] is not rows[1]


@pytest.mark.parametrize("kwargs", [{"prefix_chars": -1}, {"asst_chars": 1.5}, {"prefix_chars": True}])
def test_bad_parameters_are_rejected(kwargs):
    with pytest.raises(ValueError, match="DedupFilter"):
        DedupFilter(**kwargs)


def upstream_one_pass(rows, prefix_chars=100, asst_chars=100):
    """The one-pass selection as SPEC 5 states it, with the full-hash check (kept indices)."""
    best = {}
    keep = [False] * len(rows)
    for i, r in enumerate(rows):
        messages = r.get("messages") if isinstance(r.get("messages"), list) else []
        sig = signature(messages, prefix_chars, asst_chars)
        group = sig if sig is not None else "f" + full_hash(r.get("messages") or [])
        fh, n = full_hash(r.get("messages") or []), len(messages)
        cur = best.get(group)
        if cur is None:
            best[group] = (i, n, fh)
            keep[i] = True
        elif fh == cur[2]:
            continue
        elif n > cur[1]:
            keep[cur[0]] = False
            best[group] = (i, n, fh)
            keep[i] = True
    return [i for i, k in enumerate(keep) if k]


_texts = st.sampled_from(["q1", "q2", "  q1  ", "", "<context>x", "你好吗朋友", "r1", "r2"])
_message = st.builds(
    lambda role, text: {"role": role, "content": text}, st.sampled_from(["user", "assistant", "tool"]), _texts
)
_rows = st.lists(st.builds(lambda ms: {"messages": ms}, st.lists(_message, max_size=5)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_rows, st.integers(0, 3), st.integers(0, 3))
def test_matches_one_pass_selection_and_conserves_rows(rows, prefix_chars, asst_chars):
    rows = [dict(r, id=i) for i, r in enumerate(rows)]
    before = copy.deepcopy(rows)
    kept, dropped = DedupFilter(prefix_chars, asst_chars)(rows)
    assert rows == before
    assert kept_ids(kept) == upstream_one_pass(rows, prefix_chars, asst_chars)
    assert len(kept) + len(dropped) == len(rows)
    assert sorted(kept_ids(kept) + [r["id"] for r in dropped]) == list(range(len(rows)))
    # the order-free rule the distributed job uses: per group, min of (-length, position)
    groups = {}
    for i, r in enumerate(rows):
        key, length = dedup_key(r, prefix_chars, asst_chars)
        groups[key] = min(groups.get(key, (1, 0)), (-length, i)) if key in groups else (-length, i)
    assert sorted(i for _, i in groups.values()) == kept_ids(kept)
