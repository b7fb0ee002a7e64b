"""``CharStatsScorer``: character-level health of an answer, no model needed (the default scorer)."""

from __future__ import annotations

from .types import ScoreContext, Scorer, ScoreResult


def longest_run(text: str) -> int:
    """Length of the longest run of one repeated non-whitespace character."""
    best = run = 0
    previous = ""
    for ch in text:
        if ch.isspace():
            previous, run = "", 0
            continue
        run = run + 1 if ch == previous else 1
        previous = ch
        best = max(best, run)
    return best


def char_stats(text: str) -> dict[str, float | int]:
    """Metrics of a think-stripped answer: sizes, word-character share, longest run, line variety."""
    chars = [ch for ch in text if not ch.isspace()]
    n_chars = len(chars)
    # str.isalnum covers letters of every script, CJK ideographs, kana, Hangul and digits.
    n_word = sum(1 for ch in chars if ch.isalnum())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return {
        "n_chars": n_chars,
        "alnum_ratio": n_word / n_chars if n_chars else 0.0,
        "max_char_run": longest_run(text),
        "n_lines": len(lines),
        "distinct_line_ratio": len(set(lines)) / len(lines) if lines else 1.0,
    }


class CharStatsScorer(Scorer):
    """Score = share of letters, digits and CJK among non-space characters (think blocks removed).

    A round passes when it has at least ``min_chars`` characters, that share is at least
    ``min_alnum_ratio``, no character repeats ``max_char_run`` times in a row, and (with
    ``min_lines_for_distinct`` or more lines) at least ``min_distinct_line_ratio`` of its lines are
    distinct. ``None`` disables a check.
    """

    name = "char_stats"

    def __init__(
        self,
        min_chars: int | None = 1,
        min_alnum_ratio: float | None = 0.25,
        max_char_run: int | None = 64,
        min_distinct_line_ratio: float | None = 0.3,
        min_lines_for_distinct: int = 8,
    ) -> None:
        super().__init__()
        self.min_chars = min_chars
        self.min_alnum_ratio = min_alnum_ratio
        self.max_char_run = max_char_run
        self.min_distinct_line_ratio = min_distinct_line_ratio
        self.min_lines_for_distinct = min_lines_for_distinct

    def passes(self, stats: dict[str, float | int]) -> bool:
        if self.min_chars is not None and stats["n_chars"] < self.min_chars:
            return False
        if self.min_alnum_ratio is not None and stats["alnum_ratio"] < self.min_alnum_ratio:
            return False
        if self.max_char_run is not None and stats["max_char_run"] >= self.max_char_run:
            return False
        return not (
            self.min_distinct_line_ratio is not None
            and stats["n_lines"] >= self.min_lines_for_distinct
            and stats["distinct_line_ratio"] < self.min_distinct_line_ratio
        )

    def score_batch(self, contexts: list[ScoreContext]) -> list[ScoreResult]:
        results = []
        for ctx in contexts:
            stats = char_stats(ctx.answer)
            results.append(ScoreResult(float(stats["alnum_ratio"]), self.passes(stats), dict(stats)))
        return results
