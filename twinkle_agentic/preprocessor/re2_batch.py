"""Counting regex matches over many texts at once with RE2 (``pyarrow.compute``), same answers as ``re``.

Python's ``re`` tries a pattern with many alternatives at almost every position of a text; RE2
scans a batch of texts in one C++ pass with a DFA. Patterns are written once in Python syntax
(``\\w``, ``\\d``, ``\\s``, ``\\b``, ``(?=\\w)`` and no other look-around) and :func:`to_re2`
translates them: ``\\w``/``\\d``/``\\s`` into the Unicode classes ``re`` uses, ``(?=\\w)`` into an
equivalent that never consumes a character another match could start with. Both engines use
leftmost-first alternation and count non-overlapping matches the same way.

Two differences cannot be translated. RE2's ``\\b`` only knows ASCII word characters, so it sees a
boundary where an ASCII word character touches a non-ASCII letter or digit (``"用vector"``,
``"café"``) and ``re`` does not. :meth:`TextBatch.junctions` lists such places; a caller recounts a
text with ``re`` when a ``\\b`` of its pattern could fall on one (:func:`boundary_probes`). And
Arrow's count restarts the search where the previous match ended without the text before it, so a
``\\b`` there sees the start of a text: with ``a|\\bb``, ``"ab"`` counts 2 where ``re`` counts 1. A
caller recounts a text with ``re`` when it has a match and a fragment with ``\\b`` could match right
after a word character (:func:`glued_probe`, one RE2 pass over the texts with a match).
"""

from __future__ import annotations

import re
from typing import Any

# Non-ASCII letters and digits (\\w minus ASCII), and the characters Python's \\s matches.
_NON_ASCII_WORD = r"(?:[^\P{L}\x00-\x7f]|[^\P{N}\x00-\x7f])"
_SPACE = r"[\t-\r\x1c-\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
_ESCAPES = {"w": r"[\pL\pN_]", "d": r"\p{Nd}", "s": _SPACE}
# An ASCII word character next to a non-ASCII one: RE2 finds candidates, ``re`` checks them.
_ASCII_WORD_TOUCHES_NON_ASCII = r"[A-Za-z0-9_][^\x00-\x7f]|[^\x00-\x7f][A-Za-z0-9_]"
_LEADING_JUNCTION = re.compile(r"[A-Za-z0-9_](?<=[^\W\x00-\x7f][A-Za-z0-9_])")  # at the match start
_TRAILING_JUNCTION = re.compile(r"[A-Za-z0-9_](?=[^\W\x00-\x7f])")  # at the match end
_PROBE_WINDOW = 120  # longer than any match that ends in \b


def to_re2(pattern: str) -> str:
    """RE2 syntax for a Python pattern restricted as described in the module docstring.

    ``(?=\\w)`` may only follow a non-word character: it becomes ``\\b`` (next is an ASCII word
    character) or consumes a non-ASCII letter/digit, which no pattern of this project starts with.
    """
    pattern = pattern.replace(r"(?=\w)", rf"(?:\b|{_NON_ASCII_WORD})")
    out: list[str] = []
    i = 0
    in_class = False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in _ESCAPES:
                if in_class and nxt != "d":
                    raise ValueError(f"\\{nxt} inside a character class cannot be translated: {pattern!r}")
                out.append(_ESCAPES[nxt])
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        elif ch == "(" and pattern.startswith("(?<", i):
            raise ValueError(f"look-behind cannot be translated to RE2: {pattern!r}")
        out.append(ch)
        i += 1
    return "".join(out)


class TextBatch:
    """Texts as one Arrow string array, built once and shared by every pattern counted on it."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self._array: Any = None
        self._junctions: dict[int, tuple[list[int], list[int]]] | None = None

    @property
    def array(self) -> Any:
        if self._array is None:
            import numpy as np
            import pyarrow as pa

            # Encoding each text and joining is several times faster than pa.array(texts); lone
            # surrogates become '?' (neither is a word, digit or space character for any pattern).
            encoded = [t.encode("utf-8", "replace") for t in self.texts]
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
            buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
            self._array = pa.Array.from_buffers(pa.large_string(), len(encoded), buffers)
        return self._array

    def junctions(self) -> dict[int, tuple[list[int], list[int]]]:
        """``{text index: (leading, trailing)}``: positions where RE2's ``\\b`` disagrees with ``re``.

        Leading: an ASCII word character at the position follows a non-ASCII letter/digit;
        trailing: one precedes the position. Texts without such places are left out.
        """
        if self._junctions is None:
            import pyarrow.compute as pc

            texts = self.texts
            flags = pc.match_substring_regex(self.array, _ASCII_WORD_TOUCHES_NON_ASCII).to_pylist()
            self._junctions = {}
            for i, flag in enumerate(flags):
                if flag:
                    leading = [m.start() for m in _LEADING_JUNCTION.finditer(texts[i])]
                    trailing = [m.end() for m in _TRAILING_JUNCTION.finditer(texts[i])]
                    if leading or trailing:
                        self._junctions[i] = (leading, trailing)
        return self._junctions

    def matching(self, re2_pattern: str, among: list[int] | None = None) -> list[int]:
        """Indices of the texts (of ``among`` when given) where ``re2_pattern`` matches somewhere."""
        import numpy as np
        import pyarrow.compute as pc

        array = self.array if among is None else self.array.take(among)
        flags = pc.match_substring_regex(array, re2_pattern).to_numpy(zero_copy_only=False)
        found = np.flatnonzero(flags)
        return found.tolist() if among is None else [among[i] for i in found]

    def counts(self, re2_pattern: str) -> list[int]:
        """Non-overlapping matches of ``re2_pattern`` in every text (RE2's ``\\b`` semantics)."""
        import pyarrow.compute as pc

        return pc.count_substring_regex(self.array, re2_pattern).to_pylist()


def boundary_probes(
    fragments: list[str] | tuple[str, ...], flags: int = 0
) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(head, tail) probes: can a fragment that uses ``\\b`` start / end at a given position?

    Built from the fragments with every ``\\b`` removed, so they over-approximate: a probe that does
    not match proves the two engines agree at that junction.
    """
    alternation = _boundary_bodies(fragments) or "(?!)"
    return re.compile(alternation, flags), re.compile(f"(?:{alternation})\\Z", flags)


def glued_probe(fragments: list[str] | tuple[str, ...], flags: int = 0) -> str | None:
    """RE2 pattern of a fragment that uses ``\\b`` matching right after a word character, the only
    place where Arrow's restarted count may see a boundary ``re`` does not (or miss one it sees);
    ``None`` when no fragment uses ``\\b``. Over-approximates like :func:`boundary_probes`."""
    alternation = _boundary_bodies(fragments)
    return re2_flags(flags) + to_re2(rf"\w(?:{alternation})") if alternation else None


def _boundary_bodies(fragments: list[str] | tuple[str, ...]) -> str:
    """The fragments that use ``\\b``, with every ``\\b`` removed, as one alternation ('' if none)."""
    return "|".join("(?:" + f.replace(r"\b", "") + ")" for f in fragments if r"\b" in f)


def re2_flags(flags: int) -> str:
    """RE2's inline form of the ``re`` flags the project's patterns use (IGNORECASE, DOTALL)."""
    inline = ("i" if flags & re.IGNORECASE else "") + ("s" if flags & re.DOTALL else "")
    return f"(?{inline})" if inline else ""


def needs_python(
    text: str, junctions: tuple[list[int], list[int]], probes: tuple[re.Pattern[str], re.Pattern[str]]
) -> bool:
    """True when a ``\\b`` of the probed pattern could fall on one of the text's junctions."""
    head, tail = probes
    leading, trailing = junctions
    return any(head.match(text, p) for p in leading) or any(
        tail.search(text, max(0, p - _PROBE_WINDOW), p) for p in trailing
    )
