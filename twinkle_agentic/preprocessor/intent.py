"""IntentClassifier: annotate each row with the intent of its key assistant rounds.

A pipeline of detectors, each a callable ``messages -> sorted assistant indices`` with ``intent``
and ``definitive`` attributes. The first detector to claim a round wins it; the row's intent is the
most common round intent (ties go to the earlier detector).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..data_format import pack_value, user_data_set
from .base import INVALID_ROW, drop
from .batch import to_rows
from .text import message_text, messages_of, normalise_tool_calls, reasoning_of, split_think
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


def _join(fragments: Sequence[str], flags: int = 0) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{f})" for f in fragments), flags)


_LEADING_CLASSES = {r"\d": "0123456789", "[a-z]": "abcdefghijklmnopqrstuvwxyz"}


def _literal_first(fragment: str) -> list[str]:
    """Rewrite a fragment so it starts with a literal.

    ``\\bword`` becomes ``w(?<!\\w.)ord``; a leading ``\\d``/``[a-z]`` (after an optional ``\\b``)
    is expanded into one alternative per character (``\\d+`` into ``0\\d*``, ``1\\d*``...).
    """
    boundary = fragment.startswith(r"\b")
    body = fragment[2:] if boundary else fragment
    guard = r"(?<!\w.)" if boundary else ""
    for cls, chars in _LEADING_CLASSES.items():
        if body.startswith(cls):
            rest = body[len(cls) :]
            if rest.startswith("+"):
                rest = cls + "*" + rest[1:]
            return [f"{c}{guard}{rest}" for c in chars]
    if boundary and body[:1].isalnum():
        return [f"{body[0]}{guard}{body[1:]}"]
    return [fragment]


def _fast_join(fragments: Sequence[str], flags: int = 0) -> re.Pattern[str]:
    """One alternation whose branches start with distinct literals, grouped by that first character.

    The engine then jumps straight to candidate characters and tries one branch there, instead of
    trying every alternative at every position.
    """
    groups: dict[str, list[str]] = {}
    for fragment in fragments:
        for alt in _literal_first(fragment):
            head = alt[:2] if alt.startswith("\\") else alt[0]
            groups.setdefault(head, []).append(alt[len(head) :])
    branches = [head + (f"(?:{'|'.join(tails)})" if len(tails) > 1 else tails[0]) for head, tails in groups.items()]
    return re.compile("|".join(branches), flags)


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
            if m.get("role") == "assistant" and normalise_tool_calls(m.get("tool_calls"))
        ]


class RegexDetector(IntentDetector):
    """Counts regex hits per user/assistant message; a user hit claims the next assistant index."""

    pattern: re.Pattern[str]
    assistant_only = False
    lowercase = False  # match lower() text (case-insensitive without re.IGNORECASE, which is slow)

    def __init__(self, threshold: int) -> None:
        if threshold < 1:
            raise ValueError(f"{type(self).__name__} threshold must be >= 1, got {threshold}")
        self.threshold = threshold

    def matches(self, text: str) -> bool:
        if self.lowercase:
            text = text.lower()
        hits = itertools.islice(self.pattern.finditer(text), self.threshold)
        return sum(1 for _ in hits) >= self.threshold

    def __call__(self, messages: list[dict]) -> list[int]:
        found: set[int] = set()
        pending = False  # a user message matched; claim the next assistant
        for i, m in enumerate(messages):
            role = m.get("role")
            if role == "assistant":
                if pending or self.matches(message_text(m)):
                    found.add(i)
                pending = False
            elif role == "user" and not self.assistant_only and not pending:
                pending = self.matches(message_text(m))
        return sorted(found)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold})"


class CodeDetector(RegexDetector):
    """A fenced block with >= 10 characters inside, or >= ``threshold`` code keyword hits."""

    intent = INTENT_CODE
    pattern = _fast_join(CODE_KEYWORDS)

    def __init__(self, threshold: int = 3) -> None:
        super().__init__(threshold)

    def matches(self, text: str) -> bool:
        return has_fenced_block(text) or super().matches(text)


class MathDetector(RegexDetector):
    """>= ``threshold`` hits of LaTeX, math symbols, equations or math vocabulary."""

    intent = INTENT_MATH
    pattern = _fast_join(MATH_PATTERNS)

    def __init__(self, threshold: int = 4) -> None:
        super().__init__(threshold)


class ComplexLogicDetector(RegexDetector):
    """>= ``threshold`` discourse markers (ZH/EN) in an assistant message."""

    intent = INTENT_COMPLEX_LOGIC
    pattern = _fast_join(LOGIC_MARKERS, re.DOTALL)
    lowercase = True
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


class UserDissatisfactionDetector(IntentDetector):
    """A user message after some assistant reply that complains; claims the next assistant index."""

    intent = INTENT_USER_DISSATISFACTION
    pattern = re.compile(
        "|".join(f"(?:{p})" for p in DISSATISFACTION_EN + DISSATISFACTION_ZH), re.IGNORECASE
    )

    def __call__(self, messages: list[dict]) -> list[int]:
        found = []
        seen_assistant = False
        pending = False
        for i, m in enumerate(messages):
            role = m.get("role")
            if role == "assistant":
                if pending:
                    found.append(i)
                    pending = False
                seen_assistant = True
            elif role == "user" and seen_assistant and not pending:
                pending = self.pattern.search(message_text(m)) is not None
        return found


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
        messages = messages if isinstance(messages, list) else None
        if messages is not None:
            messages = messages_of({"messages": messages})
        if not messages:
            return INTENT_OTHER, {}
        rounds: dict[int, str] = {}
        order: dict[str, int] = {}
        for rank, detector in enumerate(self.detectors):
            claimed = detector(messages)
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

    def annotate(self, row: dict) -> dict:
        primary, rounds = self.classify(row.get("messages"))
        out = dict(row)
        out[self.intent_field] = primary
        key_rounds = list(rounds)
        intents = {str(i): v for i, v in rounds.items()}
        user_data = row.get("user_data")
        if user_data is None or isinstance(user_data, (list, tuple)):
            items = user_data_set(user_data, "key_rounds", key_rounds)
            out["user_data"] = user_data_set(items, "intents", intents)
        elif isinstance(user_data, dict):
            out["user_data"] = {**user_data, "key_rounds": pack_value(key_rounds), "intents": pack_value(intents)}
        return out

    def __call__(self, rows: Any) -> tuple[list[dict], list[dict]]:
        kept: list[dict] = []
        dropped: list[dict] = []
        for row in to_rows(rows):
            if not isinstance(row, dict):
                dropped.append(drop(row, INVALID_ROW))
                continue
            out = self.annotate(row)
            if self.drop_no_key_rounds and out[self.intent_field] == INTENT_OTHER:
                dropped.append(drop(out, NO_KEY_ROUNDS))
            else:
                out.pop("drop_reason", None)
                kept.append(out)
        return kept, dropped

    def __repr__(self) -> str:
        return f"IntentClassifier(detectors={self.detectors!r}, drop_no_key_rounds={self.drop_no_key_rounds})"
