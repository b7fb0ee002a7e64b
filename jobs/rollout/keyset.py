"""A set of id strings held as 16-byte keys: what a resumed job has done, for millions of trajectories.

A Python set of id strings costs about 100 bytes or more per id; a ``KeySet`` holds each id as its
128-bit BLAKE2b digest in one sorted NumPy array: 16 bytes per id, looked up by binary search.

Two different ids share a key with probability 2^-128 per pair. That is the only way a lookup can
answer wrongly: for a resumed job to skip a trajectory that is not in the journal, every member of
its group must share a key with some id that is, which at 10^7 done ids and 10^7 planned ones has a
probability below 10^-24 for a group of one (each further member multiplies it by as little again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np

KEY = np.dtype([("hi", "<u8"), ("lo", "<u8")])  # compared field by field: a total order for search
KEY_BYTES = KEY.itemsize


def key_of(text: str) -> bytes:
    """The 16-byte key of ``text`` (stable across processes and runs)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=KEY_BYTES).digest()


class KeySet:
    """Strings by key: ``add`` appends 16 bytes; lookups sort what was added once, then binary-search.

    The sorted keys are kept as two ``uint64`` columns (high and low halves): a search over one
    plain column is several times faster than over a structured array. ``repeats`` counts the adds
    of a key that was already there (a journal line seen twice, say)."""

    def __init__(self, texts: Iterable[str] = ()):
        self._hi = np.empty(0, np.uint64)
        self._lo = np.empty(0, np.uint64)
        self._pending = bytearray()
        self._repeated: set[bytes] = set()  # keys added more than once (rare: kept as they are)
        self._repeats = 0
        for text in texts:
            self.add(text)

    def add(self, text: str) -> None:
        self._pending += key_of(text)

    def _settle(self) -> None:
        """Merge the added keys into the sorted columns (about 56 bytes a key while it runs, 16 after)."""
        if not self._pending:
            return
        added = np.frombuffer(self._pending, KEY)
        hi, lo = np.concatenate([self._hi, added["hi"]]), np.concatenate([self._lo, added["lo"]])
        del added
        self._pending = bytearray()
        order = np.lexsort((lo, hi))
        hi, lo = hi[order], lo[order]
        del order
        same = (hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1])
        if same.any():
            again = np.flatnonzero(same) + 1
            self._repeats += len(again)
            self._repeated.update(int(hi[i]).to_bytes(8, "little") + int(lo[i]).to_bytes(8, "little") for i in again)
            keep = np.concatenate([[True], ~same])
            hi, lo = hi[keep], lo[keep]
        self._hi, self._lo = hi, lo

    @property
    def repeats(self) -> int:
        self._settle()
        return self._repeats

    def __contains__(self, text: object) -> bool:
        if not isinstance(text, str):
            return False
        self._settle()
        key = key_of(text)
        hi, lo = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")  # KEY's fields
        i = int(self._hi.searchsorted(np.uint64(hi)))  # as uint64: a Python int over 2**63 is slow
        while i < len(self._hi) and int(self._hi[i]) == hi:  # one step, unless keys share a high half
            if int(self._lo[i]) == lo:
                return True
            i += 1
        return False

    def added_more_than_once(self, text: str) -> bool:
        """Whether ``text``'s key was added twice or more (so a recount can keep its first only)."""
        self._settle()
        return key_of(text) in self._repeated

    def __len__(self) -> int:
        self._settle()
        return len(self._hi)

    def __bool__(self) -> bool:
        return bool(self._pending) or len(self._hi) > 0

    def __eq__(self, other: Any) -> bool:
        """Equal to another ``KeySet`` with the same keys, or to a set of strings whose keys are these."""
        if isinstance(other, KeySet):
            self._settle()
            other._settle()
            return bool(np.array_equal(self._hi, other._hi) and np.array_equal(self._lo, other._lo))
        if isinstance(other, (set, frozenset)):
            return len(other) == len(self) and all(text in self for text in other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    @property
    def nbytes(self) -> int:
        """Bytes the keys take (sorted and not yet sorted)."""
        return self._hi.nbytes + self._lo.nbytes + len(self._pending) + KEY_BYTES * len(self._repeated)

    def __repr__(self) -> str:
        return f"KeySet({len(self)} keys)"
