import pytest

from twinkle_agentic.preprocessor.score import CharStatsScorer, ScoreContext
from twinkle_agentic.preprocessor.score.char_stats import char_stats, longest_run


def ctx(answer: str) -> ScoreContext:
    return ScoreContext(0, "r", 1, "other", [{"role": "user", "content": "q"}], answer, {})


CASES = [
    ("Paris is the capital of France.", True),
    ("巴黎是法国的首都。", True),
    ("print(sum(range(10)))", True),
    ("!!! ??? ... --- ***", False),  # no word characters
    ("a" * 63, True),  # longest run 63 < 64
    ("a" * 64, False),
    ("x = 1\n" + "=" * 80, False),  # an 80-character divider line is a 64+ run
    ("\n".join(["same line"] * 8), False),  # 8 lines, 1 distinct: ratio 0.125
    ("\n".join(["same line"] * 7), True),  # under 8 lines: no line check
    ("\n".join([f"line {i % 3}" for i in range(10)]), True),  # 3/10 distinct = 0.3 passes
    ("\n".join([f"line {i % 2}" for i in range(10)]), False),  # 2/10 distinct
]


@pytest.mark.parametrize("answer, passed", CASES)
def test_pass_rule(answer, passed):
    (result,) = CharStatsScorer().score_batch([ctx(answer)])
    assert result.passed is passed
    assert set(result.extras) == {"n_chars", "alnum_ratio", "max_char_run", "n_lines", "distinct_line_ratio"}
    assert result.score == result.extras["alnum_ratio"]


def test_metrics():
    stats = char_stats("ab 12 !!\n中文")
    assert stats["n_chars"] == 8
    assert stats["alnum_ratio"] == pytest.approx(6 / 8)
    assert stats["n_lines"] == 2
    assert longest_run("aa bbb  a") == 3  # whitespace breaks runs and never counts


def test_thresholds_can_be_disabled():
    scorer = CharStatsScorer(min_alnum_ratio=None, max_char_run=None)
    assert [r.passed for r in scorer.score_batch([ctx("!!!!"), ctx("a" * 100)])] == [True, True]
