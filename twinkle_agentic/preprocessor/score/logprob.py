"""Scorers on how much the context helps the model predict the answer: ``ChrMinScorer`` and ``SIFDScorer``.

Both read the per-token *delta*: the logprob of an answer token given context + answer prefix minus
its logprob given the answer prefix alone. A large positive delta means the context made the token
predictable (an easy, context-copied or memorised answer); deltas near zero mean the context did not
help (a hard answer, or noise). The filter fetches the logprobs once for every scorer that needs
them (``requires_logprobs``) and stores the deltas on each context.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .types import ScoreContext, Scorer, ScoreResult, unmeasured

#: exp() of more than this overflows a float; IFDs beyond it are equally meaningless.
_MAX_EXPONENT = 700.0


def answer_deltas(
    conditional: Sequence[float | None], unconditional: Sequence[float | None], n_prompt: int
) -> list[float | None]:
    """Per answer token: conditional minus unconditional logprob, None where either is missing.

    ``conditional`` covers prompt + answer, ``unconditional`` the answer alone (its first entry is
    None: the first token has no prefix).
    """
    n_answer = len(unconditional)
    if len(conditional) != n_prompt + n_answer:
        raise ValueError(
            f"conditional logprobs cover {len(conditional)} tokens, expected {n_prompt} prompt + "
            f"{n_answer} answer tokens"
        )
    out: list[float | None] = []
    for cond, uncond in zip(conditional[n_prompt:], unconditional, strict=True):
        out.append(None if cond is None or uncond is None else float(cond) - float(uncond))
    return out


def ifd(deltas: Sequence[float]) -> float:
    """Instruction-following difficulty: exp(-mean delta) = PPL(answer | context) / PPL(answer)."""
    return math.exp(min(-sum(deltas) / len(deltas), _MAX_EXPONENT))


def top_share(deltas: Sequence[float], share: float) -> list[float]:
    """The ``share`` of deltas with the largest magnitude (at least one)."""
    k = max(1, math.ceil(len(deltas) * share))
    return sorted(deltas, key=abs, reverse=True)[:k]


class ChrMinScorer(Scorer):
    """Score = share of distinct answer tokens whose *minimum* delta is positive.

    A high share means the context raised the probability of every occurrence of nearly every token:
    the answer is predictable from the context (easy). Rounds pass when the score is below
    ``threshold`` (low = hard = keep), or when it could not be measured.
    """

    name = "chr_min"
    requires_logprobs = True
    requires_backend = True

    def __init__(self, threshold: float = 0.47) -> None:
        super().__init__()
        self.threshold = threshold

    def score_one(self, ctx: ScoreContext) -> ScoreResult:
        minima: dict[int, float] = {}
        for token, delta in zip(ctx.asst_ids or [], ctx.deltas or [], strict=False):
            if delta is not None and (token not in minima or delta < minima[token]):
                minima[token] = delta
        if not minima:
            return unmeasured("no_logprobs")
        positive = sum(1 for d in minima.values() if d > 0)
        score = positive / len(minima)
        return ScoreResult(score, score < self.threshold, {"n_distinct": len(minima), "n_positive": positive})

    def score_batch(self, contexts: list[ScoreContext]) -> list[ScoreResult]:
        return [self.score_one(ctx) for ctx in contexts]

    def __repr__(self) -> str:
        return f"ChrMinScorer(threshold={self.threshold})"


class SIFDScorer(Scorer):
    """Score = IFD = exp(-mean delta); ``s_ifd_50``/``s_ifd_75`` use the top 50 %/75 % of tokens by |delta|.

    IFD near 1 means the context barely helps (hard); far below 1 means the answer follows from the
    context (easy). Observe-only unless ``ifd_threshold`` is set; then rounds pass when
    ``ifd >= ifd_threshold``.
    """

    name = "sifd"
    requires_logprobs = True
    requires_backend = True

    def __init__(self, ifd_threshold: float | None = None) -> None:
        super().__init__()
        self.ifd_threshold = ifd_threshold

    def score_one(self, ctx: ScoreContext) -> ScoreResult:
        deltas = [d for d in ctx.deltas or [] if d is not None]
        if not deltas:
            return unmeasured("no_logprobs")
        score = ifd(deltas)
        extras = {
            "n_tokens": len(deltas),
            "mean_delta": sum(deltas) / len(deltas),
            "s_ifd_50": ifd(top_share(deltas, 0.5)),
            "s_ifd_75": ifd(top_share(deltas, 0.75)),
        }
        passed = self.ifd_threshold is None or score >= self.ifd_threshold
        return ScoreResult(score, passed, extras)

    def score_batch(self, contexts: list[ScoreContext]) -> list[ScoreResult]:
        return [self.score_one(ctx) for ctx in contexts]

    def __repr__(self) -> str:
        return f"SIFDScorer(ifd_threshold={self.ifd_threshold})"
