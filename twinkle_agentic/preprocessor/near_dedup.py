"""Near-duplicate removal: MinHash over normalised word shingles, LSH banding, exact verification.

``NearDedupFilter`` is a global step, like ``DedupFilter``: in one process it must see every row at
once; in the preprocess job its banding is a distributed exchange (``jobs/preprocess/near_exchange``)
that applies the same rule (:mod:`.near_dedup_select`) to the same features (:meth:`features`).
A dropped row has reason ``near_duplicate`` and names the kept row it duplicates under
``near_duplicate_of``: ``{"source", "line"}`` where the row's origin is known (the job and
``run_pipeline``), else ``{"index"}``, its position in the rows given.
"""

from __future__ import annotations

from typing import Any

from .base import INVALID_ROW, drop
from .batch import gc_paused, to_rows
from .near_dedup_config import DEFAULT_NUM_PERM, DEFAULT_SHINGLE_WORDS, DEFAULT_THRESHOLD, NearDedupConfig
from .near_dedup_minhash import band_keys, permutations, signature
from .near_dedup_select import RowFeatures, conversation_length, near_parents, set_digest
from .near_dedup_text import conversation_words, shingle_set

NEAR_DUPLICATE = "near_duplicate"
# The key under which a dropped row names the row it duplicates.
DUPLICATE_OF_KEY = "near_duplicate_of"
# run_pipeline puts each row's [source, line] under this key while the steps run, so the filter can
# name kept rows by their origin as the job does; it is removed before rows are returned.
ORIGIN_KEY = "__twinkle_origin__"


class NearDedupFilter:
    """Drops conversations whose chosen turns nearly repeat a longer (or earlier) conversation's.

    See :class:`NearDedupConfig` for the settings. Kept rows stay in input order; non-dict rows are
    dropped as ``invalid_row``.
    """

    name = "NearDedupFilter"

    def __init__(
        self,
        turns: str = "all",
        max_turns: int | None = None,
        shingle_words: int = DEFAULT_SHINGLE_WORDS,
        num_perm: int = DEFAULT_NUM_PERM,
        bands: int | None = None,
        rows: int | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        seed: int = 0,
    ):
        self.config = NearDedupConfig(turns, max_turns, shingle_words, num_perm, bands, rows, threshold, seed)
        self.bands, self.rows = self.config.banding()
        self._perms: Any = None

    @property
    def threshold(self) -> float:
        return float(self.config.threshold)

    def __getstate__(self) -> dict:  # the permutations are rebuilt from the seed where it runs
        return {**self.__dict__, "_perms": None}

    def features(self, row: dict, cache: dict[str, int] | None = None) -> RowFeatures | None:
        """Shingles, band keys and length of a row; None when its chosen turns hold no word."""
        shingles = self.shingles(row, cache)
        if shingles is None:
            return None
        cfg = self.config
        if self._perms is None:
            self._perms = permutations(cfg.num_perm, cfg.seed)
        keys = band_keys(signature(shingles, self._perms), self.bands, self.rows)
        count, chars = conversation_length(row.get("messages"))
        return RowFeatures(shingles, keys, count, chars, set_digest(shingles))

    def shingles(self, row: dict, cache: dict[str, int] | None = None) -> Any:
        """The row's shingle set (sorted distinct uint64); None when its chosen turns hold no word."""
        cfg = self.config
        words = conversation_words(row.get("messages"), cfg.turns, cfg.max_turns)
        return shingle_set(words, cfg.shingle_words, cache) if words else None

    def __call__(self, rows: Any) -> tuple[list[dict], list[dict]]:
        with gc_paused():
            return self._select(to_rows(rows))

    def _select(self, rows: list) -> tuple[list[dict], list[dict]]:
        live = [i for i, row in enumerate(rows) if isinstance(row, dict)]
        cache: dict[str, int] = {}
        features = [self.features(rows[i], cache) for i in live]
        parents = near_parents(features, live, self.threshold)
        dropped_at = {live[child]: live[parent] for child, parent in parents.items()}
        kept, dropped = [], []
        for position, row in enumerate(rows):
            if not isinstance(row, dict):
                dropped.append(drop(row, INVALID_ROW))
            elif position in dropped_at:
                copy = drop(row, NEAR_DUPLICATE)
                copy[DUPLICATE_OF_KEY] = self._identify(rows[dropped_at[position]], dropped_at[position])
                dropped.append(copy)
            else:
                kept.append({k: v for k, v in row.items() if k != "drop_reason"} if "drop_reason" in row else row)
        return kept, dropped

    @staticmethod
    def _identify(row: dict, position: int) -> dict:
        origin = row.get(ORIGIN_KEY)
        if isinstance(origin, (list, tuple)) and len(origin) == 2:
            return {"source": origin[0], "line": origin[1]}
        return {"index": position}

    def __repr__(self) -> str:
        c = self.config
        return (
            f"NearDedupFilter(turns={c.turns!r}, max_turns={c.max_turns}, shingle_words={c.shingle_words}, "
            f"num_perm={c.num_perm}, bands={self.bands}, rows={self.rows}, threshold={c.threshold}, seed={c.seed})"
        )
