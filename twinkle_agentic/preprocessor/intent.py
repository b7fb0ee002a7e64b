"""IntentClassifier: annotate each row with the intent of its key assistant rounds.

A pipeline of detectors, each a callable ``messages -> sorted assistant indices`` with ``intent``
and ``definitive`` attributes. The first detector to claim a round wins it; the row's intent is the
most common round intent (ties go to the earlier detector).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ..data_format import pack_value, user_data_set
from .base import INVALID_ROW, drop
from .batch import to_rows
from .re2_batch import TextBatch, boundary_probes, glued_probe, needs_python, re2_flags, to_re2
from .text import message_text, messages_of, reasoning_of, split_think, tool_call_dicts
from .vocab.intent import (
    CODE_FENCE,
    CODE_FENCE_MIN_CHARS,
    CODE_KEYWORDS,
    DISSATISFACTION_EN,
    DISSATISFACTION_ZH,
    LOGIC_MARKERS,
    MATH_PATTERNS,
    REASONING_MIN_CHARS,
)

INTENT_TOOL_CALL = "tool_call"
INTENT_CODE = "code"
INTENT_MATH = "math"
INTENT_COMPLEX_LOGIC = "complex_logic"
INTENT_REASONING = "reasoning"
INTENT_USER_DISSATISFACTION = "user_dissatisfaction"
INTENT_OTHER = "other"
NO_KEY_ROUNDS = "no_key_rounds"
SCANNED_ROLES = ("user", "assistant")


def has_fenced_block(text: str) -> bool:
    """A fence, at least ``CODE_FENCE_MIN_CHARS`` characters of anything, then a fence."""
    start = text.find(CODE_FENCE)
    return start >= 0 and text.find(CODE_FENCE, start + len(CODE_FENCE) + CODE_FENCE_MIN_CHARS) >= 0


class IntentDetector:
    """Base detector: ``__call__(messages)`` returns the sorted assistant indices it claims."""

    intent: str = INTENT_OTHER
    definitive: bool = False

    def __call__(self, messages: list[dict]) -> list[int]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ToolCallDetector(IntentDetector):
    """Every assistant message with tool calls; definitive (no later detector runs when it fires)."""

    intent = INTENT_TOOL_CALL
    definitive = True

    def __call__(self, messages: list[dict]) -> list[int]:
        return [
            i
            for i, m in enumerate(messages)
            if m.get("role") == "assistant" and tool_call_dicts(m.get("tool_calls"))
        ]


class TextDetector(IntentDetector):
    """A detector that judges each user/assistant text on its own, then claims rounds from the verdicts.

    ``judge_many`` gives the same verdicts as ``judge`` for a whole batch of texts at once;
    :class:`IntentClassifier` calls it once per batch with every user and assistant text.
    """

    def judge(self, text: str) -> bool:
        raise NotImplementedError

    def judge_many(self, batch: TextBatch) -> list[bool]:
        return [self.judge(t) for t in batch.texts]

    def claim(self, roles: Sequence[str | None], verdicts: Sequence[bool]) -> list[int]:
        """Assistant indices claimed, given each message's role and verdict (None: not scanned)."""
        raise NotImplementedError

    def __call__(self, messages: list[dict]) -> list[int]:
        roles = [m.get("role") for m in messages]
        texts = [message_text(m) if r in SCANNED_ROLES else "" for m, r in zip(messages, roles, strict=True)]
        return self.claim(roles, self.judge_many(TextBatch(texts)))


class RegexDetector(TextDetector):
    """At least ``threshold`` hits of one regex in a message; a user hit claims the next assistant.

    Subclasses give ``fragments`` (joined into one alternation, so hits never overlap) and ``flags``.
    Batches are counted with RE2 (:mod:`.re2_batch`), texts RE2 cannot judge exactly with ``re``.
    """

    fragments: Sequence[str] = ()
    flags = 0
    pattern: re.Pattern[str]
    re2_pattern: str | None = None
    glued: str | None = None
    assistant_only = False
    # Below this many characters in a batch ``re`` is cheaper than compiling the RE2 pattern (~1-3 ms).
    re2_min_chars = 4_000

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "fragments" not in cls.__dict__:  # e.g. a subclass that sets ``pattern`` itself: ``re`` only
            return
        source = "|".join(f"(?:{f})" for f in cls.fragments)
        cls.pattern = re.compile(source, cls.flags)
        cls.re2_pattern = re2_flags(cls.flags) + to_re2(source)
        cls.probes = boundary_probes(cls.fragments, cls.flags)
        cls.glued = glued_probe(cls.fragments, cls.flags)

    def __init__(self, threshold: int) -> None:
        if threshold < 1:
            raise ValueError(f"{type(self).__name__} threshold must be >= 1, got {threshold}")
        self.threshold = threshold

    def hits(self, text: str) -> int:
        """Regex hits, counted up to ``threshold``."""
        return sum(1 for _ in itertools.islice(self.pattern.finditer(text), self.threshold))

    def judge(self, text: str) -> bool:
        return self.hits(text) >= self.threshold

    def judge_many(self, batch: TextBatch) -> list[bool]:
        if self.re2_pattern is None or sum(map(len, batch.texts)) < self.re2_min_chars:
            return super().judge_many(batch)
        counts = batch.counts(self.re2_pattern)
        verdicts = [n >= self.threshold for n in counts]
        junctions = batch.junctions()
        recount = {i for i, at in junctions.items() if needs_python(batch.texts[i], at, self.probes)}
        matched = [i for i, n in enumerate(counts) if n]  # a count restarts only after a match
        if self.glued is not None and matched:
            recount.update(batch.matching(self.glued, matched))
        for i in recount:
            verdicts[i] = self.judge(batch.texts[i])
        return verdicts

    def claim(self, roles: Sequence[str | None], verdicts: Sequence[bool]) -> list[int]:
        found: list[int] = []
        pending = False  # a user message matched; claim the next assistant
        for i, role in enumerate(roles):
            if role == "assistant":
                if pending or verdicts[i]:
                    found.append(i)
                pending = False
            elif role == "user" and not self.assistant_only and not pending:
                pending = verdicts[i]
        return found

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold})"


class CodeDetector(RegexDetector):
    """A fenced block with >= 10 characters inside, or >= ``threshold`` code keyword hits."""

    intent = INTENT_CODE
    fragments = CODE_KEYWORDS
    re2_min_chars = 20_000

    def __init__(self, threshold: int = 3) -> None:
        super().__init__(threshold)

    def judge(self, text: str) -> bool:
        return has_fenced_block(text) or super().judge(text)

    def judge_many(self, batch: TextBatch) -> list[bool]:
        verdicts = super().judge_many(batch)
        return [v or has_fenced_block(t) for v, t in zip(verdicts, batch.texts, strict=True)]


class MathDetector(RegexDetector):
    """>= ``threshold`` hits of LaTeX, math symbols, equations or math vocabulary (case-sensitive)."""

    intent = INTENT_MATH
    fragments = MATH_PATTERNS

    def __init__(self, threshold: int = 4) -> None:
        super().__init__(threshold)


class ComplexLogicDetector(RegexDetector):
    """>= ``threshold`` discourse markers (ZH/EN, case-insensitive) in an assistant message."""

    intent = INTENT_COMPLEX_LOGIC
    fragments = LOGIC_MARKERS
    flags = re.IGNORECASE | re.DOTALL
    assistant_only = True

    def __init__(self, threshold: int = 6) -> None:
        super().__init__(threshold)


class ReasoningDetector(IntentDetector):
    """Assistant messages whose reasoning field or think-block text has >= ``min_chars`` characters."""

    intent = INTENT_REASONING

    def __init__(self, min_chars: int = REASONING_MIN_CHARS) -> None:
        self.min_chars = min_chars

    def __call__(self, messages: list[dict]) -> list[int]:
        found = []
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            reasoning = reasoning_of(m)
            if not reasoning:
                text = message_text(m)
                reasoning = split_think(text)[0] if "<" in text else ""
            if len(reasoning.strip()) >= self.min_chars:
                found.append(i)
        return found


class UserDissatisfactionDetector(RegexDetector):
    """A user message after some assistant reply that complains; claims the next assistant index."""

    intent = INTENT_USER_DISSATISFACTION
    fragments = (*DISSATISFACTION_EN, *DISSATISFACTION_ZH)
    flags = re.IGNORECASE

    def __init__(self) -> None:
        super().__init__(1)

    def claim(self, roles: Sequence[str | None], verdicts: Sequence[bool]) -> list[int]:
        found = []
        seen_assistant = False
        pending = False
        for i, role in enumerate(roles):
            if role == "assistant":
                if pending:
                    found.append(i)
                    pending = False
                seen_assistant = True
            elif role == "user" and seen_assistant and not pending:
                pending = verdicts[i]
        return found

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def default_detectors() -> list[IntentDetector]:
    return [
        ToolCallDetector(),
        CodeDetector(),
        MathDetector(),
        ComplexLogicDetector(),
        ReasoningDetector(),
        UserDissatisfactionDetector(),
    ]


class IntentClassifier:
    """Annotates every row: ``row[intent_field]`` plus ``user_data`` entries ``key_rounds``/``intents``.

    SPEC Decision: by default no row is dropped; rows nothing detects get ``intent='other'``,
    ``key_rounds=[]`` and ``intents={}`` (an empty ``key_rounds`` means every assistant round).
    ``drop_no_key_rounds=True`` restores upstream's behaviour: such rows drop as ``no_key_rounds``.
    ``user_data`` as a pair list or None gets JSON-packed pairs (other entries kept); a dict gets the
    same keys; any other value is left alone. Rows whose messages are missing, not a list or hold
    non-dict entries are annotated as ``other`` (and dropped only under ``drop_no_key_rounds``).
    """

    name = "IntentClassifier"
    needs_actor = False

    def __init__(
        self,
        detectors: Sequence[IntentDetector] | None = None,
        intent_field: str = "intent",
        drop_no_key_rounds: bool = False,
    ) -> None:
        self.detectors = list(detectors) if detectors is not None else default_detectors()
        for d in self.detectors:
            if not callable(d) or not isinstance(getattr(d, "intent", None), str):
                raise TypeError(f"detector {d!r} must be callable and have a str 'intent' attribute")
        self.intent_field = intent_field
        self.drop_no_key_rounds = drop_no_key_rounds

    def classify(self, messages: Any) -> tuple[str, dict[int, str]]:
        """``(primary_intent, {assistant_index: intent})`` for one message list."""
        messages = self._messages(messages)
        if not messages:
            return INTENT_OTHER, {}
        return self._combine(detector(messages) for detector in self.detectors)

    @staticmethod
    def _messages(messages: Any) -> list[dict] | None:
        return messages_of({"messages": messages}) if isinstance(messages, list) else None

    def _combine(self, claims: Iterable[list[int]]) -> tuple[str, dict[int, str]]:
        """Combine the detectors' claims in order; stops after a definitive detector that claimed."""
        rounds: dict[int, str] = {}
        order: dict[str, int] = {}
        for (rank, detector), claimed in zip(enumerate(self.detectors), claims, strict=False):  # lazy
            for idx in claimed:
                rounds.setdefault(idx, detector.intent)
            order.setdefault(detector.intent, rank)
            if claimed and getattr(detector, "definitive", False):
                break
        if not rounds:
            return INTENT_OTHER, {}
        counts = Counter(rounds.values())
        primary = min(counts, key=lambda intent: (-counts[intent], order.get(intent, len(order))))
        return primary, dict(sorted(rounds.items()))

    def classify_many(self, messages_list: Sequence[Any]) -> list[tuple[str, dict[int, str]]]:
        """``classify`` for many message lists: text detectors judge all texts of the batch at once."""
        lists = [self._messages(m) for m in messages_list]
        roles = [[m.get("role") for m in msgs] if msgs else [] for msgs in lists]
        texts = [
            message_text(m)
            for msgs, rs in zip(lists, roles, strict=True)
            if msgs
            for m, r in zip(msgs, rs, strict=True)
            if r in SCANNED_ROLES
        ]
        batch = TextBatch(texts)
        verdicts = [d.judge_many(batch) if isinstance(d, TextDetector) else None for d in self.detectors]
        out: list[tuple[str, dict[int, str]]] = []
        k = 0  # index of the row's first scanned text in the batch
        for msgs, rs in zip(lists, roles, strict=True):
            if not msgs:
                out.append((INTENT_OTHER, {}))
                continue
            scanned = [i for i, r in enumerate(rs) if r in SCANNED_ROLES]

            def claims(msgs: list[dict] = msgs, rs: list = rs, scanned: list[int] = scanned, k: int = k):
                for detector, judged in zip(self.detectors, verdicts, strict=True):
                    if judged is None:
                        yield detector(msgs)
                        continue
                    row_verdicts: list[bool | None] = [None] * len(rs)
                    for j, i in enumerate(scanned):
                        row_verdicts[i] = judged[k + j]
                    yield detector.claim(rs, row_verdicts)

            out.append(self._combine(claims()))
            k += len(scanned)
        return out

    def annotate(self, row: dict, classified: tuple[str, dict[int, str]] | None = None) -> dict:
        primary, rounds = classified if classified is not None else self.classify(row.get("messages"))
        out = dict(row)
        out[self.intent_field] = primary
        key_rounds = list(rounds)
        intents = {str(i): v for i, v in rounds.items()}
        user_data = row.get("user_data")
        if user_data is None or isinstance(user_data, (list, tuple)):
            items = user_data_set(user_data, "key_rounds", key_rounds)
            out["user_data"] = user_data_set(items, "intents", intents)
        elif isinstance(user_data, dict):
            out["user_data"] = {
                **user_data,
                "key_rounds": pack_value(key_rounds),
                "intents": pack_value(intents),
            }
        return out

    def __call__(self, rows: Any) -> tuple[list[dict], list[dict]]:
        rows = to_rows(rows)
        valid = [row for row in rows if isinstance(row, dict)]
        classified = iter(self.classify_many([row.get("messages") for row in valid]))
        kept: list[dict] = []
        dropped: list[dict] = []
        for row in rows:
            if not isinstance(row, dict):
                dropped.append(drop(row, INVALID_ROW))
                continue
            out = self.annotate(row, next(classified))
            if self.drop_no_key_rounds and out[self.intent_field] == INTENT_OTHER:
                dropped.append(drop(out, NO_KEY_ROUNDS))
            else:
                out.pop("drop_reason", None)
                kept.append(out)
        return kept, dropped

    def __repr__(self) -> str:
        return f"IntentClassifier(detectors={self.detectors!r}, drop_no_key_rounds={self.drop_no_key_rounds})"
