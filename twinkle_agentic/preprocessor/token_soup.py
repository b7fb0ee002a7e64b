"""TokenSoupFilter: garbled assistant output (broken decoding, leaked special tokens, script chaos).

Hot path. The filter judges all assistant texts of a batch together: the texts are concatenated
(ASCII texts as bytes, other texts as UTF-16 code units) and one table look-up per code unit gives
control and private-use counts and the script bucket of every letter or number, so script chaos,
control and private-use shares are a few numpy passes per chunk. Single-character runs are found by
sampling every ``min_run // 2``-th unit (a run covers two neighbouring samples) and verified with
the exact regex; leaked special tokens are counted only when the text holds enough ``<``/``[``.
Texts with astral characters take the per-text path (``is_soup``).
"""

from __future__ import annotations

import functools
import re

import numpy as np

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


# --- batch path: one class per UTF-16 code unit ---------------------------------------------

_NOT_ALNUM_BUCKET = 15  # low 4 bits: script bucket of a letter/number; 15 for anything else
_CONTROL, _PRIVATE, _EXEMPT = 16, 32, 64


def _unit_classes() -> np.ndarray:
    classes = np.full(0x10000, _NOT_ALNUM_BUCKET, dtype=np.uint8)
    bucket = np.full(0x10000, len(SCRIPT_RANGES), dtype=np.uint8)  # "other"
    for k, span in enumerate(SCRIPT_RANGES.values()):
        lo, hi = (ord(c) for c in span.split("-"))
        bucket[lo : hi + 1] = k
    alnum = np.array([chr(c).isalnum() for c in range(0x10000)])
    classes[alnum] = bucket[alnum]
    classes[[*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]] |= _CONTROL
    classes[0xE000:0xF900] |= _PRIVATE
    exempt = re.compile(f"[{RUN_EXEMPT}]")
    classes[[c for c in range(0x10000) if not 0xD800 <= c < 0xE000 and exempt.match(chr(c))]] |= _EXEMPT
    return classes


_CLASSES = _unit_classes()
_ASCII_CLASSES = _CLASSES[:256].copy()
_ASCII_CLASSES[128:] = _NOT_ALNUM_BUCKET
_CHUNK_UNITS = 1 << 16


def _chunks(sizes: list[int]) -> list[range]:
    out, start, total = [], 0, 0
    for k, size in enumerate(sizes):
        total += size
        if total >= _CHUNK_UNITS:
            out.append(range(start, k + 1))
            start, total = k + 1, 0
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


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

    def prepare(self, text: str) -> str:
        text = text.strip()
        return text[: self.max_chars] if self.max_chars and self.max_chars > 0 else text

    def soup_flags(self, texts: list[str]) -> list[bool]:
        """``is_soup`` of every text, sharing the per-character work across the batch."""
        texts = [self.prepare(t) for t in texts]
        flags = [False] * len(texts)
        ascii_idx, wide_idx, wide_units = [], [], []
        for i, text in enumerate(texts):
            if not text:
                continue
            if self._replacement_or_tokens(text):
                flags[i] = True
            elif text.isascii():
                ascii_idx.append(i)
            else:
                units = text.encode("utf-16-le", "surrogatepass")
                if len(units) == 2 * len(text):
                    wide_idx.append(i)
                    wide_units.append(units)
                else:  # astral characters: one at a time
                    flags[i] = self.is_soup(text)
        for chunk in _chunks([len(texts[i]) for i in ascii_idx]):
            idx = [ascii_idx[k] for k in chunk]
            buf = b"".join(texts[i].encode("ascii") for i in idx)
            self._judge(texts, idx, np.frombuffer(buf, dtype=np.uint8), _ASCII_CLASSES, flags)
        for chunk in _chunks([len(wide_units[k]) // 2 for k in range(len(wide_idx))]):
            idx = [wide_idx[k] for k in chunk]
            buf = b"".join(wide_units[k] for k in chunk)
            self._judge(texts, idx, np.frombuffer(buf, dtype=np.uint16), _CLASSES, flags)
        return flags

    def _replacement_or_tokens(self, text: str) -> bool:
        n = len(text)
        if (
            self.replacement_char_ratio is not None
            and text.count(REPLACEMENT_CHAR) / n > self.replacement_char_ratio
        ):
            return True
        k = self.special_token_count
        # every special token starts with "<" or "[", and matches never overlap
        return (
            k is not None and text.count("<") + text.count("[") >= k and len(SPECIAL_TOKEN.findall(text)) >= k
        )

    def _judge(
        self, texts: list[str], idx: list[int], codes: np.ndarray, table: np.ndarray, flags: list[bool]
    ) -> None:
        """Control, private-use, character-run and script-chaos checks of the texts ``idx``."""
        sizes = np.array([len(texts[i]) for i in idx])
        firsts = np.cumsum(sizes) - sizes
        classes = table.take(codes)
        marks = classes & np.uint8(_CONTROL | _PRIVATE)
        if marks.any():
            for ratio, bit in ((self.control_char_ratio, _CONTROL), (self.private_use_ratio, _PRIVATE)):
                if ratio is not None:
                    counts = np.add.reduceat((marks & np.uint8(bit)) != 0, firsts, dtype=np.intp)
                    for i, count, size in zip(idx, counts.tolist(), sizes.tolist(), strict=True):
                        flags[i] = flags[i] or count / size > ratio
        if self.min_char_run is not None:
            for k in self._run_candidates(codes, classes, firsts):
                i = idx[k]
                flags[i] = flags[i] or has_char_run(texts[i], self.min_char_run)
        if self.script_chaos_threshold is not None and table is _CLASSES:
            for i, chaos in zip(idx, self._chaos(classes, firsts), strict=True):
                flags[i] = flags[i] or chaos > self.script_chaos_threshold

    def _run_candidates(self, codes: np.ndarray, classes: np.ndarray, firsts: np.ndarray) -> set[int]:
        """Texts (positions in the chunk) that may hold a run: two equal, non-exempt samples
        ``step`` apart with the same unit all the way between them (any run of ``2 * step`` units
        covers two neighbouring samples, whatever the text's offset)."""
        step = self.min_char_run // 2
        if step < 2:
            return set(range(len(firsts)))
        samples = codes[::step]
        cand = np.flatnonzero(samples[1:] == samples[:-1])
        if cand.size:
            cand = cand[(classes[::step].take(cand) & np.uint8(_EXEMPT)) == 0] * step
        for k in range(1, step):
            if not cand.size:
                break
            cand = cand[codes.take(cand + k) == codes.take(cand)]
        return set((firsts.searchsorted(cand, side="right") - 1).tolist())

    def _chaos(self, classes: np.ndarray, firsts: np.ndarray) -> list[float]:
        """``script_chaos`` of every text of the chunk: bucket changes between its letters/numbers."""
        buckets = classes & np.uint8(0x0F)
        alnum = buckets != _NOT_ALNUM_BUCKET
        counts = np.add.reduceat(alnum, firsts, dtype=np.intp)
        kept = buckets[alnum]
        changes = np.zeros(kept.size + 2, dtype=np.intp)  # changes[j + 1]: bucket changes in kept[: j + 1]
        np.cumsum(kept[1:] != kept[:-1], out=changes[2 : kept.size + 1])
        starts = np.cumsum(counts) - counts
        ends = np.maximum(starts + counts - 1, starts)
        transitions = (changes.take(ends + 1) - changes.take(starts + 1)).tolist()
        minimum = max(self.script_chaos_min_chars, 2)
        return [
            t / (n - 1) if n >= minimum else 0.0 for t, n in zip(transitions, counts.tolist(), strict=True)
        ]

    def reasons(self, rows: list[dict]) -> list[str | None]:
        plans: list[str | list[int] | None] = []
        texts: list[str] = []
        for row in rows:
            messages = messages_of(row)
            if messages is None:
                plans.append(INVALID_MESSAGES)
                continue
            plans.append(
                list(range(len(texts), len(texts) + sum(1 for m in messages if m.get("role") == "assistant")))
            )
            texts.extend(message_text(m) for m in messages if m.get("role") == "assistant")
        flags = self.soup_flags(texts)
        return [
            plan if not isinstance(plan, list) else (TOKEN_SOUP if any(flags[k] for k in plan) else None)
            for plan in plans
        ]

    def reason(self, row: dict) -> str | None:
        return self.reasons([row])[0]

    def __repr__(self) -> str:
        return (
            f"TokenSoupFilter(replacement_char_ratio={self.replacement_char_ratio}, "
            f"special_token_count={self.special_token_count}, "
            f"script_chaos_threshold={self.script_chaos_threshold})"
        )
