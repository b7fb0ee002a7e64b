"""DeadLoopFilter: assistant turns stuck in hesitation, correction cascades or n-gram repetition.

Hot path. The filter collects every segment (think and response part of each assistant turn) of a
batch, gets upper bounds for all of them from ``dead_loop_bounds`` in a few numpy passes per chunk,
and runs the exact regex or n-gram pass only for the few segments whose bound crosses a threshold.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from . import dead_loop_bounds as bounds
from .base import INVALID_MESSAGES, Filter
from .text import is_agent_row, message_text, messages_of, reasoning_of, split_think
from .vocab.dead_loop import CASCADE, EN_HESITATION, JA_HESITATION, KO_HESITATION, ZH_HESITATION

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
CASCADE_RE = _join(CASCADE, re.IGNORECASE)


def _hesitation_exact(text: str, langs: tuple[str, ...] | list[str] = LANGS) -> int:
    return sum(len(HESITATION_RES[lang].findall(text)) for lang in langs)


def hesitation_count(text: str, limit: float | None = None) -> int:
    """Number of hesitation markers in ``text`` (each language's matches never overlap).

    With ``limit``, returns early with a bound ``<= limit`` when the count cannot exceed it.
    """
    per_lang = {lang: int(found[0]) for lang, found in bounds.segment_bounds([text]).hesitation.items()}
    bound = sum(per_lang.values())
    if limit is not None and bound <= limit:
        return bound
    return _hesitation_exact(text, [lang for lang, b in per_lang.items() if b])


def _hesitation_above(text: str, langs: list[str], limit: float) -> bool:
    """Whether the exact marker count exceeds ``limit`` (stops counting as soon as it does)."""
    count = 0
    for lang in langs:
        for _ in HESITATION_RES[lang].finditer(text):
            count += 1
            if count > limit:
                return True
    return False


def _cascade_exact(text: str, threshold: int, window: int) -> bool:
    if threshold <= 1:
        return CASCADE_RE.search(text) is not None
    starts: list[int] = []
    for m in CASCADE_RE.finditer(text):
        starts.append(m.start())
        if len(starts) >= threshold and starts[-1] - starts[-threshold] <= window:
            return True
    return False


class _Found:
    """``dead_loop_bounds.segment_bounds`` of a batch of segments, as plain lists for cheap indexing."""

    __slots__ = ("_per_lang", "hesitation", "cascade", "repetition")

    def __init__(self, texts: list[str], n: int, min_words: int) -> None:
        found = bounds.segment_bounds(texts, n, min_words)
        self._per_lang = {lang: found.hesitation[lang].tolist() for lang in LANGS}
        self.hesitation = sum(found.hesitation[lang] for lang in LANGS).tolist()
        self.cascade = found.cascade.tolist()
        self.repetition = found.repetition.tolist()

    def languages(self, i: int) -> list[str]:
        """Languages whose markers segment ``i`` may hold, most anchors first."""
        counts = [(self._per_lang[lang][i], lang) for lang in LANGS]
        return [lang for count, lang in sorted(counts, reverse=True) if count]


def has_cascade(text: str, threshold: int, window: int) -> bool:
    """``threshold`` (>= 1) consecutive correction-marker starts within ``window`` characters."""
    return bool(bounds.segment_bounds([text]).cascade[0] >= threshold) and _cascade_exact(
        text, threshold, window
    )


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
    if isinstance(tokens, str):  # characters: their code points are the ids
        ids = np.frombuffer(tokens.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
    else:  # equal words get equal ids: setdefault keeps the first id it was offered
        ids = np.fromiter(map({}.setdefault, tokens, itertools.count()), dtype=np.uint64, count=len(tokens))
    return 1.0 - _distinct_ngrams(ids, n) / total


def _repetition_exact(text: str, threshold: float, n: int, min_words: int) -> bool:
    if bounds.head_is_cjk(text):
        chars = "".join(text.split())
        return len(chars) >= min_words * n and repetition_ratio(chars, n) > threshold
    if len(text) < 2 * min_words - 1:
        return False
    words = text.split()
    return len(words) >= min_words and repetition_ratio(words, n) > threshold


def high_repetition(text: str, threshold: float, n: int, min_words: int) -> bool:
    """n-gram repetition above ``threshold``: characters for CJK text, else whitespace-split words.

    Text is CJK when ``cjk_ratio(text[:500]) > 0.3``; CJK needs ``min_words * n`` characters
    (whitespace removed), words need ``min_words`` tokens.
    """
    bound = float(bounds.segment_bounds([text], n, min_words, markers=False).repetition[0])
    return bound > threshold and _repetition_exact(text, threshold, n, min_words)


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
        return self._stuck(text, profile, _Found([text], self.ngram_size, self.ngram_min_words), 0)

    def _stuck(self, text: str, profile: Profile, found: _Found, i: int) -> bool:
        """Whether segment ``i`` (``text``) is stuck; exact passes only where its bound crosses."""
        if not text:
            return False
        if profile.hesitation_density is not None:
            limit = profile.hesitation_density * len(text) / 1000.0
            if found.hesitation[i] > limit and _hesitation_above(text, found.languages(i), limit):
                return True
        if (
            profile.cascade is not None
            and found.cascade[i] >= profile.cascade
            and _cascade_exact(text, profile.cascade, self.cascade_window)
        ):
            return True
        return (
            profile.repetition is not None
            and found.repetition[i] > profile.repetition
            and _repetition_exact(text, profile.repetition, self.ngram_size, self.ngram_min_words)
        )

    @staticmethod
    def segments(message: dict) -> tuple[str, str]:
        """(response, think) of an assistant turn: think blocks plus the reasoning field."""
        think, response = split_think(message_text(message))
        reasoning = reasoning_of(message)
        if reasoning.strip():
            think = f"{think}\n{reasoning}" if think else reasoning
        return response, think

    def reasons(self, rows: list[dict]) -> list[str | None]:
        # 1. the turns each row needs judged; 2. bounds for all their segments at once; 3. verdicts
        plans: list[str | None | tuple[bool, list[int]]] = []
        texts: list[str] = []
        for row in rows:
            messages = messages_of(row)
            if messages is None:
                plans.append(INVALID_MESSAGES)
                continue
            assistants = [m for m in messages if m.get("role") == "assistant"]
            agent = bool(assistants) and is_agent_row(messages)
            if not assistants or (agent and not self.scan_agent_rows):
                plans.append(None)
                continue
            turns = []
            for m in assistants:
                if agent and not (message_text(m).strip() or reasoning_of(m).strip()):
                    continue  # agent rows count only turns with text
                turns.append(len(texts))
                texts.extend(self.segments(m))
            plans.append((agent, turns))
        found = _Found(texts, self.ngram_size, self.ngram_min_words)

        def turn_stuck(k: int) -> bool:
            return self._stuck(texts[k], self.response, found, k) or self._stuck(
                texts[k + 1], self.think, found, k + 1
            )

        out: list[str | None] = []
        for plan in plans:
            if not isinstance(plan, tuple):
                out.append(plan)
                continue
            agent, turns = plan
            needed = self.agent_min_stuck_turns if agent else 1
            stuck = 0
            for k in turns:
                if turn_stuck(k):
                    stuck += 1
                    if stuck >= needed:
                        break
            out.append(DEAD_LOOP if stuck >= needed else None)
        return out

    def reason(self, row: dict) -> str | None:
        return self.reasons([row])[0]

    def __repr__(self) -> str:
        return f"DeadLoopFilter(response={self.response}, think={self.think}, scan_agent_rows={self.scan_agent_rows})"
