"""The four strategies and the rewrite of one text from its resolved spans.

``mask`` keeps the first 3 and last 4 characters (all masked when 7 or fewer), ``redact`` deletes,
``hash`` writes ``<ENTITY:12 hex of sha256(salt + original)>``, ``replace`` asks the row's
RowReplacer for a seeded fake.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence

from .replacement import RowReplacer

MASK_CHAR = "*"
MASK_KEEP_HEAD = 3
MASK_KEEP_TAIL = 4
HASH_HEX_CHARS = 12
# A token written by the hash strategy; a later pass never rewrites inside one.
HASH_TOKEN = re.compile(rf"<[A-Z][A-Z_]*:[0-9a-f]{{{HASH_HEX_CHARS}}}>")


def mask(value: str) -> str:
    if len(value) <= MASK_KEEP_HEAD + MASK_KEEP_TAIL:
        return MASK_CHAR * len(value)
    return value[:MASK_KEEP_HEAD] + MASK_CHAR * (len(value) - MASK_KEEP_HEAD - MASK_KEEP_TAIL) + value[-MASK_KEEP_TAIL:]


def hash_token(entity: str, value: str, salt: str) -> str:
    return f"<{entity}:{hashlib.sha256((salt + value).encode()).hexdigest()[:HASH_HEX_CHARS]}>"


def rewrite_text(
    text: str,
    spans: Sequence,
    strategy_of: dict[str, str],
    default_strategy: str,
    replacer: RowReplacer,
    text_is_zh: bool,
    hits: Counter | None = None,
) -> str:
    """``text`` with every span rewritten by its entity's strategy (spans sorted, non-overlapping)."""
    if not spans:
        return text
    protected = [m.span() for m in HASH_TOKEN.finditer(text)] if "<" in text else []
    out = []
    pos = 0
    for span in spans:
        if any(a < span.end and span.start < b for a, b in protected):
            continue
        if hits is not None:
            hits[span.entity] += 1
        original = text[span.start : span.end]
        strategy = strategy_of.get(span.entity, default_strategy)
        if strategy == "replace":
            new = replacer.replace(span.entity, text, span.start, span.end, text_is_zh)
        elif strategy == "mask":
            new = mask(original)
        elif strategy == "hash":
            new = hash_token(span.entity, original, replacer.maker.salt)
        else:
            new = ""
        out.append(text[pos : span.start])
        out.append(new)
        pos = span.end
    out.append(text[pos:])
    return "".join(out)
