"""Which rows near-duplicate removal drops: the rule, shared by the one-process filter and the job.

A pair of rows is a near-duplicate when the Jaccard similarity of their shingle sets is at least the
threshold; only pairs that share an LSH band are compared (exactly, on the sets). Rows are ranked
longest first: most messages, then most characters, then the smaller id (the earlier row). A row is
dropped when some near-duplicate of it ranks higher, and the ledger names the highest-ranked such
row (its *parent*). That parent is kept unless it has a parent of its own (a chain: A ~ B and B ~ C
but not A ~ C drops B for A and C for B); following parents always ends at a kept row. The rule
depends only on the candidate pairs, never on the order rows arrive in, so a hash-partitioned job
and one process agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .text import text_of

Rank = tuple[int, int, int]  # (-messages, -characters, id): smaller ranks higher


@dataclass(frozen=True)
class RowFeatures:
    """What the rule needs of one row: its shingle set, band keys and length."""

    shingles: np.ndarray  # sorted distinct uint64
    bands: np.ndarray  # sorted distinct int64
    messages: int
    chars: int


def conversation_length(messages: object) -> tuple[int, int]:
    """(messages, characters of their text): how long a conversation is, for the keep rule."""
    if not isinstance(messages, list):
        return 0, 0
    chars = sum(len(text_of(m.get("content"))) for m in messages if isinstance(m, dict))
    return len(messages), chars


def rank(messages: int, chars: int, row_id: int) -> Rank:
    return (-messages, -chars, row_id)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted distinct hash sets (0 when both are empty)."""
    if a.size == 0 and b.size == 0:
        return 0.0
    common = np.intersect1d(a, b, assume_unique=True).size
    return common / (a.size + b.size - common)


def bucket_parents(shingles: Sequence[np.ndarray], threshold: float) -> list[tuple[int, int]]:
    """(member, parent) pairs of one LSH bucket whose members are sorted best-ranked first: each
    member's parent within the bucket is the first better member whose Jaccard with it reaches the
    threshold (members with none are left out). Equal sets (exact copies) cost one comparison."""
    found = []
    for j in range(1, len(shingles)):
        mine = shingles[j]
        for i in range(j):
            other = shingles[i]
            if other.size == mine.size and np.array_equal(other, mine):
                found.append((j, i))
                break
            if jaccard(other, mine) >= threshold:
                found.append((j, i))
                break
    return found


def near_parents(features: Sequence[RowFeatures | None], ids: Sequence[int], threshold: float) -> dict[int, int]:
    """Index of each dropped row -> index of its parent, for rows given as features (None: a row
    with no words, never compared) and their ids (distinct ints that order ties)."""
    ranks = [
        rank(f.messages, f.chars, row_id) if f is not None else None
        for f, row_id in zip(features, ids, strict=True)
    ]
    buckets: dict[int, list[int]] = {}
    for index, f in enumerate(features):
        if f is not None:
            for key in f.bands.tolist():
                buckets.setdefault(key, []).append(index)
    parents: dict[int, int] = {}
    for members in buckets.values():
        if len(members) < 2:
            continue
        members.sort(key=ranks.__getitem__)
        for j, i in bucket_parents([features[m].shingles for m in members], threshold):
            child, parent = members[j], members[i]
            best = parents.get(child)
            if best is None or ranks[parent] < ranks[best]:
                parents[child] = parent
    return parents
