"""Global longest-first deduplication (SPEC 5).

Two conversations are duplicates when they open the same way: same first real user turn (head and
tail) and same first assistant reply (head and tail). Of each such group only the longest (most
messages) survives; among equally long rows the first in input order wins.

The per-row work is three pure functions, :func:`signature`, :func:`message_count` and
:func:`full_hash`, combined by :func:`dedup_key`. The distributed preprocess job calls the same
``dedup_key`` on every row and does the selection with a shuffle, so the two can never disagree.

Selection, as upstream defines it, is one pass keeping a winner per signature: a row with the winner's
full hash is dropped, a row with more messages replaces the winner (which is dropped), any other row
is dropped. Because equal full hashes imply equal message counts, the final winner of a group is
simply *the first row with the most messages*, whatever order the pass sees the group in. That is the
order-free rule the distributed job implements: minimum of ``(-message_count, input_position)``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .base import INVALID_ROW, drop
from .batch import gc_paused, to_rows
from .text import text_of

DUPLICATE = "duplicate"

# A user turn that starts with one of these tags is template boilerplate injected by an agent
# harness, not something a person typed.
SYSTEM_INJECTION = re.compile(
    r"^<(?:system-reminder|system_reminder|context|user_info|attached_files)[ >]", re.IGNORECASE
)

# Group keys: a signature group, or (for rows with an entirely empty signature) an exact-content group.
SIGNATURE_PREFIX = "s:"
FULL_HASH_PREFIX = "f:"


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_real_user(message: Any) -> bool:
    """A user message with text that is not harness boilerplate (``<system-reminder>``...)."""
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    text = _stripped(message.get("content"))
    return bool(text) and SYSTEM_INJECTION.match(text) is None


def head_tail(text: str, n: int) -> str:
    """The stripped text if at most ``2n`` characters, else its first and last ``n`` characters."""
    text = text.strip()
    if len(text) <= 2 * n:
        return text
    return text[:n] + text[len(text) - n :]


def _message_list(row: dict) -> list:
    messages = row.get("messages")
    return messages if isinstance(messages, list) else []


def _stripped(content: Any) -> str:
    return (content if type(content) is str else text_of(content)).strip()


def signature_parts(messages: list, prefix_chars: int = 100, asst_chars: int = 100) -> tuple[str, str]:
    """(user part, assistant part) of the signature.

    The user part is the head+tail of the first real user turn; the assistant part that of the first
    later assistant message with text (tool-only turns are skipped). Without a real user, the first
    two assistant texts stand in. This runs once per row of every dedup, so it is written as one
    pass with the text projection and head+tail inlined.
    """
    i = 0
    for message in messages:
        i += 1
        if not (type(message) is dict or isinstance(message, dict)) or message.get("role") != "user":
            continue
        content = message.get("content")
        text = (content if type(content) is str else text_of(content)).strip()
        if not text or (text[0] == "<" and SYSTEM_INJECTION.match(text) is not None):
            continue
        n = prefix_chars
        user = text if len(text) <= 2 * n else text[:n] + text[len(text) - n :]
        n = asst_chars
        for later in messages[i:]:
            if (type(later) is dict or isinstance(later, dict)) and later.get("role") == "assistant":
                content = later.get("content")
                text = (content if type(content) is str else text_of(content)).strip()
                if text:
                    return user, (text if len(text) <= 2 * n else text[:n] + text[len(text) - n :])
        return user, ""
    texts: list[str] = []
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant":
            text = _stripped(message.get("content"))
            if text:
                texts.append(head_tail(text, asst_chars))
                if len(texts) == 2:
                    break
    return (texts[0] if texts else ""), (texts[1] if len(texts) > 1 else "")


def signature(messages: list, prefix_chars: int = 100, asst_chars: int = 100) -> str | None:
    """MD5 of the JSON array ``[user, assistant]`` (upstream's signature); None when both parts are empty."""
    parts = signature_parts(messages, prefix_chars, asst_chars)
    if not any(parts):
        return None
    return _md5(json.dumps(list(parts), ensure_ascii=False))


def full_hash(messages: Any) -> str:
    """MD5 of the messages as JSON (sorted keys, unescaped unicode)."""
    return _md5(json.dumps(messages, ensure_ascii=False, sort_keys=True, default=str))


def message_count(row: dict) -> int:
    return len(_message_list(row))


def dedup_key(row: dict, prefix_chars: int = 100, asst_chars: int = 100) -> tuple[str, int]:
    """(group key, message count) of a row: the only per-row inputs of the selection.

    The key groups rows exactly as upstream's signature does (same two parts) but hashes them
    without JSON: MD5 of ``"<len(user)>:" + user + assistant``, which is just as injective and several
    times cheaper. Rows with an entirely empty signature (media-only, no messages...) are grouped by
    their full hash, so they only collapse with exact copies. The full hash of every other row is
    not needed: a row with the winner's full hash has the winner's length and always loses the tie.
    """
    group, length = _group(row, prefix_chars, asst_chars)
    if group[0] is None:
        return FULL_HASH_PREFIX + group[1], length
    user, assistant = group
    digest = hashlib.md5(f"{len(user)}:{user}{assistant}".encode("utf-8", "surrogatepass")).hexdigest()
    return SIGNATURE_PREFIX + digest, length


def _group(row: dict, prefix_chars: int, asst_chars: int) -> tuple[tuple[str | None, str], int]:
    """((user part, assistant part), message count), or ((None, full hash), count) for an empty signature.

    Two rows share a :func:`dedup_key` exactly when they share this group, so the one-process
    filter groups by it directly (a dict of string pairs, no hashing) and agrees with the job.
    """
    messages = row.get("messages")
    if not isinstance(messages, list):
        messages = []
    parts = signature_parts(messages, prefix_chars, asst_chars)
    if not parts[0] and not parts[1]:
        return (None, full_hash(row.get("messages") or [])), len(messages)
    return parts, len(messages)


class DedupFilter:
    """Global longest-first deduplication; must see the whole dataset in one call.

    Every drop has reason ``duplicate``; kept rows stay in input order; non-dict rows are dropped as
    ``invalid_row``. Accepts a list of rows, a column dict or a DataFrame; returns lists, like every
    step.
    """

    name = "DedupFilter"

    def __init__(self, prefix_chars: int = 100, asst_chars: int = 100):
        for label, value in (("prefix_chars", prefix_chars), ("asst_chars", asst_chars)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"DedupFilter: {label} must be an int >= 0, got {value!r}")
        self.prefix_chars = prefix_chars
        self.asst_chars = asst_chars

    def key(self, row: dict) -> tuple[str, int]:
        return dedup_key(row, self.prefix_chars, self.asst_chars)

    def __call__(self, rows: Any) -> tuple[list[dict], list[dict]]:
        # The pass allocates a few tuples per row and never a cycle; with a million live rows every
        # automatic collection would walk all of them (1M rows took 21 s with it running), so the
        # cyclic collector is paused for the duration of the call.
        with gc_paused():
            return self._select(to_rows(rows))

    def _select(self, rows: list) -> tuple[list[dict], list[dict]]:
        prefix_chars, asst_chars = self.prefix_chars, self.asst_chars
        # group -> (message count, position) of the current winner
        winners: dict[tuple[str | None, str], tuple[int, int]] = {}
        for position, row in enumerate(rows):
            if not isinstance(row, dict):
                continue
            messages = row.get("messages")
            if type(messages) is not list and not isinstance(messages, list):
                messages = []
            group = signature_parts(messages, prefix_chars, asst_chars)
            if not group[0] and not group[1]:  # as _group(), inlined: this loop is the whole filter
                group = (None, full_hash(row.get("messages") or []))
            length = len(messages)
            best = winners.get(group)
            if best is None or length > best[0]:
                winners[group] = (length, position)
        is_kept = [False] * len(rows)
        for _, position in winners.values():
            is_kept[position] = True
        kept = [row for row, k in zip(rows, is_kept, strict=True) if k]
        if any("drop_reason" in row for row in kept):
            kept = [
                {k: v for k, v in row.items() if k != "drop_reason"} if "drop_reason" in row else row
                for row in kept
            ]
        dropped = [
            drop(row, DUPLICATE if isinstance(row, dict) else INVALID_ROW)
            for row, k in zip(rows, is_kept, strict=True)
            if not k
        ]
        return kept, dropped

    def __repr__(self) -> str:
        return f"DedupFilter(prefix_chars={self.prefix_chars}, asst_chars={self.asst_chars})"
