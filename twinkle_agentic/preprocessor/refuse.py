"""RefuseFilter: rows whose first assistant reply refuses the task."""

from __future__ import annotations

import re

from .base import INVALID_MESSAGES, Filter
from .text import message_text, messages_of, strip_think
from .vocab.refuse import (
    EN_ANCHORS,
    EN_PATTERNS,
    JA_ANCHORS,
    JA_PATTERNS,
    KO_ANCHORS,
    KO_PATTERNS,
    ZH_ANCHORS,
    ZH_PATTERNS,
)

REFUSAL = "refusal"
_FLAGS = re.IGNORECASE | re.DOTALL
_LANGUAGES = (
    ("en", EN_ANCHORS, EN_PATTERNS),
    ("zh", ZH_ANCHORS, ZH_PATTERNS),
    ("ja", JA_ANCHORS, JA_PATTERNS),
    ("ko", KO_ANCHORS, KO_PATTERNS),
)
LANGUAGE_RES = {
    lang: re.compile("|".join(f"(?:{p})" for p in patterns), _FLAGS) for lang, _, patterns in _LANGUAGES
}

# The gate: every pattern contains one of its language's anchors, in casefolded text whose whitespace
# runs are collapsed to one space. An anchor without a space occurs there exactly when it occurs in
# the plain casefolded text, so only windows holding a word of a multi-word anchor need collapsing.
_SINGLE = {lang: tuple(a for a in anchors if " " not in a) for lang, anchors, _ in _LANGUAGES}
_MULTI = {lang: tuple(a for a in anchors if " " in a) for lang, anchors, _ in _LANGUAGES}


def _gate_words(anchors: tuple[str, ...]) -> tuple[str, ...]:
    """Words such that each multi-word anchor contains one (greedy: the most shared first)."""
    left, words = list(anchors), []
    while left:
        counts: dict[str, int] = {}
        for a in left:
            for w in set(a.split()):
                counts[w] = counts.get(w, 0) + 1
        word = max(counts, key=lambda w: (counts[w], len(w)))
        words.append(word)
        left = [a for a in left if word not in a.split()]
    return tuple(words)


_GATE_WORDS = {lang: _gate_words(anchors) for lang, anchors in _MULTI.items()}
# Scripts a language's anchors need (UTF-16 high bytes of their characters' blocks); English anchors
# need an ASCII letter.
_HAN = bytes(range(0x4E, 0xA0))
_SCRIPT_BLOCKS = {"zh": _HAN, "ja": _HAN + bytes([0x30]), "ko": bytes(range(0xAC, 0xD8))}
_NOT_LETTERS = bytes(c for c in range(256) if not (0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A))


def _languages(folded: str) -> tuple[str, ...]:
    """Languages whose anchors may occur in the casefolded window (by the scripts it holds)."""
    if folded.isascii():
        return ("en",)
    high = folded.encode("utf-16-be", "surrogatepass")[0::2]
    found = tuple(
        lang for lang, blocks in _SCRIPT_BLOCKS.items() if len(high.translate(None, blocks)) < len(high)
    )
    if folded.encode("ascii", "ignore").translate(None, _NOT_LETTERS):
        found = ("en", *found)
    return found


def _anchored(folded: str, lang: str) -> bool:
    if any(a in folded for a in _SINGLE[lang]):
        return True
    if _MULTI[lang] and any(w in folded for w in _GATE_WORDS[lang]):
        collapsed = " ".join(folded.split())
        return any(a in collapsed for a in _MULTI[lang])
    return False


def is_refusal(text: str, check_window: int = 600) -> bool:
    """True when ``text[:check_window]`` holds a self-referential refusal (EN, ZH, JA, KO)."""
    if check_window <= 0 or not text:
        return False
    window = text[:check_window]
    folded = window.casefold()
    return any(_anchored(folded, lang) and LANGUAGE_RES[lang].search(window) for lang in _languages(folded))


class RefuseFilter(Filter):
    """Drops rows whose **first** assistant message refuses (reason ``refusal``).

    Only that message is read: think blocks removed, stripped, then its first ``check_window``
    characters scanned (0 never matches). List content uses the shared projection (text parts
    joined by a space). Rows without an assistant message, or whose first reply is empty, are kept;
    messages that are not a list of dicts drop as ``invalid_messages``.
    """

    def __init__(self, check_window: int = 600) -> None:
        self.check_window = check_window

    def reason(self, row: dict) -> str | None:
        messages = messages_of(row)
        if messages is None:
            return INVALID_MESSAGES
        for m in messages:
            if m.get("role") == "assistant":
                return REFUSAL if is_refusal(strip_think(message_text(m)), self.check_window) else None
        return None

    def __repr__(self) -> str:
        return f"RefuseFilter(check_window={self.check_window})"
