"""Which rows near-duplicate removal drops: the rule, shared by the one-process filter and the job.

A pair of rows is a near-duplicate when the Jaccard similarity of their shingle sets is at least the
threshold; only pairs that share an LSH band are compared (exactly, on the sets). Rows are ranked
longest first: most messages, then most characters, then the smaller id (the earlier row). A row
whose shingle set equals a higher-ranked row's (an exact copy once normalised) follows the
highest-ranked row with that set (its *best*). The best rows are then decided greedily in rank order,
each against the rows already *kept* only: a row is dropped when a kept row that shares a band with
it verifies as its near-duplicate, and the ledger names the highest-ranked such kept row; otherwise
it is kept. An exact copy is dropped for its best when that row is kept, else for the kept row its
best was dropped for. So every dropped row names a kept row, and in a chain (A ~ B and B ~ C but not
A ~ C) B is dropped for A while C, a near copy of no kept row, is kept. The rule depends only on the
candidate pairs, never on the order rows arrive in, so a hash-partitioned job and one process agree.
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
    digest = hashlib.blake2b(
        np.ascontiguousarray(shingles, dtype=np.uint64).tobytes(), digest_size=8
    ).digest()
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


def near_parents(
    features: Sequence[RowFeatures | None], ids: Sequence[int], threshold: float
) -> dict[int, int]:
    """Index of each dropped row -> index of the kept row it names, for rows given as features
    (None: a row with no words, never compared) and their ids (distinct ints that order ties)."""
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
    kept_in_bucket: dict[int, list[int]] = {}  # band key -> kept best rows, in rank order
    for index in sorted(best_of_set.values(), key=ranks.__getitem__):
        keys = features[index].bands.tolist()
        candidates = {kept for key in keys for kept in kept_in_bucket.get(key, ())}
        for kept in sorted(candidates, key=ranks.__getitem__):
            if jaccard(features[kept].shingles, features[index].shingles) >= threshold:
                parents[index] = kept
                break
        else:
            for key in keys:
                kept_in_bucket.setdefault(key, []).append(index)
    for index, f in enumerate(features):
        if f is not None and best_of_set[f.digest] != index:
            best = best_of_set[f.digest]
            parents[index] = parents.get(best, best)
    return parents


# A row's state while the job decides it (:func:`decide`): not yet known, kept, or dropped.
UNKNOWN, KEPT, DROPPED = 0, 1, 2


def decide(parents: Sequence[tuple[int, int]]) -> tuple[int, int | None]:
    """The greedy rule for one best row, given ``(state, id)`` of each verified near-duplicate that
    ranks higher, best-ranked first: (DROPPED, the first kept one) once every better one is known
    dropped; (KEPT, None) when all are dropped; (UNKNOWN, None) while a better one is undecided."""
    for state, parent in parents:
        if state == KEPT:
            return DROPPED, parent
        if state == UNKNOWN:
            return UNKNOWN, None
    return KEPT, None
