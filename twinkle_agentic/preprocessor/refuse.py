"""RefuseFilter: rows whose first assistant reply refuses the task."""

from __future__ import annotations

import re

from .base import INVALID_MESSAGES, Filter
from .text import message_text, messages_of, strip_think
from .vocab.refuse import ANCHORS, EN_ANCHORS, PATTERNS

REFUSAL = "refusal"
REFUSAL_RE = re.compile("|".join(f"(?:{p})" for p in PATTERNS), re.IGNORECASE | re.DOTALL)


def is_refusal(text: str, check_window: int = 600) -> bool:
    """True when ``text[:check_window]`` holds a self-referential refusal (EN, ZH, JA, KO)."""
    if check_window <= 0 or not text:
        return False
    window = text[:check_window]
    folded = " ".join(window.casefold().split())
    if not any(a in folded for a in (EN_ANCHORS if window.isascii() else ANCHORS)):
        return False
    return REFUSAL_RE.search(window) is not None


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
