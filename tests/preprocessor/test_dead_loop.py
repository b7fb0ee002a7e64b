"""DeadLoopFilter: markers per language, the three checks at their boundaries, SPEC Decisions."""

from __future__ import annotations

import random

import pytest

from tests.support.preprocessor_rows import LONG_Q, assistant, call, row, tool, user
from twinkle_agentic.preprocessor import DeadLoopFilter
from twinkle_agentic.preprocessor.dead_loop import (
    HESITATION_RES,
    has_cascade,
    hesitation_count,
    high_repetition,
)

F = DeadLoopFilter()
WORDS = [f"word{i}" for i in range(400)]


def prose(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


@pytest.mark.parametrize(
    "text, count",
    [
        ("Wait, no", 1),
        ("wait...ok", 1),
        ("wait... ok", 0),  # dots must run into the next word
        ("waitwait", 0),  # a separator is required
        ("but wait", 1),
        ("hmm", 1),
        ("hm", 0),
        ("uhm", 1),
        ("actually, I was", 1),
        ("no, actually this", 1),
        ("Let me re-think", 1),
        ("Ill redo this", 1),
        ("I'm going in circles", 1),
        ("This is getting messy", 1),
        ("I keep making the same error", 1),
        ("I made the mistake again", 0),
        ("waiting for the await", 0),
        ("等等，", 1),
        ("哦等等", 1),
        ("等一下", 0),
        ("嗯", 0),
        ("嗯嗯", 1),
        ("不不不", 1),
        ("不对，重新", 1),
        ("错了，让我", 1),
        ("错了…让我", 0),
        ("我又犯了错", 1),
        ("一直出错", 1),
        ("ちょっと待って", 1),
        ("えっとえっと", 2),
        ("うーーん", 0),
        ("あれ、また", 1),
        ("あれ…また", 0),
        ("잠깐만요", 1),
        ("음음", 1),
        ("어...", 1),
        ("헷갈리네", 1),
        ("계속 틀리", 1),
    ],
)
def test_hesitation_markers(text, count):
    assert hesitation_count(text) == count


@pytest.mark.parametrize("word", ["어떻게", "다음", "음식", "마음", "영어", "잠깐 동안"])
def test_korean_fillers_inside_words_do_not_count(word):
    """SPEC Decision: upstream's 음+/어+/잠깐 fire on ordinary words."""
    assert hesitation_count(f"{word} 문제를 풀어 봅시다.") == 0


def test_anchor_bound_never_hides_markers():
    """The anchor bound must be an upper bound: with any limit the early answer agrees with the exact count."""
    rng = random.Random(7)
    snippets = ["Wait, no", "hmm", "actually no", "let me try again", "I'm lost here", "this is getting messy", "I keep getting error", "等等", "嗯嗯", "不对，重新", "我有点乱", "えっと", "うーん", "음음", "잠깐만", "plain text", "普通的句子。", "İ'm lost here", "WAİT, no"]
    for _ in range(400):
        text = " ".join(rng.choice(snippets) for _ in range(rng.randint(1, 12)))
        exact = hesitation_count(text)
        for limit in (0, 0.5, 1, 2, 5):
            assert (hesitation_count(text, limit) > limit) == (exact > limit), text
    assert len(HESITATION_RES) == 4  # one combined regex per language vocabulary


def stuck_response(text: str) -> str | None:
    return DeadLoopFilter().reason(row(user(LONG_Q), assistant(text)))


def test_density_boundary():
    # 1 marker per 142 characters is 7.04 per 1000 (> 7); per 143 characters 6.99.
    body = "hmm " + "x" * 138
    assert len(body) == 142
    assert stuck_response(body) == "dead_loop"
    assert stuck_response(body + "x") is None

    # exactly at the threshold (1 marker in 100 characters = 10.0 per 1000) is not above it
    f = DeadLoopFilter(hesitation_density_threshold=10.0)
    assert not f.segment_stuck("hmm " + "x" * 96, f.response)
    assert f.segment_stuck("hmm " + "x" * 95, f.response)


@pytest.mark.parametrize("gap, stuck", [(800, True), (801, False)])
def test_cascade_window_boundary(gap, stuck):
    text = "wait" + " " * (gap - 4) + "wait"
    assert has_cascade(text, 2, 800) is stuck


@pytest.mark.parametrize("n, stuck", [(4, False), (5, True)])
def test_cascade_threshold(n, stuck):
    text = " ".join(["actually"] * n) + " " + prose(400)
    assert has_cascade(text, 5, 800) is stuck


def test_cascade_markers():
    assert has_cascade("no wait no wait", 2, 800)
    assert not has_cascade("no wait no wait", 3, 800)  # "no wait" is one marker
    assert not has_cascade("let me let me let me", 1, 800)
    assert has_cascade("等等不对重新错了嗯嗯", 5, 800)


@pytest.mark.parametrize("n_words, repeated", [(29, False), (30, True)])
def test_repetition_min_words(n_words, repeated):
    assert high_repetition(" ".join(["a"] * n_words), 0.45, 8, 30) is repeated


def test_repetition_ratio_boundary():
    base = WORDS[:100]
    # 100 distinct words followed by the first k again: ratio = k_dup / (n - 7)
    low = " ".join(base + base[:40])  # ratio 0.34
    high = " ".join(base + base[:90])  # ratio 0.46
    assert not high_repetition(low, 0.45, 8, 30)
    assert high_repetition(high, 0.45, 8, 30)
    assert not high_repetition(high, 0.65, 8, 30)


def test_repetition_is_case_and_punctuation_sensitive():
    rng = random.Random(0)
    assert not high_repetition(" ".join(rng.choice(["a", "A"]) for _ in range(60)), 0.45, 8, 30)
    assert not high_repetition(" ".join(rng.choice(["a", "a,", "a.", "(a)"]) for _ in range(60)), 0.45, 8, 30)


def test_cjk_repetition_counts_characters():
    assert not high_repetition("一" * 239, 0.45, 8, 30)  # 30 x 8 characters needed
    assert high_repetition("一" * 240, 0.45, 8, 30)
    assert high_repetition(" ".join("一" * 240), 0.45, 8, 30)  # whitespace removed


def test_think_profile_is_laxer():
    # ~10 markers per 1000 characters: above 7 (response), below 15 (think)
    body = "".join("hmm " + prose(20, seed) + " " for seed in range(5))
    assert stuck_response(body) == "dead_loop"
    assert stuck_response(f"<think>{body}</think>{prose(40, 10)}") is None
    assert DeadLoopFilter().reason(row(user(LONG_Q), assistant(prose(40, 1), reasoning_content=body))) is None


def test_pre_think_text_is_response_decision():
    """SPEC Decision: text before <think> is response (upstream ignores it)."""
    body = "".join("hmm " + prose(20, seed) + " " for seed in range(5))
    assert stuck_response(f"{body}<think>fine</think>done") == "dead_loop"


def test_repeated_sentence_drops():
    assert stuck_response("The answer is that we compute the value again and again. " * 10) == "dead_loop"


def agent_row(*texts: str):
    messages = [user(LONG_Q)]
    for i, t in enumerate(texts):
        messages += [assistant(t, tool_calls=[call(call_id=f"c{i}")]), tool("result", f"c{i}")]
    messages.append(assistant(prose(50, 9)))
    return row(*messages)


def test_agent_rows_decision():
    """SPEC Decision: agent rows are scanned and drop only with >= 2 stuck turns."""
    stuck = "Wait, no. Hmm. Actually no. " * 4
    assert F.reason(agent_row(stuck, prose(30))) is None
    assert F.reason(agent_row(stuck, stuck)) == "dead_loop"
    assert DeadLoopFilter(scan_agent_rows=False).reason(agent_row(stuck, stuck)) is None
    assert DeadLoopFilter(agent_min_stuck_turns=1).reason(agent_row(stuck, prose(30))) == "dead_loop"


def test_rows_without_assistant_and_invalid(verdict):
    assert verdict(F, row(user("Wait, no. Hmm."))) is None
    assert verdict(F, {"messages": "x"}) == "invalid_messages"
    assert verdict(F, {"messages": None}) is None
    assert verdict(F, row(user(LONG_Q), assistant(None), assistant([{"type": "text", "text": "hmm"}]))) == "dead_loop"


def test_none_disables_checks():
    f = DeadLoopFilter(hesitation_density_threshold=None, cascade_threshold=None, repetition_threshold=None)
    assert f.reason(row(user(LONG_Q), assistant("hmm hmm hmm " * 20))) is None


def test_bad_thresholds_are_rejected():
    with pytest.raises(ValueError, match="cascade_threshold"):
        DeadLoopFilter(cascade_threshold=0)
