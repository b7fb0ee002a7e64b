import math

import pytest

from twinkle_agentic.preprocessor.score import ChrMinScorer, ScoreContext, SIFDScorer
from twinkle_agentic.preprocessor.score.logprob import answer_deltas, ifd, top_share


def ctx(asst_ids, deltas) -> ScoreContext:
    c = ScoreContext(0, "r", 1, "other", [{"role": "user", "content": "q"}], "answer", {})
    c.asst_ids, c.deltas = asst_ids, deltas
    return c


def test_deltas_align_with_answer_and_skip_missing():
    conditional = [None, -1.0, -2.0, -0.5, None, -0.25]  # 3 prompt tokens, 3 answer tokens
    unconditional = [None, -3.0, -1.0]
    assert answer_deltas(conditional, unconditional, 3) == [None, None, 0.75]
    conditional = [None, -1.0, -0.5, -0.1, -0.2]
    assert answer_deltas(conditional, [None, -2.0, -0.3], 2) == [None, pytest.approx(1.9), pytest.approx(0.1)]


def test_deltas_reject_misaligned_logprobs():
    with pytest.raises(ValueError, match="expected 2 prompt"):
        answer_deltas([None, -1.0], [None, -1.0], 2)


def test_chr_min_uses_each_token_minimum():
    # token 7 occurs twice: +2.0 and -0.1, its minimum is negative; token 8: +1; token 9: only None.
    (r,) = ChrMinScorer().score_batch([ctx([7, 8, 7, 9], [2.0, 1.0, -0.1, None])])
    assert r.score == pytest.approx(0.5)  # minima {7: -0.1, 8: 1.0}
    assert r.extras == {"n_distinct": 2, "n_positive": 1}
    assert r.passed is False  # 0.5 >= 0.47: easy, dropped
    (r,) = ChrMinScorer(threshold=0.6).score_batch([ctx([7, 8, 7, 9], [2.0, 1.0, -0.1, None])])
    assert r.passed is True


def test_chr_min_without_logprobs_passes_unmeasured():
    (r,) = ChrMinScorer().score_batch([ctx([1, 2], [None, None])])
    assert r.score is None and r.passed is True and r.extras["skipped"] == "no_logprobs"


def test_sifd_formulas():
    deltas = [None, 2.0, -1.0, 0.5, 0.1]
    (r,) = SIFDScorer().score_batch([ctx([1, 2, 3, 4, 5], deltas)])
    values = [2.0, -1.0, 0.5, 0.1]
    assert r.score == pytest.approx(math.exp(-sum(values) / 4))
    assert r.extras["n_tokens"] == 4
    assert r.extras["mean_delta"] == pytest.approx(0.4)
    assert r.extras["s_ifd_50"] == pytest.approx(math.exp(-(2.0 - 1.0) / 2))  # top 2 by |delta|
    assert r.extras["s_ifd_75"] == pytest.approx(math.exp(-(2.0 - 1.0 + 0.5) / 3))
    assert r.passed is True  # observe-only by default


def test_sifd_threshold_keeps_hard_rounds():
    easy, hard = ctx([1, 2], [None, 3.0]), ctx([1, 2], [None, 0.0])
    results = SIFDScorer(ifd_threshold=0.5).score_batch([easy, hard])
    assert [r.passed for r in results] == [False, True]


def test_ifd_helpers():
    assert ifd([0.0]) == 1.0
    assert ifd([-1000.0]) == math.exp(700)  # clamped instead of overflowing
    assert top_share([0.1, -5, 2], 0.5) == [-5, 2]
