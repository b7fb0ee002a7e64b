"""HardFilter: deterministic rules that remove rows no amount of training could make useful."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .base import INVALID_MESSAGES, Filter
from .text import (
    cjk_ratio,
    has_media,
    message_text,
    messages_of,
    reasoning_of,
    split_think,
    tool_call_dicts,
)
from .vocab.hard import CJK_SIMPLE, EN_SIMPLE

NO_USER = "no_user"
TRIVIAL_SINGLE_TURN = "trivial_single_turn"
SHALLOW_REPLY = "shallow_reply"
ALL_EMPTY_ASSISTANT = "all_empty_assistant"
SYSTEM_DENY_KEYWORD = "system_deny_keyword"
ROUND_TOO_LONG = "round_too_long"
TOTAL_TOO_LONG = "total_too_long"
TOO_MANY_ROUNDS = "too_many_rounds"

_EN_SIMPLE_RE = re.compile("|".join(f"(?:{p})" for p in EN_SIMPLE), re.IGNORECASE | re.DOTALL)
_CJK_SIMPLE_RE = re.compile("|".join(f"(?:{p})" for p in CJK_SIMPLE), re.IGNORECASE | re.DOTALL)
CJK_SCRIPT_RATIO = 0.3


def is_simple_query(text: str, min_chars: int | None, min_chars_cjk: int | None) -> bool:
    """Empty, shorter than the script's threshold, or a whole-text match of a simple-query shape."""
    text = text.strip()
    if not text:
        return True
    cjk = cjk_ratio(text) >= CJK_SCRIPT_RATIO
    threshold = min_chars_cjk if cjk else min_chars
    if threshold is not None and len(text) < threshold:
        return True
    if len(text) > 200:  # every shape is bounded far below this: skip the regex on long queries
        return False
    return (_CJK_SIMPLE_RE if cjk else _EN_SIMPLE_RE).fullmatch(text) is not None


class HardFilter(Filter):
    """Drops rows by fixed rules, checked in order; the first that fires is the reason.

    ``invalid_messages`` (messages not a list of dicts; missing or None counts as empty),
    ``no_user``, ``trivial_single_turn``, ``shallow_reply``, ``all_empty_assistant``,
    ``system_deny_keyword``, ``round_too_long``, ``total_too_long``, ``too_many_rounds``.
    A threshold of None disables its rule. Unknown roles and non-string content never raise: content
    that is not text projects to ``''``.

    Thinking qualifies (exempting a trivial query or a short reply) when the reasoning field, or the
    inner text of inline ``<think>`` blocks when no field is set, has at least ``min_thinking_chars``
    characters after stripping (SPEC Decision: upstream ignores inline blocks).
    """

    def __init__(
        self,
        min_user_chars: int | None = 10,
        min_user_chars_cjk: int | None = 6,
        min_assistant_chars_2turn: int | None = 80,
        min_thinking_chars: int | None = 200,
        system_deny_keywords: Sequence[str] | None = None,
        max_chars_per_round: int | None = None,
        max_total_chars: int | None = None,
        max_rounds: int | None = None,
        allow_incomplete_role: bool = False,
    ) -> None:
        self.min_user_chars = min_user_chars
        self.min_user_chars_cjk = min_user_chars_cjk
        self.min_assistant_chars_2turn = min_assistant_chars_2turn
        self.min_thinking_chars = min_thinking_chars
        self.max_chars_per_round = max_chars_per_round
        self.max_total_chars = max_total_chars
        self.max_rounds = max_rounds
        self.allow_incomplete_role = allow_incomplete_role
        if isinstance(system_deny_keywords, str):
            system_deny_keywords = [system_deny_keywords]
        keywords = list(system_deny_keywords or ())
        for k in keywords:
            if not isinstance(k, str) or not k:
                raise ValueError(f"system_deny_keywords entries must be non-empty strings, got {k!r}")
        self.system_deny_keywords = keywords
        self._deny_re = (
            re.compile("|".join(re.escape(k.lower()) for k in sorted(set(keywords), key=len, reverse=True)))
            if keywords
            else None
        )

    def has_thinking(self, message: dict) -> bool:
        if self.min_thinking_chars is None:
            return False
        reasoning = reasoning_of(message)
        if not reasoning:
            text = message_text(message)
            if "<" not in text:
                return False
            reasoning = split_think(text)[0]
        return len(reasoning.strip()) >= self.min_thinking_chars

    def reason(self, row: dict) -> str | None:
        messages = messages_of(row)
        if messages is None:
            return INVALID_MESSAGES
        users = []
        assistants = []
        first_system = None
        for m in messages:
            role = m.get("role")
            if role == "user":
                users.append(m)
            elif role == "assistant":
                assistants.append(m)
            elif role == "system" and first_system is None:
                first_system = m
        if not users:
            return None if self.allow_incomplete_role else NO_USER

        if (
            len(users) == 1
            and isinstance(users[0].get("content"), str)
            and is_simple_query(users[0]["content"], self.min_user_chars, self.min_user_chars_cjk)
            and not (assistants and self.has_thinking(assistants[0]))
        ):
            return TRIVIAL_SINGLE_TURN
        if (
            self.min_assistant_chars_2turn is not None
            and len(users) == 1
            and len(assistants) == 1
            and len(message_text(assistants[0])) < self.min_assistant_chars_2turn
            and not self.has_thinking(assistants[0])
        ):
            return SHALLOW_REPLY
        if assistants and all(self._is_empty(m) for m in assistants):
            return ALL_EMPTY_ASSISTANT
        if (
            self._deny_re is not None
            and first_system is not None
            and self._deny_re.search(message_text(first_system).lower())
        ):
            return SYSTEM_DENY_KEYWORD
        if self.max_chars_per_round is not None or self.max_total_chars is not None:
            lengths = [len(message_text(m)) for m in messages]
            if self.max_chars_per_round is not None and lengths and max(lengths) > self.max_chars_per_round:
                return ROUND_TOO_LONG
            if self.max_total_chars is not None and sum(lengths) > self.max_total_chars:
                return TOTAL_TOO_LONG
        if self.max_rounds is not None and len(assistants) > self.max_rounds:
            return TOO_MANY_ROUNDS
        return None

    def _is_empty(self, message: dict) -> bool:
        content = message.get("content")
        return not (
            message_text(message).strip()
            or has_media(content)
            or tool_call_dicts(message.get("tool_calls"))
            or self.has_thinking(message)
        )

    def __repr__(self) -> str:
        return (
            f"HardFilter(min_user_chars={self.min_user_chars}, min_user_chars_cjk={self.min_user_chars_cjk}, "
            f"min_assistant_chars_2turn={self.min_assistant_chars_2turn}, "
            f"min_thinking_chars={self.min_thinking_chars}, max_rounds={self.max_rounds})"
        )
