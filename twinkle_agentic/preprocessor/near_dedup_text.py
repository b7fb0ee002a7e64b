"""What near-duplicate removal compares: the chosen turns of a conversation, normalised into words,
hashed into word shingles.

Normalisation folds what a copy changes without changing what it says: Unicode compatibility forms
(NFKC), case (``casefold``), punctuation and whitespace (words are runs of letters and digits, so
neither survives). Chinese and Japanese characters count as one word each, since their text has no
spaces. Each turn opens with a role word, so the same text said by the user and by the assistant
differs and shingles straddling two turns say who spoke.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Any

import numpy as np

from .text import text_of

# One Han, kana or CJK compatibility character, or a run of other word characters (underscore out).
_IDEOGRAPHS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
WORD = re.compile(f"[{_IDEOGRAPHS}]|[^\\W_{_IDEOGRAPHS}]+")
# Role words cannot collide with text words: text words never hold a control character.
ROLE_WORDS = {"user": "\x01u", "assistant": "\x01a", "system": "\x01s", "tool": "\x01t"}
OTHER_ROLE = "\x01o"
_MULTIPLIER = np.uint64(0x100000001B3)
_MASK64 = (1 << 64) - 1


def normalise(text: str) -> list[str]:
    """The words of ``text`` with case, punctuation, whitespace and compatibility forms folded."""
    return WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def chosen_turns(messages: Any, turns: str, max_turns: int | None) -> list[tuple[str, str]]:
    """(role, text) of the messages ``turns`` selects (``all``, ``user``, ``assistant``), the first
    ``max_turns`` of them when set; messages that are not dicts are skipped."""
    if not isinstance(messages, list):
        return []
    chosen = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if turns != "all" and role != turns:
            continue
        chosen.append((role if isinstance(role, str) else "", text_of(message.get("content"))))
        if max_turns is not None and len(chosen) >= max_turns:
            break
    return chosen


def conversation_words(messages: Any, turns: str = "all", max_turns: int | None = None) -> list[str]:
    """The normalised words of the chosen turns, each turn led by its role word; [] when no turn
    holds a word (such a row is never a near-duplicate)."""
    words: list[str] = []
    for role, text in chosen_turns(messages, turns, max_turns):
        said = normalise(text)
        if said:
            words.append(ROLE_WORDS.get(role, OTHER_ROLE))
            words.extend(said)
    return words


def word_hash(word: str) -> int:
    """A stable 64-bit hash of one word (the same in every process, unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def mix64(values: np.ndarray) -> np.ndarray:
    """A 64-bit finaliser (splitmix64's): every input bit reaches every output bit."""
    x = values.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def shingle_set(words: list[str], size: int, cache: dict[str, int] | None = None) -> np.ndarray:
    """The sorted, distinct 64-bit hashes of the ``size``-word shingles of ``words`` (one shingle of
    all the words when there are fewer); empty when there are no words. ``cache`` maps words to their
    hashes across calls."""
    if not words:
        return np.empty(0, dtype=np.uint64)
    cache = {} if cache is None else cache
    for word in set(words).difference(cache):
        cache[word] = word_hash(word)
    hashes = np.fromiter(map(cache.__getitem__, words), np.uint64, len(words))
    width = min(size, len(words))
    count = len(words) - width + 1
    combined = hashes[:count].copy()
    for offset in range(1, width):
        combined = combined * _MULTIPLIER + hashes[offset : offset + count]
    return np.unique(mix64(combined + np.uint64(width)))
