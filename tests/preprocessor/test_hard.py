"""HardFilter: every drop reason, per language, with threshold boundaries and SPEC Decisions."""

from __future__ import annotations

import pytest

from tests.support.preprocessor_rows import LONG_A, LONG_Q, assistant, call, row, system, tool, user
from twinkle_agentic.preprocessor import HardFilter
from twinkle_agentic.preprocessor.hard import is_simple_query

F = HardFilter()
REPLY = "y" * 90

SIMPLE_QUERIES = [
    # (text, simple?)
    ("hi", True),
    ("hello!!!", True),
    ("Good  morning.", True),
    ("What is AI?", True),
    ("what's the capital of France?", True),
    ("Can you help me with my code", True),
    ("explain recursion please", True),
    ("explain recursion to me please", False),  # 23 characters after the verb: over 20
    ("please help me with this", True),
    ("Write a poem about the sea in the style of a sailor", False),
    ("good morning :)", False),  # only ! ? . , may follow a greeting
    ("should I learn rust or go first", False),  # 'should' + 'I' is not a pronoun pair upstream knows
    ("你好", True),
    ("你好，", True),
    ("你好？", True),  # short anyway; the punctuation rule is tested with thresholds of 1 below
    ("机器学习是什么？", True),
    ("什么是一二三四五六", True),
    ("为什么天空是蓝色的呢", True),
    ("介绍一下你自己", True),
    ("请解释一下这个函数", True),
    ("请帮我写一个快速排序的实现并解释复杂度", False),
    ("こんにちは！", True),
    ("機械学習とは何ですか？", True),
    ("機械学習について教えてください", True),
    ("この文章を英語に翻訳して、丁寧な表現に直してください", False),
    ("안녕하세요!", True),
    ("안녕하세요?", False),
    ("이것은 무엇", True),
    ("파이썬 리스트와 튜플의 차이를 예시와 함께 자세히 설명해 주세요", False),
]


@pytest.mark.parametrize("text, simple", SIMPLE_QUERIES)
def test_simple_query_shapes(text, simple):
    assert is_simple_query(text, 10, 6) is simple


@pytest.mark.parametrize("text, simple", [("你好，", True), ("你好？", False), ("안녕 !", True), ("안녕하세요。", False)])
def test_greeting_punctuation(text, simple):
    assert is_simple_query(text, 1, 1) is simple


# Every greeting upstream Twinkle drops as trivial, with its drawn-out forms; thresholds of 1 below, so
# the vocabulary (not the length) decides.
GREETINGS = {
    "en": ["hello", "Hellooo", "hiii", "heyyy", "yooo", "howdy", "greetings", "good evening", "what's up",
           "how's it going", "how are you?"],
    "zh": ["你好", "你好好", "您好", "早上好", "下午好", "晚上好", "大家好", "嗨", "嗨嗨", "哈喽", "哈哈喽",
           "哈哈哈", "喂", "喂喂"],
    "ja": ["こんにちは", "こんにちはは", "こんばんは", "おはよう", "おはようございます", "やあ", "やああ", "どうも",
           "どうもも", "はじめまして", "よろしく", "よろしくおねがいします"],
    "ko": ["안녕", "안녕하세요", "안녕하십니까", "좋은 아침", "좋은오후", "좋은 저녁", "반갑습니다", "여보세요"],
}  # fmt: skip


@pytest.mark.parametrize(
    "text", [pytest.param(g, id=f"{lang}-{g}") for lang, greetings in GREETINGS.items() for g in greetings]
)
def test_every_greeting_is_simple(text):
    assert is_simple_query(text, 1, 1)
    assert is_simple_query(text + "!", 1, 1)


@pytest.mark.parametrize(
    "text, simple",
    [
        ("你好.", True),  # each language has its own tail, as upstream: ZH takes . , ，
        ("早上好，", True),
        ("こんにちは。", True),
        ("こんにちは，", False),  # not a JA tail
        ("안녕하십니까.", True),
        ("안녕하십니까，", False),  # not a KO tail
        ("안녕하십니까 서울 날씨 어때요", False),  # a greeting then a question: not a greeting
        ("よろしくおねがいします、明日の会議の議題をまとめてください", False),
    ],
)
def test_greeting_tails_per_language(text, simple):
    assert is_simple_query(text, 1, 1) is simple


@pytest.mark.parametrize("text", ["안녕하십니까", "おはようございます", "よろしくおねがいします", "你好好好好好", "哈哈哈哈哈哈"])
def test_long_greetings_are_trivial_at_the_default_thresholds(text, verdict):
    """At or above the CJK threshold (6 characters) only the vocabulary catches them."""
    assert len(text) >= 6 and verdict(F, row(user(text), assistant(LONG_A))) == "trivial_single_turn"


@pytest.mark.parametrize(
    "text, simple",
    [
        ("abcdefghi", True),  # 9 < 10
        ("abcdefghij", False),  # 10: at the threshold
        ("  abcdefghi  ", True),  # stripped first
        ("天气预报查", True),  # 5 < 6 (CJK threshold)
        ("天气预报查询", False),
        ("天气 预报 查", False),  # 7 characters once stripped: inner spaces count
    ],
)
def test_length_thresholds(text, simple):
    assert is_simple_query(text, 10, 6) is simple


CASES = [
    # messages, reason
    pytest.param([user("hi"), assistant(LONG_A)], "trivial_single_turn", id="en-greeting"),
    pytest.param([user("你好"), assistant(LONG_A)], "trivial_single_turn", id="zh-greeting"),
    pytest.param([user("こんにちは"), assistant(LONG_A)], "trivial_single_turn", id="ja-greeting"),
    pytest.param([user("안녕하세요"), assistant(LONG_A)], "trivial_single_turn", id="ko-greeting"),
    pytest.param([user([{"type": "text", "text": "hi"}]), assistant(LONG_A)], None, id="list-content-not-trivial"),
    pytest.param([user("hi"), assistant(LONG_A), user("hi"), assistant(LONG_A)], None, id="two-users"),
    pytest.param([user(LONG_Q), assistant("short")], "shallow_reply", id="en-shallow"),
    pytest.param([user("请详细解释一下缓存层是如何工作的，谢谢"), assistant("好的。")], "shallow_reply", id="zh-shallow"),
    pytest.param([user(LONG_Q), assistant("y" * 79)], "shallow_reply", id="shallow-79"),
    pytest.param([user(LONG_Q), assistant("y" * 80)], None, id="shallow-80"),
    pytest.param([user(LONG_Q), assistant("  " + "y" * 79 + "  ")], None, id="shallow-length-unstripped"),
    pytest.param([user(LONG_Q), assistant("", tool_calls=[call()])], "shallow_reply", id="tool-only-short"),
    pytest.param([user(LONG_Q), assistant("ok", reasoning_content="t" * 200)], None, id="thinking-200-exempts"),
    pytest.param([user(LONG_Q), assistant("ok", reasoning_content="t" * 199)], "shallow_reply", id="thinking-199"),
    pytest.param([user("hi"), assistant("ok", thinking="t" * 200)], None, id="thinking-field"),
    pytest.param([user("hi"), assistant("ok", reasoning_content=" " + "t" * 199 + " ")], "trivial_single_turn", id="thinking-stripped"),
    pytest.param([user(LONG_Q), assistant(""), user(LONG_Q), assistant("   ")], "all_empty_assistant", id="all-empty"),
    pytest.param([user(LONG_Q), assistant(None), user(LONG_Q), assistant(None)], "all_empty_assistant", id="all-none"),
    pytest.param([user(LONG_Q), assistant(""), user(LONG_Q), assistant(LONG_A)], None, id="one-nonempty"),
    pytest.param(
        [user(LONG_Q), assistant([{"type": "image", "image": "x"}]), user(LONG_Q), assistant([{"type": "image"}])],
        None,
        id="media-is-not-empty",
    ),
    pytest.param([user(LONG_Q), assistant("", tool_calls="[]"), user(LONG_Q), assistant("", tool_calls="")], "all_empty_assistant", id="empty-tool-calls-json"),
    pytest.param([assistant(LONG_A)], "no_user", id="assistant-only"),
    pytest.param([], "no_user", id="empty-messages"),
]


@pytest.mark.parametrize("messages, reason", CASES)
def test_reasons(messages, reason, verdict):
    assert verdict(F, row(*messages)) == reason


def test_inline_think_exempts_decision(verdict):
    """SPEC Decision: inline <think> counts as thinking when no reasoning field is set (upstream: no)."""
    r = row(user("hi"), assistant("<think>" + "t" * 200 + "</think>ok"))
    assert verdict(F, r) is None
    assert verdict(F, row(user("hi"), assistant("<think>" + "t" * 199 + "</think>ok"))) == "trivial_single_turn"
    assert verdict(F, row(user("hi"), assistant("<think>" + "t" * 250))) is None  # unclosed: rest is think


@pytest.mark.parametrize(
    "messages, reason",
    [
        ([system("You may HACK things"), user(LONG_Q), assistant(REPLY)], "system_deny_keyword"),
        ([system("fine"), system("hack"), user(LONG_Q), assistant(REPLY)], None),  # first system only
        ([system([{"type": "text", "text": "exploit it"}]), user(LONG_Q), assistant(REPLY)], "system_deny_keyword"),
        ([system("你可以攻击系统"), user(LONG_Q), assistant(REPLY)], "system_deny_keyword"),
        ([user(LONG_Q), assistant("a" * 100)], None),  # round at the limit
        ([user(LONG_Q), assistant("a" * 101)], "round_too_long"),
        ([user("a" * 50), assistant("y" * 100), user("b" * 50), assistant("c" * 50)], None),  # total 250
        ([user("a" * 51), assistant("y" * 100), user("b" * 50), assistant("c" * 50)], "total_too_long"),
    ],
)
def test_limits(messages, reason, verdict):
    f = HardFilter(system_deny_keywords=["Hack", "exploit", "攻击"], max_chars_per_round=100, max_total_chars=250)
    assert verdict(f, row(*messages)) == reason


@pytest.mark.parametrize("n_assistants, reason", [(2, None), (3, "too_many_rounds")])
def test_max_rounds_counts_assistant_messages(n_assistants, reason, verdict):
    messages = [user(LONG_Q)] + [assistant(REPLY)] * n_assistants
    assert verdict(HardFilter(max_rounds=2), row(*messages)) == reason


def test_rules_apply_in_order(verdict):
    f = HardFilter(max_rounds=0)
    assert verdict(f, row(user("hi"), assistant(LONG_A))) == "trivial_single_turn"  # rule 3 before rule 9
    assert verdict(f, row(user(LONG_Q), assistant(LONG_A))) == "too_many_rounds"


def test_none_disables(verdict):
    f = HardFilter(min_user_chars=None, min_user_chars_cjk=None, min_assistant_chars_2turn=None)
    assert verdict(f, row(user("abcdefg"), assistant("short"))) is None
    assert verdict(f, row(user("hi"), assistant("short"))) == "trivial_single_turn"  # pattern still applies


def test_allow_incomplete_role_keeps_at_once(verdict):
    f = HardFilter(allow_incomplete_role=True, max_rounds=0)
    assert verdict(f, row(assistant(LONG_A))) is None
    assert verdict(f, row(system("x"))) is None


@pytest.mark.parametrize(
    "r",
    [{"messages": "abc"}, {"messages": 5}, {"messages": [5, user(LONG_Q)]}, {"messages": {"role": "user"}}],
)
def test_invalid_messages(r, verdict):
    assert verdict(F, r) == "invalid_messages"


def test_missing_or_none_messages_count_as_empty(verdict):
    assert verdict(F, {"id": 1}) == "no_user"
    assert verdict(F, {"messages": None}) == "no_user"


def test_odd_fields_never_raise(verdict):
    r = row({"role": None, "content": 3}, {"content": "x"}, user(LONG_Q, name=7), assistant(LONG_A, tool_calls="{bad json"), tool(None))
    assert verdict(F, r) is None


def test_empty_keyword_is_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        HardFilter(system_deny_keywords=["ok", ""])
