"""Settings of near-duplicate removal, checked once when the step is built.

The LSH banding (``bands`` x ``rows`` of the ``num_perm`` MinHash values) decides which pairs are
compared at all; when it is not given it is derived from ``threshold`` so that pairs at the threshold
become candidates with high probability while unrelated pairs rarely do.
"""

from __future__ import annotations

from dataclasses import dataclass

from twinkle_agentic.errors import ConfigError

TURNS = ("all", "user", "assistant")
# Default Jaccard threshold on word 3-shingles: chosen by bench/near_dedup.py (docs/bench/near_dedup.md).
DEFAULT_THRESHOLD = 0.5
DEFAULT_SHINGLE_WORDS = 3
DEFAULT_NUM_PERM = 128
# How much a missed candidate weighs against a needless one when bands are derived: a miss loses a
# duplicate for good, a needless candidate only costs one exact check.
MISS_WEIGHT = 0.8


class NearDedupConfigError(ConfigError):
    """A NearDedupFilter setting was refused: the message names it and the accepted values."""


@dataclass(frozen=True)
class NearDedupConfig:
    """What to shingle and how to compare. ``turns``: ``all``, ``user`` or ``assistant`` messages;
    ``max_turns``: only the first N of those (None: every one); ``shingle_words``: words per shingle;
    ``num_perm``: MinHash values per row; ``bands``/``rows``: the LSH banding (both or neither);
    ``threshold``: the Jaccard similarity of shingle sets from which a pair is a near-duplicate;
    ``seed``: of the MinHash permutations."""

    turns: str = "all"
    max_turns: int | None = None
    shingle_words: int = DEFAULT_SHINGLE_WORDS
    num_perm: int = DEFAULT_NUM_PERM
    bands: int | None = None
    rows: int | None = None
    threshold: float = DEFAULT_THRESHOLD
    seed: int = 0

    def __post_init__(self) -> None:
        if self.turns not in TURNS:
            raise NearDedupConfigError(f"NearDedupFilter: turns must be one of {TURNS}, got {self.turns!r}")
        _check_int("max_turns", self.max_turns, 1, optional=True)
        _check_int("shingle_words", self.shingle_words, 1)
        _check_int("num_perm", self.num_perm, 2)
        _check_int("bands", self.bands, 1, optional=True)
        _check_int("rows", self.rows, 1, optional=True)
        _check_int("seed", self.seed, 0)
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)):
            raise NearDedupConfigError(f"NearDedupFilter: threshold must be a number, got {self.threshold!r}")
        if not 0.0 < float(self.threshold) <= 1.0:
            raise NearDedupConfigError(
                f"NearDedupFilter: threshold must be in (0, 1], got {self.threshold!r}"
            )
        if (self.bands is None) != (self.rows is None):
            raise NearDedupConfigError(
                "NearDedupFilter: give both bands and rows, or neither (they are then derived from threshold)"
            )
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise NearDedupConfigError(
                f"NearDedupFilter: bands x rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}; "
                "lower one of them or raise num_perm"
            )

    def banding(self) -> tuple[int, int]:
        """(bands, rows per band): as given, or derived from the threshold."""
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        return derive_banding(float(self.threshold), self.num_perm)


def _check_int(label: str, value: object, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        extra = " or null" if optional else ""
        raise NearDedupConfigError(f"NearDedupFilter: {label} must be an int >= {minimum}{extra}, got {value!r}")


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """Probability that a pair of this Jaccard similarity shares at least one band."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def derive_banding(threshold: float, num_perm: int) -> tuple[int, int]:
    """The (bands, rows) with bands x rows <= num_perm that minimise the weighted area of misses
    above the threshold and needless candidates below it."""
    import numpy as np

    below = np.linspace(0.0, threshold, 201)
    above = np.linspace(threshold, 1.0, 201)
    best: tuple[float, int, int] | None = None
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        false_pos = float(np.trapezoid(1 - (1 - below**rows) ** bands, below))
        false_neg = float(np.trapezoid((1 - above**rows) ** bands, above))
        cost = (1 - MISS_WEIGHT) * false_pos + MISS_WEIGHT * false_neg
        if best is None or cost < best[0]:
            best = (cost, bands, rows)
    assert best is not None
    return best[1], best[2]
