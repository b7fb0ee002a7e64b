"""TokenSoupFilter: garbled assistant output (broken decoding, leaked special tokens, script chaos).

Hot path: every count is a C-level scan (``str.count``, character-class runs, ``subn`` counts);
the single-character-run check first samples every 10th character, since a run of 20 always
covers two neighbouring samples, and only verifies the few candidates.
"""

from __future__ import annotations

import functools
import re

from .base import INVALID_MESSAGES, Filter
from .text import message_text, messages_of

TOKEN_SOUP = "token_soup"

REPLACEMENT_CHAR = "\ufffd"
# Byte-level gates on the UTF-8 encoding (one fast C pass each): C0 controls and DEL are single
# bytes that never occur inside multi-byte sequences; private-use characters start with these bytes.
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
_PRIVATE_USE_LEAD = re.compile(rb"\xee|\xef[\x80-\xa3]|\xf3[\xb0-\xbf]|\xf4[\x80-\x8f]")
PRIVATE_USE_RUN = re.compile("[\ue000-\uf8ff\U000f0000-\U0010ffff]+")
SPECIAL_TOKEN = re.compile(
    r"<\|[^|>\n]{1,40}\|>"  # <|im_end|>, <|endoftext|>
    r"|</s>"
    r"|\[/?(?:PAD|UNK|SEP|CLS|MASK)\]"  # case-sensitive: dp[mask] is code, not a token
    r"|(?i:</?(?:unk|pad)>)"
    r"|<0x[0-9A-Fa-f]{2}>"  # byte-fallback tokens
)
# Characters that legitimately repeat: whitespace, rules and bullets, digits, dashes, box drawing,
# braille blanks, the katakana long-vowel mark and the fullwidth hyphen.
RUN_EXEMPT = r"\s\-=_.*+~#|><0-9\u2013-\u2015\u2500-\u25ff\u2800-\u28ff\u30fc\uff0d"
RUN_MIN = 20
_SAMPLE_PAIR = re.compile(f"(?=([^{RUN_EXEMPT}])\\1)")  # overlapping: every sampled pair is a candidate

# Script buckets of letters and numbers; "other" is everything outside the listed ranges.
SCRIPT_RANGES = {
    "latin": "\x00-\u024f",
    "greek": "\u0370-\u03ff",
    "cyrillic": "\u0400-\u04ff",
    "hebrew": "\u0590-\u05ff",
    "arabic": "\u0600-\u06ff",
    "devanagari": "\u0900-\u097f",
    "thai": "\u0e00-\u0e7f",
    "hiragana": "\u3040-\u309f",
    "katakana": "\u30a0-\u30ff",
    "cjk": "\u4e00-\u9fff",
    "hangul": "\uac00-\ud7a3",
    "private": "\ue000-\uf8ff",
}
_SCRIPT_RUN = re.compile(
    "|".join(f"[{r}]+" for r in SCRIPT_RANGES.values()) + "|[^" + "".join(SCRIPT_RANGES.values()) + "]+"
)
_NOT_ALNUM = re.compile(r"[\W_]+")  # the complement of the characters for which str.isalnum() is True


def _class_count(run_re: re.Pattern[str], text: str) -> int:
    if run_re.search(text) is None:  # the common case: one scan, nothing allocated
        return 0
    return sum(map(len, run_re.findall(text)))


@functools.lru_cache(maxsize=8)
def _full_run(min_run: int) -> re.Pattern[str]:
    return re.compile(f"([^{RUN_EXEMPT}])\\1{{{min_run - 1}}}")


def has_char_run(text: str, min_run: int = RUN_MIN) -> bool:
    """Some non-exempt character repeats ``min_run`` (>= 2) times in a row."""
    full = _full_run(min_run)
    step = min_run // 2
    if step < 2 or len(text) < 4 * min_run:
        return full.search(text) is not None
    # A run of >= 2*step characters covers two neighbouring samples of text[::step]; a candidate is
    # real only if the whole stretch between those samples repeats, which few chance pairs survive.
    for m in _SAMPLE_PAIR.finditer(text[::step]):
        start = m.start() * step
        if text[start : start + step + 1] == m.group(1) * (step + 1) and full.search(
            text, max(start - min_run, 0), start + step + min_run
        ):
            return True
    return False


def script_chaos(text: str, min_chars: int = 40) -> float:
    """Share of adjacent letter/number pairs whose scripts differ (0 below ``min_chars`` of them)."""
    chars = _NOT_ALNUM.sub("", text)
    n = len(chars)
    if n < min_chars or n < 2 or chars.isascii():
        return 0.0
    runs = _SCRIPT_RUN.subn("", chars)[1]
    return (runs - 1) / (n - 1)


class TokenSoupFilter(Filter):
    """Drops rows with a garbled assistant message (reason ``token_soup``).

    Each assistant message's content text (think blocks included), stripped and cut to
    ``max_chars`` when that is > 0, is soup when any holds: U+FFFD share > ``replacement_char_ratio``;
    control-character share (C0 except tab/LF/CR, and DEL) > ``control_char_ratio``; private-use
    share > ``private_use_ratio``; at least ``special_token_count`` leaked special tokens; one
    non-exempt character repeated 20 times in a row; script chaos > ``script_chaos_threshold``.
    None disables a check. Empty texts are fine; messages that are not a list of dicts drop as
    ``invalid_messages``.
    """

    def __init__(
        self,
        replacement_char_ratio: float | None = 0.02,
        control_char_ratio: float | None = 0.01,
        private_use_ratio: float | None = 0.03,
        special_token_count: int | None = 20,
        script_chaos_threshold: float | None = 0.55,
        script_chaos_min_chars: int = 40,
        max_chars: int = 0,
        min_char_run: int | None = RUN_MIN,
    ) -> None:
        if min_char_run is not None and min_char_run < 2:
            raise ValueError(f"min_char_run must be >= 2 (or None to disable), got {min_char_run}")
        self.replacement_char_ratio = replacement_char_ratio
        self.control_char_ratio = control_char_ratio
        self.private_use_ratio = private_use_ratio
        self.special_token_count = special_token_count
        self.script_chaos_threshold = script_chaos_threshold
        self.script_chaos_min_chars = script_chaos_min_chars
        self.max_chars = max_chars
        self.min_char_run = min_char_run

    def is_soup(self, text: str) -> bool:
        text = text.strip()
        if self.max_chars and self.max_chars > 0:
            text = text[: self.max_chars]
        n = len(text)
        if not n:
            return False
        if (
            self.replacement_char_ratio is not None
            and text.count(REPLACEMENT_CHAR) / n > self.replacement_char_ratio
        ):
            return True
        ascii_only = text.isascii()
        raw = text.encode("utf-8", "surrogatepass")
        if self.control_char_ratio is not None:
            controls = len(raw) - len(raw.translate(None, _CONTROL_BYTES))
            if controls / n > self.control_char_ratio:
                return True
        if (
            self.private_use_ratio is not None
            and not ascii_only
            and _PRIVATE_USE_LEAD.search(raw) is not None
            and _class_count(PRIVATE_USE_RUN, text) / n > self.private_use_ratio
        ):
            return True
        if (
            self.special_token_count is not None
            and ("<" in text or "[" in text)
            and len(SPECIAL_TOKEN.findall(text)) >= self.special_token_count
        ):
            return True
        if self.min_char_run is not None and has_char_run(text, self.min_char_run):
            return True
        return (
            self.script_chaos_threshold is not None
            and not ascii_only
            and script_chaos(text, self.script_chaos_min_chars) > self.script_chaos_threshold
        )

    def reason(self, row: dict) -> str | None:
        messages = messages_of(row)
        if messages is None:
            return INVALID_MESSAGES
        for m in messages:
            if m.get("role") == "assistant" and self.is_soup(message_text(m)):
                return TOKEN_SOUP
        return None

    def __repr__(self) -> str:
        return (
            f"TokenSoupFilter(replacement_char_ratio={self.replacement_char_ratio}, "
            f"special_token_count={self.special_token_count}, "
            f"script_chaos_threshold={self.script_chaos_threshold})"
        )
