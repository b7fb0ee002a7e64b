"""IntentClassifier detectors: upstream-aligned vocabularies, and the RE2 batch path against ``re``."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.preprocessor_rows import assistant, row, user
from twinkle_agentic.preprocessor import IntentClassifier
from twinkle_agentic.preprocessor.intent import (
    CodeDetector,
    ComplexLogicDetector,
    MathDetector,
    RegexDetector,
    UserDissatisfactionDetector,
    default_detectors,
)
from twinkle_agentic.preprocessor.re2_batch import TextBatch, glued_probe, to_re2


def hits(detector, text: str) -> int:
    return sum(1 for _ in detector.pattern.finditer(text))


# --- vocabularies (facts probed on upstream twinkle-kit 0.5.1) --------------------------------


@pytest.mark.parametrize(
    "text, n",
    [
        ("from from from cost", 3),  # the name after a keyword is not consumed
        ("function function function", 2),
        ("from  aa from\taa", 0),  # exactly one space
        ("From aa Function bb", 0),  # case-sensitive
        ("if (a) if(b) if ( c)", 1),
        ("println x console.log y", 2),
        ("def f(x) {", 2),  # keyword and name(...) { both count
        ("1(a) { 中(b) {", 0),  # a name starts with an ASCII letter or underscore
        ("a中(x) {", 1),
        ("x => { y -> int", 2),
    ],
)
def test_code_keywords(text, n):
    assert hits(CodeDetector(), text) == n


@pytest.mark.parametrize(
    "text, n",
    [
        ("vector vector.", 2),
        ("Vector vectors vectorial", 0),  # case-sensitive whole words
        ("$\\frac \\sum \\int \\pi$", 1),  # a LaTeX span consumes what is inside it
        ("\\fracx \\subset \\subsetx", 2),
        ("x_{a} _{a} x^{} x_1", 1),
        ("a=3 a =- 3 x = -3", 2),
        ("1+2=3 1^2=3 1+2=-3", 1),
        ("1, 2, 3, 4, 5, 6, 7, 8", 2),
        ("一元二次方程 等差数列 合数", 4),
        ("αβγδ ∪∩", 4),
    ],
)
def test_math_patterns(text, n):
    assert hits(MathDetector(), text) == n


def test_code_fence_needs_ten_characters_inside():
    d = CodeDetector()
    assert d.judge("```\n12345678\n```") and d.judge("```abc``` and ```defghijk```")
    assert not d.judge("```12345678```")


@pytest.mark.parametrize(
    "text, n",
    [
        ("首先一二三四其次首先一二三四其次", 1),  # greedy and unbounded, as upstream
        ("首先一二其次", 0),
        ("如果加，那么 如果加那么", 1),
        ("If it rains, Then; if a then", 1),
        ("Firstly, overall, trade-offs, tradeoff", 4),
        ("on  the other hand", 0),
    ],
)
def test_logic_markers(text, n):
    assert hits(ComplexLogicDetector(), text) == n


@pytest.mark.parametrize(
    "text, complains",
    [
        ("That's WRONG", True),
        ("wrongly", False),
        ("come onto", True),
        ("重新回答", True),
        ("違います", False),
    ],
)
def test_dissatisfaction(text, complains):
    messages = [user("q"), assistant("a"), user(text), assistant("b")]
    assert UserDissatisfactionDetector()(messages) == ([3] if complains else [])


def test_think_blocks_are_scanned_like_upstream():
    assert CodeDetector()([user("q"), assistant("<think>from a from b from c</think>ok")]) == [1]


# --- RE2 batch path == re path ----------------------------------------------------------------


def test_to_re2_translation():
    assert to_re2(r"\bfrom (?=\w)").startswith(r"\bfrom (?:\b|")
    assert to_re2(r"\d+\s*\w") == r"\p{Nd}+" + to_re2(r"\s") + r"*[\pL\pN_]"
    assert to_re2(r"\\w") == r"\\w"  # an escaped backslash followed by w is not \w
    with pytest.raises(ValueError, match="look-behind"):
        to_re2(r"(?<=a)b")
    with pytest.raises(ValueError, match="character class"):
        to_re2(r"[\w-]")


def test_junctions_where_re2_word_boundaries_differ():
    texts = ["用vector", "中 vector", "vector中", "café", "plain ascii"]
    assert TextBatch(texts).junctions() == {0: ([1], []), 2: ([], [6]), 3: ([], [3])}


def test_a_boundary_right_after_a_match_is_judged_as_re_does():
    """Arrow's count restarts where a match ended without the text before it, so ``\\bvector``
    right after ``\\frac`` counted as a fourth hit; such texts are recounted with ``re``."""
    texts = ["vector$x$\\fracvector", "vector$x$\\frac vector"]
    detector = MathDetector()
    detector.re2_min_chars = 0  # always the RE2 path
    assert detector.judge_many(TextBatch(texts)) == [False, True] == [detector.judge(t) for t in texts]
    # the engine's behaviour, for the record: "ab" counts 2 where re counts 1
    assert TextBatch(["ab", "a b", "b"]).counts(r"a|\bb") == [2, 2, 1]
    assert TextBatch(["ab", "a b", "b"]).matching(glued_probe([r"\bb"])) == [0]


PIECES = [
    "vector", "Vector", "from ", "def ", "f(x) {", "if (", "=> {", "-> int", "println", "$x$", "\\frac",
    "x_{i}", "a=3", "1+2=3", "1, 2, 3, 4", "向量", "方程", "α", "²", "首先", "其次", "如果", "，那么",
    "therefore", "first", "if it ", " then", "wrong", "重新", "用", "中", "é", " ", "\n", "\u3000", ".",
    "\u00a0", "```", "0123456789",
]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PIECES), max_size=40).map("".join), min_size=1, max_size=8))
def test_batch_verdicts_equal_re_verdicts(texts):
    batch = TextBatch(texts)
    for detector in default_detectors():
        if hasattr(detector, "judge_many"):
            detector.re2_min_chars = 0  # always the RE2 path
            assert detector.judge_many(batch) == [detector.judge(t) for t in texts], detector


def test_classifier_batch_equals_per_row():
    rows = [
        row(user("用vector算" * 50), assistant("vector vector vector vector " * 30)),
        row(user("q"), assistant("from a from b from c " * 100)),
        row(user("q"), assistant("首先考虑一下；其次，如果加，那么。因为限，所以权衡综上优缺点" * 20)),
        row(user("q"), assistant("ok"), user("that is wrong " * 100), assistant("fixed")),
    ]
    c = IntentClassifier()
    assert [c.classify(r["messages"]) for r in rows] == c.classify_many([r["messages"] for r in rows])
    assert [out["intent"] for out in c(rows)[0]] == ["math", "code", "complex_logic", "user_dissatisfaction"]


def test_custom_regex_detector_with_its_own_pattern_uses_re():
    class Banana(RegexDetector):
        intent = "banana"
        pattern = re.compile(r"\bbanana\b")

        def __init__(self):
            super().__init__(2)

    rows = [row(user("q"), assistant("banana banana " * 500))] * 3
    kept, _ = IntentClassifier(detectors=[Banana(), CodeDetector()])(rows)
    assert [r["intent"] for r in kept] == ["banana"] * 3 and Banana.re2_pattern is None
