"""Cheap upper bounds for DeadLoopFilter's checks, computed for many segments at once.

The exact checks (one regex per language, n-gram hashing of every token) cost tens of nanoseconds
per character, and nearly every segment is clean and far from a threshold. ``segment_bounds``
computes, for a list of segments, numbers that can only be *above* the exact ones:

- **hesitation / cascade markers**: anchor occurrences. English anchors are whole words of the text
  lowercased with every non-word character turned into a space; CJK anchors are character pairs
  (or single characters). Every marker owns at least one anchor occurrence.
- **repetition**: the distinct n-grams are at least the distinct keys of a prefix of each n-gram
  (the first two tokens' leading bytes for words, the first 4 characters for CJK text), so
  ``1 - keys/total`` bounds the ratio from above.

All segments of a chunk are concatenated and processed with a fixed number of numpy passes, so the
per-call overhead of numpy is paid per chunk, not per segment. Each bound's soundness is argued
where it is computed and checked in tests/preprocessor against the exact functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .vocab.dead_loop import (
    EN_CASCADE_WORDS,
    EN_CASE_EQUIVALENTS,
    EN_HESITATION_PREFIXES,
    EN_HESITATION_WORDS,
    JA_HESITATION_PAIRS,
    KO_HESITATION_PAIRS,
    ZH_CASCADE_PAIRS,
    ZH_HESITATION_PAIRS,
    ZH_HESITATION_SINGLES,
)

CHUNK_CHARS = 1 << 16  # segments are processed in chunks of about this many characters
NO_REPETITION = float("-inf")  # the repetition check cannot fire (too short)
_U64 = np.uint64
_PAD = b"\n" * 16  # whitespace padding: 8-byte reads past a token start stay inside the buffer
_PREFIX_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=_U64)
_MIX = (_U64(0x9E3779B97F4A7C15), _U64(0xBF58476D1CE4E5B9))
MAX_SEGMENTS = 1 << 12  # per chunk: distinct counts sort 32-bit (segment, key hash) composites


def _windows(buf: bytes, stride: int, count: int) -> np.ndarray:
    """``count`` little-endian 8-byte reads at every ``stride``-th byte of ``buf``."""
    return np.ndarray(shape=(count,), dtype="<u8", buffer=buf, strides=(stride,))


def _word_key(word: str, length: int | None = None) -> int:
    data = word.encode("ascii")[:8]
    return int.from_bytes(data, "little") & ((1 << (8 * min(length or len(data), 8))) - 1)


# --- English anchors ---------------------------------------------------------------------------

# ASCII word characters lowercased; everything else (other ASCII, and the '?' that
# encode('ascii', 'replace') writes for each non-ASCII character) becomes a space.
_EN_TABLE = bytes(
    (c | 0x20 if 0x41 <= c <= 0x5A else c) if (c < 0x80 and (chr(c).isalnum() or c == 0x5F)) else 0x20
    for c in range(256)
)
EN_HESITATION, EN_CASCADE = 1, 2


def _en_tables() -> tuple[int, np.ndarray, np.ndarray]:
    """A perfect hash of the anchor word keys: slot -> key, slot -> weights (hesitation, cascade)."""
    weights: dict[int, int] = {}
    for words, flag in ((EN_HESITATION_WORDS, EN_HESITATION), (EN_CASCADE_WORDS, EN_CASCADE)):
        for w in words:
            weights[_word_key(w)] = weights.get(_word_key(w), 0) | flag
    for multiplier in range(0x9E3779B97F4A7C15, 1 << 64, 0x100000001B3 * 2):
        slots = {((k * multiplier) & ((1 << 64) - 1)) >> 56 for k in weights}
        if len(slots) == len(weights):
            break
    keys = np.full(256, (1 << 64) - 1, dtype=_U64)  # no real key: a word never fills 8 bytes with 0xff
    flags = np.zeros(256, dtype=np.uint8)
    for k, f in weights.items():
        slot = ((k * multiplier) & ((1 << 64) - 1)) >> 56
        keys[slot] = k
        flags[slot] = f
    return multiplier, keys, flags


_EN_MULTIPLIER, _EN_SLOT_KEYS, _EN_SLOT_FLAGS = _en_tables()
_EN_PREFIXES = tuple((_U64(_word_key(p)), _U64((1 << (8 * len(p))) - 1)) for p in EN_HESITATION_PREFIXES)


def _en_counts(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(hesitation, cascade) English anchor counts per text.

    The texts are joined, lowercased and every non-word character turned into a space (one encode
    and one ``bytes.translate``). Sound: an English marker matches at word boundaries
    (re.IGNORECASE) and contains one anchor word (``EN_*_WORDS``) as a whole word, or a word
    starting with an ``EN_HESITATION_PREFIXES`` entry. Lowercasing, the case equivalents and the
    space mapping keep that word; a non-ASCII character becomes a space, which can only split words
    into more candidates. Words longer than 8 bytes are compared on their first 8 (more matches,
    never fewer). Markers never overlap, so each owns a distinct word.
    """
    joined = " ".join(texts)
    if not joined.isascii():
        for src, dst in EN_CASE_EQUIVALENTS.items():
            if src in joined:
                joined = joined.replace(src, dst)
    buf = b" " + joined.encode("ascii", "replace").translate(_EN_TABLE) + b" " * 16
    offsets = np.cumsum([1] + [len(t) + 1 for t in texts[:-1]])
    word = np.frombuffer(buf, dtype=np.uint8) != 0x20
    edges = np.flatnonzero(word[1:] != word[:-1]) + 1
    starts = edges[0::2]
    prefix = _windows(buf, 1, len(buf) - 7).take(starts)
    prefix &= _PREFIX_MASKS.take(np.minimum(edges[1::2] - starts, 8))
    slots = ((prefix * _U64(_EN_MULTIPLIER)) >> _U64(56)).astype(np.intp)
    flags = np.where(_EN_SLOT_KEYS.take(slots) == prefix, _EN_SLOT_FLAGS.take(slots), np.uint8(0))
    for key, mask in _EN_PREFIXES:
        flags |= np.where((prefix & mask) == key, np.uint8(EN_HESITATION), np.uint8(0))
    hits = np.flatnonzero(flags)
    seg = offsets.searchsorted(starts.take(hits), side="right") - 1
    hit_flags = flags.take(hits)
    hesitation = np.bincount(seg, weights=(hit_flags & EN_HESITATION) != 0, minlength=len(texts))
    cascade = np.bincount(seg, weights=(hit_flags & EN_CASCADE) != 0, minlength=len(texts))
    return hesitation.astype(np.int64), cascade.astype(np.int64)


# --- CJK anchors -------------------------------------------------------------------------------

ZH_H, JA_H, KO_H, ZH_C = 1, 2, 4, 8  # flag bits: the language and check an anchor belongs to
CJK_LANGS = {"zh": ZH_H, "ja": JA_H, "ko": KO_H}
_PAIR_START = 0x80  # in _FIRST: the character starts some anchor pair (low bits: single anchors)
_END = 0  # "$" as the second character of a pair; also the separator between segments


def _cjk_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    first = np.zeros(0x10000, dtype=np.uint8)
    flags: dict[int, int] = {}
    for flag, pairs in ((ZH_H, ZH_HESITATION_PAIRS), (JA_H, JA_HESITATION_PAIRS), (KO_H, KO_HESITATION_PAIRS), (ZH_C, ZH_CASCADE_PAIRS)):  # fmt: skip
        for pair in pairs:
            first[ord(pair[0])] |= _PAIR_START
            key = (ord(pair[0]) << 16) | (_END if pair[1] == "$" else ord(pair[1]))
            flags[key] = flags.get(key, 0) | flag
    for char in ZH_HESITATION_SINGLES:
        first[ord(char)] |= ZH_H
    keys = sorted(flags)
    return (
        first,
        np.array([*keys, 1 << 40], dtype=np.int64),  # the sentinel keeps searchsorted in range
        np.array([flags[k] for k in keys] + [0], dtype=np.uint8),
    )


_FIRST, _PAIR_KEYS, _PAIR_FLAGS = _cjk_tables()


def _cjk_counts(units: list[bytes]) -> np.ndarray:
    """Per text (as UTF-16-LE ``units``), anchor counts for each flag bit: shape (len(units), 4).

    Sound: each match of the ZH/JA/KO hesitation or ZH cascade regex has one of its language's
    anchors starting inside it; matches of one regex never overlap, so each owns a distinct
    position. Texts are UTF-16 code units separated by a 0 unit, which also stands for the end of
    the text ("$") after a pair's first character; astral characters become surrogates, which no
    anchor contains.
    """
    buf = b"\0\0".join(units) + b"\0\0"
    offsets = np.cumsum([0] + [len(u) // 2 + 1 for u in units[:-1]])
    codes = np.frombuffer(buf, dtype=np.uint16)
    first = _FIRST.take(codes[:-1])
    where = np.flatnonzero(first)
    out = np.zeros((len(units), 4), dtype=np.int64)
    if not where.size:
        return out
    marks = first.take(where)
    keys = (codes.take(where).astype(np.int64) << 16) | codes.take(where + 1)
    idx = _PAIR_KEYS.searchsorted(keys)
    flags = np.where(_PAIR_KEYS.take(idx) == keys, _PAIR_FLAGS.take(idx), np.uint8(0)) | (
        marks & np.uint8(0x7F)
    )
    hits = np.flatnonzero(flags)
    seg = offsets.searchsorted(where.take(hits), side="right") - 1
    hit_flags = flags.take(hits)
    for bit in range(4):
        out[:, bit] = np.bincount(seg, weights=(hit_flags >> bit) & 1, minlength=len(units))
    return out


# --- repetition --------------------------------------------------------------------------------

_SPACE_FLAGS = bytes(1 if chr(c).isspace() else 0 for c in range(128)) + bytes(128)
_NON_ASCII_SPACE = re.compile("[" + "".join(chr(c) for c in range(128, 0x3001) if chr(c).isspace()) + "]")
# The 256-code-point blocks wholly inside cjk_ratio's ranges (U+4E00-9FFF, U+3040-30FF,
# U+AC00-D7A3), as UTF-16-BE high bytes; blocks 0x30 and 0xD7 are partly inside.
_CJK_FULL_BLOCKS = bytes([*range(0x4E, 0xA0), *range(0xAC, 0xD7)])
_CJK16 = np.zeros(0x10000, dtype=np.bool_)
for _lo, _hi in ((0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7A3)):
    _CJK16[_lo : _hi + 1] = True


def head_is_cjk(text: str) -> bool:
    """``text.cjk_ratio(text[:500]) > 0.3``, counted on UTF-16 code units (surrogates are not CJK)."""
    head = text[:500]
    n = len(head) - head.count(" ") - head.count("\n") - head.count("\t")
    if n <= 0 or head.isascii():
        return False
    high = head.encode("utf-16-be", "surrogatepass")[0::2]
    low = len(high) - len(high.translate(None, _CJK_FULL_BLOCKS))  # characters in full blocks
    partial = high.count(0x30) + high.count(0xD7)
    if low / n > 0.3:
        return True
    if (low + partial) / n <= 0.3:
        return False
    units = np.frombuffer(head.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    return int(np.count_nonzero(_CJK16.take(units))) / n > 0.3


_HEAD_CJK, _HEAD_BLANK = 1, 2
_HEAD_CLASSES = _CJK16.astype(np.uint8) * _HEAD_CJK
_HEAD_CLASSES[[0x20, 0x0A, 0x09]] = _HEAD_BLANK


def heads_are_cjk(units: list[bytes]) -> np.ndarray:
    """``head_is_cjk`` of texts given as UTF-16-LE ``units`` without astral characters."""
    heads = [u[:1000] for u in units]  # the first 500 characters
    sizes = np.array([len(h) // 2 for h in heads])
    classes = _HEAD_CLASSES.take(np.frombuffer(b"".join(heads), dtype=np.uint16))
    firsts = np.cumsum(sizes) - sizes
    cjk = np.add.reduceat(classes & _HEAD_CJK, firsts)
    counted = sizes - np.add.reduceat(classes >> 1, firsts)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (counted > 0) & (cjk / np.maximum(counted, 1) > 0.3)


def _distinct_per_segment(keys: np.ndarray, lengths: np.ndarray, n: int, min_items: int) -> np.ndarray:
    """Distinct hashed keys among the first ``lengths[s] - n + 1`` positions of each segment.

    ``keys`` holds one key per position, the segments' positions one after another. Segments with
    fewer than ``min_items`` positions (or no n-gram) count 0. Keys are hashed to at least 20 bits
    and sorted as 32-bit (segment, hash) composites: hashing can only merge keys, so the counts are
    never above the exact ones (``len(lengths) <= MAX_SEGMENTS``).
    """
    n_segs = len(lengths)
    counted = (lengths >= min_items) & (lengths >= n)
    valid = np.repeat(counted, lengths)
    if n > 1:  # the last n - 1 positions of a segment start no n-gram
        ends = np.cumsum(lengths)[counted]
        valid[(ends[:, None] - np.arange(1, n)).ravel()] = False
    seg_bits = max(1, (n_segs - 1).bit_length())
    shift = np.uint32(32 - seg_bits)
    composite = ((keys * _MIX[1]) >> _U64(32 + seg_bits)).astype(np.uint32)
    composite |= np.repeat(np.arange(n_segs, dtype=np.uint32) << shift, lengths)
    composite = composite[valid]
    composite.sort()
    new = np.empty(composite.size, dtype=np.bool_)
    new[:1] = True
    np.not_equal(composite[1:], composite[:-1], out=new[1:])
    firsts = composite[new].searchsorted(np.arange(n_segs + 1, dtype=np.uint64) << _U64(shift))
    return np.diff(firsts)


def _ratio_bounds(distinct: np.ndarray, lengths: np.ndarray, n: int, min_items: int) -> np.ndarray:
    totals = lengths - n + 1
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = np.where(totals > 0, 1.0 - distinct / np.maximum(totals, 1), 0.0)
    return np.where(lengths < min_items, NO_REPETITION, bound)


def _word_bounds(texts: list[str], n: int, min_words: int) -> np.ndarray:
    """Upper bounds of the word n-gram repetition ratio (``NO_REPETITION`` below ``min_words``).

    Tokens are str.split() tokens, found on a one-byte-per-character copy (non-ASCII whitespace
    becomes a space, any other non-ASCII character a '?', so token boundaries stay). Equal n-grams
    start with equal tokens, so the distinct n-grams are at least the distinct keys made of the
    first two tokens' leading 8 bytes (masked to the token); '?' and hashing can only merge keys.
    """
    joined = "\n".join(texts)
    if not joined.isascii() and _NON_ASCII_SPACE.search(joined) is not None:
        joined = _NON_ASCII_SPACE.sub(" ", joined)
    buf = b"\n" + joined.encode("ascii", "replace") + _PAD
    spaces = np.frombuffer(buf.translate(_SPACE_FLAGS), dtype=np.bool_)
    edges = np.flatnonzero(spaces[1:] != spaces[:-1]) + 1
    starts = edges[0::2]
    seg_starts = np.cumsum([1] + [len(t) + 1 for t in texts[:-1]])
    lengths = np.diff(np.append(starts.searchsorted(seg_starts), starts.size))
    keys = _windows(buf, 1, len(buf) - 7).take(starts)
    keys &= _PREFIX_MASKS.take(np.minimum(edges[1::2] - starts, 8))
    if n > 1:  # the first two tokens (the second is always in the segment: n-grams need n tokens)
        keys[:-1] = keys[:-1] * _MIX[0] + keys[1:]
    return _ratio_bounds(_distinct_per_segment(keys, lengths, n, min_words), lengths, n, min_words)


_NOT_SPACE16 = np.ones(0x10000, dtype=np.bool_)
_NOT_SPACE16[[c for c in range(0x3001) if chr(c).isspace()]] = False


def _char_bounds(units: list[bytes], n: int, min_chars: int) -> np.ndarray:
    """Upper bounds of the character n-gram repetition ratio of CJK texts (whitespace removed).

    ``units`` are the texts' UTF-16 code units, one per character (no astral characters).
    ``NO_REPETITION`` below ``min_chars`` characters. For ``n >= 4`` the distinct n-grams are at
    least the distinct 4-character prefixes; for smaller ``n`` the masked window is the n-gram.
    """
    codes = np.frombuffer(b"".join(units), dtype=np.uint16)
    keep = _NOT_SPACE16.take(codes)
    sizes = np.array([len(u) // 2 for u in units])
    lengths = np.add.reduceat(keep.astype(np.intp), np.cumsum(sizes) - sizes)
    chars = np.concatenate((codes[keep], np.zeros(8, dtype=np.uint16)))
    keys = _windows(chars, 2, len(chars) - 8)
    if n < 4:
        keys = keys & _U64((1 << (16 * n)) - 1)
    return _ratio_bounds(_distinct_per_segment(keys, lengths, n, min_chars), lengths, n, min_chars)


# --- all together ------------------------------------------------------------------------------


@dataclass
class Bounds:
    """Per segment: marker-count bounds per language, the cascade bound, the repetition bound."""

    hesitation: dict[str, np.ndarray]  # "en", "zh", "ja", "ko" -> counts
    cascade: np.ndarray
    repetition: np.ndarray  # an upper bound of the ratio, NO_REPETITION, or +inf (unknown)


def segment_bounds(
    texts: Sequence[str], n: int | None = None, min_words: int = 0, markers: bool = True
) -> Bounds:
    """Bounds for every segment of ``texts``, processed in chunks of ``CHUNK_CHARS`` characters.

    Marker bounds are zero with ``markers=False``; repetition bounds are ``NO_REPETITION`` without
    ``n`` (the n-gram size; ``min_words`` as in the filter).
    """
    size = len(texts)
    found = Bounds({lang: np.zeros(size, dtype=np.int64) for lang in ("en", *CJK_LANGS)},
                   np.zeros(size, dtype=np.int64), np.full(size, NO_REPETITION))  # fmt: skip
    start = 0
    while start < size:
        stop, chars = start, 0
        while stop < size and (stop == start or chars < CHUNK_CHARS) and stop - start < MAX_SEGMENTS:
            chars += len(texts[stop])
            stop += 1
        _chunk_bounds(texts, range(start, stop), n, min_words, markers, found)
        start = stop
    return found


def _chunk_bounds(texts, chunk, n, min_words, markers, found: Bounds) -> None:  # noqa: PLR0913
    others = [i for i in chunk if not texts[i].isascii()]
    units = [texts[i].encode("utf-16-le", "surrogatepass") for i in others]
    if markers:
        found.hesitation["en"][chunk], found.cascade[chunk] = _en_counts(texts[chunk.start : chunk.stop])
        if others:
            counts = _cjk_counts(units)
            for lang, bit in CJK_LANGS.items():
                found.hesitation[lang][others] = counts[:, bit.bit_length() - 1]
            found.cascade[others] += counts[:, ZH_C.bit_length() - 1]
    if n is None:
        return
    min_chars = min_words * n
    bmp = [k for k, i in enumerate(others) if len(units[k]) == 2 * len(texts[i])]
    heads = dict(zip(bmp, heads_are_cjk([units[k] for k in bmp]).tolist(), strict=True)) if bmp else {}
    skip, cjk, exact = set(), [], []
    for k, i in enumerate(others):
        is_cjk = heads[k] if k in heads else head_is_cjk(texts[i])  # astral text: one at a time
        if not is_cjk:
            continue
        skip.add(i)  # CJK text: the character path, or nothing when it is too short for it
        if len(texts[i]) >= min_chars:
            (cjk if k in heads else exact).append(k)
    found.repetition[[others[k] for k in exact]] = np.inf  # astral characters: the exact pass decides
    words = [i for i in chunk if len(texts[i]) >= 2 * min_words - 1 and i not in skip]
    if words:
        found.repetition[words] = _word_bounds([texts[i] for i in words], n, min_words)
    if cjk:
        found.repetition[[others[k] for k in cjk]] = _char_bounds([units[k] for k in cjk], n, min_chars)
