"""DeadLoopFilter: assistant turns stuck in hesitation, correction cascades or n-gram repetition.

Hot path. Each check first computes a cheap upper bound (anchor substring counts for markers, token
counts for repetition) and runs the exact regex or n-gram pass only when the bound could reach the
threshold; the n-gram pass hashes token ids with numpy instead of building tuples in Python.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from .base import INVALID_MESSAGES, Filter
from .text import cjk_ratio, is_agent_row, message_text, messages_of, reasoning_of, split_think
from .vocab.dead_loop import (
    CASCADE,
    EN_CASCADE_ANCHORS,
    EN_HESITATION,
    EN_HESITATION_ANCHORS,
    JA_HESITATION,
    JA_HESITATION_ANCHORS,
    KO_HESITATION,
    KO_HESITATION_ANCHORS,
    ZH_CASCADE_ANCHORS,
    ZH_HESITATION,
    ZH_HESITATION_ANCHORS,
)

DEAD_LOOP = "dead_loop"


def _join(fragments: tuple[str, ...], flags: int = 0) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{f})" for f in fragments), flags)


LANGS = ("en", "zh", "ja", "ko")
HESITATION_RES = {
    "en": _join(EN_HESITATION, re.IGNORECASE),
    "zh": _join(ZH_HESITATION),
    "ja": _join(JA_HESITATION),
    "ko": _join(KO_HESITATION),
}
HESITATION_ANCHORS = {
    "en": EN_HESITATION_ANCHORS,
    "zh": ZH_HESITATION_ANCHORS,
    "ja": JA_HESITATION_ANCHORS,
    "ko": KO_HESITATION_ANCHORS,
}
CASCADE_ANCHORS = {"en": EN_CASCADE_ANCHORS, "zh": ZH_CASCADE_ANCHORS}
# Every anchor of a language contains a character of its script, so a script absent from the text
# means none of its anchors (and none of its markers) can occur.
_SCRIPT_PROBES = {
    "en": re.compile("[A-Za-z\u0130\u0131\u017f\u212a]"),
    "zh": re.compile("[\u4e00-\u9fff]"),
    "ja": re.compile("[\u3040-\u30ff]"),
    "ko": re.compile("[\uac00-\ud7a3]"),
}
_ALL_ANCHORS = {
    lang: tuple(dict.fromkeys(HESITATION_ANCHORS[lang] + CASCADE_ANCHORS.get(lang, ()))) for lang in LANGS
}
CASCADE_RE = _join(CASCADE, re.IGNORECASE)
_DOTTED_I = ("\u0130", "\u0131")  # the letters re.IGNORECASE equates with "i" but casefold() does not


class _Views:
    """One segment plus its anchor counts per language, computed once and shared by the checks."""

    __slots__ = ("text", "_counts")

    def __init__(self, text: str) -> None:
        self.text = text
        self._counts: dict[str, dict[str, int]] = {}

    def counts(self, lang: str) -> dict[str, int]:
        found = self._counts.get(lang)
        if found is None:
            text = self.text
            if lang == "en":
                present = text.isascii() or _SCRIPT_PROBES["en"].search(text) is not None
                if present:
                    text = text.casefold()
                    if not self.text.isascii() and any(c in self.text for c in _DOTTED_I):
                        text = text.replace("i\u0307", "i").replace("\u0131", "i")
            else:
                present = not text.isascii() and _SCRIPT_PROBES[lang].search(text) is not None
            found = {a: text.count(a) for a in _ALL_ANCHORS[lang]} if present else {}
            self._counts[lang] = found
        return found

    def bound(self, lang: str, anchors: tuple[str, ...]) -> int:
        counts = self.counts(lang)
        return sum(counts[a] for a in anchors) if counts else 0


def hesitation_count(text: str | _Views, limit: float | None = None) -> int:
    """Number of hesitation markers in ``text`` (each language's matches never overlap).

    With ``limit``, returns early with a bound ``<= limit`` when the count cannot exceed it.
    """
    view = text if isinstance(text, _Views) else _Views(text)
    bounds = {lang: view.bound(lang, HESITATION_ANCHORS[lang]) for lang in LANGS}
    if limit is not None and sum(bounds.values()) <= limit:
        return sum(bounds.values())
    return sum(len(HESITATION_RES[lang].findall(view.text)) for lang, b in bounds.items() if b)


def has_cascade(text: str | _Views, threshold: int, window: int) -> bool:
    """``threshold`` (>= 1) consecutive correction-marker starts within ``window`` characters."""
    view = text if isinstance(text, _Views) else _Views(text)
    if threshold <= 1:
        return CASCADE_RE.search(view.text) is not None
    if view.bound("en", EN_CASCADE_ANCHORS) + view.bound("zh", ZH_CASCADE_ANCHORS) < threshold:
        return False
    starts = [m.start() for m in CASCADE_RE.finditer(view.text)]
    span = threshold - 1
    return any(starts[i + span] - starts[i] <= window for i in range(len(starts) - span))


# Fixed odd multipliers: the n-gram hash is the same in every process (no PYTHONHASHSEED effect).
_MULTIPLIERS = np.array(
    [0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93,
     0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3, 0x589965CC75374CC3,
     0x1D8E4E27C47D124F, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5],
    dtype=np.uint64,
)  # fmt: skip
_NUMPY_MIN_TOKENS = 96  # below this a Python set of tuples is cheaper than the numpy round trip


def _distinct_ngrams(ids: np.ndarray, n: int) -> int:
    """Distinct n-grams of an id sequence (64-bit polynomial hash of exact ids)."""
    m = len(ids) - n + 1
    acc = np.zeros(m, dtype=np.uint64)
    for k in range(n):
        acc += ids[k : k + m] * _MULTIPLIERS[k % len(_MULTIPLIERS)]
        if k % len(_MULTIPLIERS) == len(_MULTIPLIERS) - 1:
            acc ^= acc >> np.uint64(29)
    acc ^= acc >> np.uint64(31)
    acc.sort()
    return int(np.count_nonzero(acc[1:] != acc[:-1])) + 1


def repetition_ratio(tokens: list[str] | str, n: int) -> float:
    """``1 - distinct/total`` over the n-grams of ``tokens`` (a word list, or a string of characters)."""
    total = len(tokens) - n + 1
    if total <= 0:
        return 0.0
    if len(tokens) < _NUMPY_MIN_TOKENS:
        grams = zip(*(tokens[k:] for k in range(n)), strict=False)
        return 1.0 - len(set(grams)) / total
    if isinstance(tokens, str):
        ids = np.frombuffer(tokens.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    else:
        # equal words get equal ids: setdefault keeps the first id it was offered
        ids = np.fromiter(map({}.setdefault, tokens, itertools.count()), dtype=np.uint64, count=len(tokens))
    return 1.0 - _distinct_ngrams(ids, n) / total


def high_repetition(text: str, threshold: float, n: int, min_words: int) -> bool:
    """n-gram repetition above ``threshold``: characters for CJK text, else whitespace-split words."""
    if cjk_ratio(text[:500]) > 0.3:
        chars = "".join(text.split())
        if len(chars) < min_words * n:
            return False
        return repetition_ratio(chars, n) > threshold
    if len(text) < 2 * min_words - 1:
        return False
    words = text.split()
    if len(words) < min_words:
        return False
    return repetition_ratio(words, n) > threshold


@dataclass(frozen=True)
class Profile:
    """Thresholds for one kind of segment; None disables a check."""

    hesitation_density: float | None
    cascade: int | None
    repetition: float | None


class DeadLoopFilter(Filter):
    """Drops rows whose assistant turns are stuck (reason ``dead_loop``).

    A turn is split into think (inner text of every think block plus ``reasoning_content``/
    ``thinking``) and response (all text outside the blocks: pre-``<think>`` text counts, unlike
    upstream); think uses the laxer ``think_*`` thresholds. A segment is stuck when its hesitation
    density (markers per 1000 characters) is above the threshold, ``cascade_threshold`` correction
    markers start within ``cascade_window`` characters, or its n-gram repetition is above the
    threshold. Non-agent rows drop on one stuck turn; agent rows (tool calls or tool messages) are
    scanned too (upstream skips them) and drop on ``agent_min_stuck_turns`` stuck turns, counting
    only assistant turns with text. Rows without assistant turns are kept; messages that are not a
    list of dicts drop as ``invalid_messages``.
    """

    def __init__(
        self,
        hesitation_density_threshold: float | None = 7.0,
        cascade_window: int = 800,
        cascade_threshold: int | None = 5,
        repetition_threshold: float | None = 0.45,
        ngram_size: int = 8,
        ngram_min_words: int = 30,
        think_hesitation_density_threshold: float | None = 15.0,
        think_cascade_threshold: int | None = 20,
        think_repetition_threshold: float | None = 0.65,
        scan_agent_rows: bool = True,
        agent_min_stuck_turns: int = 2,
    ) -> None:
        for name, value in (
            ("cascade_threshold", cascade_threshold),
            ("think_cascade_threshold", think_cascade_threshold),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 (or None to disable the cascade check), got {value}")
        if ngram_size < 1:
            raise ValueError(f"ngram_size must be >= 1, got {ngram_size}")
        if agent_min_stuck_turns < 1:
            raise ValueError(f"agent_min_stuck_turns must be >= 1, got {agent_min_stuck_turns}")
        self.cascade_window = cascade_window
        self.ngram_size = ngram_size
        self.ngram_min_words = ngram_min_words
        self.scan_agent_rows = scan_agent_rows
        self.agent_min_stuck_turns = agent_min_stuck_turns
        self.response = Profile(hesitation_density_threshold, cascade_threshold, repetition_threshold)
        self.think = Profile(
            think_hesitation_density_threshold, think_cascade_threshold, think_repetition_threshold
        )

    def segment_stuck(self, text: str, profile: Profile) -> bool:
        if not text:
            return False
        view = _Views(text)
        if profile.hesitation_density is not None:
            limit = profile.hesitation_density * len(text) / 1000.0
            if hesitation_count(view, limit) > limit:
                return True
        if profile.cascade is not None and has_cascade(view, profile.cascade, self.cascade_window):
            return True
        return profile.repetition is not None and high_repetition(
            text, profile.repetition, self.ngram_size, self.ngram_min_words
        )

    def turn_stuck(self, message: dict) -> bool:
        think, response = split_think(message_text(message))
        reasoning = reasoning_of(message)
        if reasoning.strip():
            think = f"{think}\n{reasoning}" if think else reasoning
        return self.segment_stuck(response, self.response) or self.segment_stuck(think, self.think)

    def reason(self, row: dict) -> str | None:
        messages = messages_of(row)
        if messages is None:
            return INVALID_MESSAGES
        assistants = [m for m in messages if m.get("role") == "assistant"]
        if not assistants:
            return None
        if not is_agent_row(messages):
            return DEAD_LOOP if any(self.turn_stuck(m) for m in assistants) else None
        if not self.scan_agent_rows:
            return None
        stuck = 0
        for m in assistants:
            if (message_text(m).strip() or reasoning_of(m).strip()) and self.turn_stuck(m):
                stuck += 1
                if stuck >= self.agent_min_stuck_turns:
                    return DEAD_LOOP
        return None

    def __repr__(self) -> str:
        return f"DeadLoopFilter(response={self.response}, think={self.think}, scan_agent_rows={self.scan_agent_rows})"
