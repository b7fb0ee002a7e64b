"""MinHash signatures of shingle sets and their LSH band keys, vectorised with numpy.

Permutation ``i`` maps a shingle's 64-bit hash ``x`` to the high 32 bits of ``a_i x + b_i`` modulo
2^64 (multiply-shift hashing, ``a_i`` odd): no division, so a row's whole signature is a few numpy
operations, and unsigned 64-bit arithmetic wraps the same on every machine, so signatures are
reproducible. Two sets agree on one MinHash value with probability close to their Jaccard
similarity. Written on numpy rather than a MinHash library (datasketch): the job's tasks and the
one-process filter must compute bit-identical band keys from this module alone, and numpy is
already a dependency.
"""

from __future__ import annotations

import numpy as np

from .near_dedup_text import mix64

SHIFT = np.uint64(32)
# Shingles processed at once: bounds the (num_perm x chunk) matrix to a few MiB.
CHUNK = 4096


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(a, b)`` coefficients of ``num_perm`` permutations (``a`` odd), as column vectors."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << 63, size=num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 1 << 63, size=num_perm, dtype=np.uint64)
    return a[:, None], b[:, None]


def signature(shingles: np.ndarray, perms: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The MinHash signature (``num_perm`` uint32 values) of a non-empty shingle set."""
    a, b = perms
    result = np.full(a.shape[0], np.iinfo(np.uint64).max, dtype=np.uint64)
    for start in range(0, shingles.size, CHUNK):
        values = (a * shingles[None, start : start + CHUNK] + b) >> SHIFT
        np.minimum(result, values.min(axis=1), out=result)
    return result.astype(np.uint32)


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One int64 key per band: a hash of the band's index and its ``rows`` values. Rows that share
    a key are candidates; the distinct keys come sorted."""
    values = sig[: bands * rows].reshape(bands, rows).astype(np.uint64)
    key = np.arange(1, bands + 1, dtype=np.uint64)
    for column in range(rows):
        key = mix64(key * np.uint64(0x100000001B3) + values[:, column])
    return np.unique(key.view(np.int64))
