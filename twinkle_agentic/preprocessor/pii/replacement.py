"""Per-row replacement with the ``replace`` strategy: consistent within a row, collision-free.

A row keeps a map ``(entity, normalised original) -> fake`` filled in message order, so every
mention of the same e-mail, phone or name gets the same fake throughout a conversation. A value
that already carries the mark of an earlier pass (marks.py) is left as it is.
"""

from __future__ import annotations

import re

from . import marks
from .entities import DIGIT_ENTITIES, TEXT_ENTITIES
from .fakes import FakeMaker, normalise, render

MAX_REDRAWS = 10
_CJK = re.compile(r"[\u4e00-\u9fff]")
_WORD_BEFORE = re.compile(r"([A-Z][\w'.-]*)\s+$")
_WORD_AFTER = re.compile(r"^\s+([A-Z][\w'-]*)")


def text_variants(entity: str, text: str, start: int, end: int) -> list[str]:
    """The span, plus its neighbours where a later pass's NER may cut a fake differently: a
    one-word span joined with the capitalised word before or after; a 3+ word span without its
    first or last word; a Chinese span grown or shrunk by up to two characters at either end."""
    value = text[start:end]
    out = [value]
    if entity not in ("PERSON", "LOCATION"):
        return out
    if _CJK.search(value):
        # LAC may cut a fake differently: try the span grown or shrunk by up to two CJK characters
        # on either side.
        lefts = [start - k for k in (0, 1, 2) if start - k >= 0 and all(_CJK.match(c) for c in text[start - k : start])]
        rights = [end + k for k in (0, 1, 2) if end + k <= len(text) and all(_CJK.match(c) for c in text[end : end + k])]
        lefts += [start + k for k in (1, 2) if end - start - k >= 2]
        rights += [end - k for k in (1, 2) if end - start - k >= 2]
        for a in lefts:
            for b in rights:
                if b - a >= 2 and text[a:b] != value:
                    out.append(text[a:b])
        return out
    words = value.split()
    if len(words) == 1:
        before = _WORD_BEFORE.search(text[max(0, start - 40) : start])
        after = _WORD_AFTER.search(text[end : end + 40])
        if before:
            out.append(f"{before.group(1)} {value}")
        if after:
            out.append(f"{value} {after.group(1)}")
    elif len(words) >= 3:
        out.extend((" ".join(words[1:]), " ".join(words[:-1])))
    return out


def is_replacement(salt: str, entity: str, text: str, start: int, end: int) -> bool:
    """True when the value at text[start:end] carries the mark of a replacement made with ``salt``."""
    value = text[start:end]
    if entity in DIGIT_ENTITIES:
        digits = re.sub(r"\D", "", value) + ("X" if value.rstrip()[-1:] in ("X", "x") else "")
        return marks.has_digit_mark(salt, digits)
    if entity == "IBAN_CODE":
        return marks.has_iban_mark(salt, normalise(entity, value))
    if entity == "EMAIL_ADDRESS":
        return marks.is_reserved_email(value)
    if entity == "IP_ADDRESS":
        return marks.is_reserved_ip(value)
    if entity in TEXT_ENTITIES:
        return any(marks.has_text_mark(salt, v) for v in text_variants(entity, text, start, end))
    return marks.has_char_mark(salt, value)


class RowReplacer:
    """Fakes for one row. ``replace`` returns the text to write for one detected span."""

    def __init__(self, maker: FakeMaker) -> None:
        self.maker = maker
        self._fakes: dict[tuple[str, str], str] = {}
        self._used: set[str] = set()

    def replace(self, entity: str, text: str, start: int, end: int, text_is_zh: bool) -> str:
        original = text[start:end]
        norm = normalise(entity, original)
        if not norm or is_replacement(self.maker.salt, entity, text, start, end):
            return original
        key = (entity, norm)
        fake = self._fakes.get(key)
        if fake is None:
            zh = text_is_zh or bool(_CJK.search(original)) or entity.startswith("CN_")
            locale = "zh_CN" if zh else "en_US"
            for attempt in range(MAX_REDRAWS + 1):
                fake = self.maker.make(entity, original, norm, locale, attempt)
                if fake != norm and fake not in self._used:
                    break
            self._fakes[key] = fake
            self._used.add(fake)
        return render(entity, original, fake)
