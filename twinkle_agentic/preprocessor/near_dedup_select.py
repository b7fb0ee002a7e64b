"""Which rows near-duplicate removal drops: the rule, shared by the one-process filter and the job.

A pair of rows is a near-duplicate when the Jaccard similarity of their shingle sets is at least the
threshold; only pairs that share an LSH band are compared (exactly, on the sets). Rows are ranked
longest first: most messages, then most characters, then the smaller id (the earlier row). A row
whose shingle set equals a higher-ranked row's (an exact copy once normalised) is dropped for the
highest-ranked row with that set. Among the rest, a row is dropped when some near-duplicate of it
ranks higher, and the ledger names the highest-ranked such row (its *parent*). That parent is kept unless it has a parent of its own (a chain: A ~ B and B ~ C
but not A ~ C drops B for A and C for B); following parents always ends at a kept row. The rule
depends only on the candidate pairs, never on the order rows arrive in, so a hash-partitioned job
and one process agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .text import text_of

Rank = tuple[int, int, int]  # (-messages, -characters, id): smaller ranks higher


@dataclass(frozen=True)
class RowFeatures:
    """What the rule needs of one row: its shingle set (and its digest), band keys and length."""

    shingles: np.ndarray  # sorted distinct uint64
    bands: np.ndarray  # sorted distinct int64
    messages: int
    chars: int
    digest: int  # set_digest(shingles)


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


def set_digest(shingles: np.ndarray) -> int:
    """A 64-bit digest (signed, as Arrow stores it) of a shingle set: equal sets, equal digests."""
    digest = hashlib.blake2b(np.ascontiguousarray(shingles, dtype=np.uint64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def bucket_candidates(digests: Sequence[int]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(copies, pairs) of one LSH bucket whose members are sorted best-ranked first, given their set
    digests. A member whose set a better member already has is a copy of the best such member
    (``(member, that one)``); every other member is paired with each better such representative
    (``(member, representative)``), to be verified."""
    first: dict[int, int] = {}
    copies, pairs = [], []
    for j, digest in enumerate(digests):
        if digest in first:
            copies.append((j, first[digest]))
            continue
        pairs.extend((j, i) for i in first.values())
        first[digest] = j
    return copies, pairs


def near_parents(features: Sequence[RowFeatures | None], ids: Sequence[int], threshold: float) -> dict[int, int]:
    """Index of each dropped row -> index of its parent, for rows given as features (None: a row
    with no words, never compared) and their ids (distinct ints that order ties).

    Exact copies (equal shingle sets) go to the best-ranked row of their set; the best of each set
    then goes to the best-ranked better representative it shares a band with and verifies against.
    """
    ranks = [
        rank(f.messages, f.chars, row_id) if f is not None else None
        for f, row_id in zip(features, ids, strict=True)
    ]
    best_of_set: dict[int, int] = {}
    for index, f in enumerate(features):
        if f is not None:
            held = best_of_set.get(f.digest)
            if held is None or ranks[index] < ranks[held]:
                best_of_set[f.digest] = index
    parents: dict[int, int] = {}
    for index, f in enumerate(features):
        if f is not None and best_of_set[f.digest] != index:
            parents[index] = best_of_set[f.digest]
    buckets: dict[int, list[int]] = {}
    for index in best_of_set.values():
        for key in features[index].bands.tolist():
            buckets.setdefault(key, []).append(index)
    for members in buckets.values():
        if len(members) < 2:
            continue
        members.sort(key=ranks.__getitem__)
        for j in range(1, len(members)):
            child = members[j]
            for parent in members[:j]:  # best first: the first verified one is this bucket's best
                if jaccard(features[parent].shingles, features[child].shingles) >= threshold:
                    best = parents.get(child)
                    if best is None or ranks[parent] < ranks[best]:
                        parents[child] = parent
                    break
    return parents
