"""RefuseFilter: refusals per language, near misses, window and scope."""

from __future__ import annotations

import pytest

from tests.support.preprocessor_rows import LONG_Q, assistant, row, user
from twinkle_agentic.preprocessor import RefuseFilter
from twinkle_agentic.preprocessor.refuse import is_refusal

F = RefuseFilter()

CASES = [
    # EN core: I/we + modal (<= 25 chars) + task verb (<= 60 chars)
    ("I can't help with that.", True),
    ("We cannot provide this information.", True),
    ("I am unable to assist with your request.", True),
    ("I really won't generate that.", True),
    ("I must decline to answer.", True),
    ("I am not allowed to discuss it.", True),
    ("I'm not able to help.", False),  # upstream's modal list needs "am/are"
    ("I can’t help", False),  # curly apostrophe is not in the vocabulary
    ("I cannot stress enough how important this is.", False),
    ("I cannot find the bug in your code.", False),
    ("He can't help you with that.", False),
    ("I " + "x" * 29 + " cannot help", False),  # modal more than 25 characters after I
    ("I cannot " + "y" * 55 + " help", True),
    ("I cannot " + "y" * 60 + " help", False),
    # apology / policy / standalone / AI identity
    ("I'm sorry, but I can't do that.", True),
    ("Unfortunately, that is not appropriate here.", True),
    ("Sorry, I cannot.", False),  # "sorry" alone is not one of upstream's apology forms
    ("This request violates our usage policy.", True),
    ("That question is inappropriate.", True),
    ("The topic is allowed here.", False),
    ("We have to refuse.", True),
    ("This falls outside what I can do.", True),
    ("As an AI, I cannot answer that.", True),
    # ZH
    ("非常抱歉，我无法回答这个问题。", True),
    ("对不起，这个我不能做。", True),
    ("我无法回答这个问题。", True),
    ("我目前无法回答。", False),  # the inability word must follow 我 directly
    ("您的请求违反了使用规定。", True),
    ("这个话题超出了我的能力范围。", True),
    ("我可以帮你完成这个任务。", False),
    # JA
    ("恐れ入りますが、そのご依頼には対応できません。", True),
    ("その質問にはお答えすることはできません。", True),
    ("ご要望にはお応えできません。", True),
    ("このリクエストはお断りします。", True),
    ("この質問に答えます。", False),
    # KO
    ("죄송하지만 도와드릴 수 없습니다.", True),
    ("해당 내용은 답변드리기 어렵습니다.", True),
    ("요청을 거절합니다.", True),
    ("요청을 처리했습니다.", False),
]


@pytest.mark.parametrize("text, refused", CASES)
def test_patterns(text, refused):
    assert is_refusal(text) is refused


def test_window_boundary():
    text = "x" * 590 + " I can't help."
    assert is_refusal(text, 605)
    assert not is_refusal(text, 600)
    assert not is_refusal("I can't help.", 0)


def test_only_first_assistant_reply_counts(verdict):
    assert verdict(F, row(user(LONG_Q), assistant("Sure, here it is."), user(LONG_Q), assistant("I can't help with that."))) is None
    assert verdict(F, row(user(LONG_Q), assistant("I can't help with that."), user(LONG_Q), assistant("Sure."))) == "refusal"


def test_think_is_removed(verdict):
    assert verdict(F, row(user(LONG_Q), assistant("<think>I can't help with that.</think>Sure, here it is."))) is None


def test_list_content_joined_with_space_decision(verdict):
    """SPEC Decision: text parts are joined with one space (upstream joins with none)."""
    parts = [{"type": "text", "text": "I can't"}, {"type": "text", "text": "help you."}]
    assert verdict(F, row(user(LONG_Q), assistant(parts))) == "refusal"


def test_empty_and_missing(verdict):
    assert verdict(F, row(user(LONG_Q))) is None
    assert verdict(F, row(user(LONG_Q), assistant(None))) is None
    assert verdict(F, {"messages": 3}) == "invalid_messages"
