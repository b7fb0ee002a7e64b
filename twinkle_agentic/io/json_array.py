"""The records of a file that holds one JSON array of rows, the layout many chat datasets ship in.

Each element comes back as its own raw bytes and is parsed later by the same ``json.loads`` as a
JSON Lines record, so both read alike (NaN, big integers, escaped halves of surrogate pairs, bytes
that are not UTF-8). Python's C decoder finds where a valid element ends; an element that is not
valid JSON is measured by a scan that follows strings and bracket depth to the next top-level
comma, and becomes one ``malformed_json`` drop while the read goes on. Memory holds one element
and one piece of the file, never the whole array.

Only a broken structure stops the read, like a file that breaks off: the file ends inside the
array, a closing bracket has no opening one, or something follows the array.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator

_OUTSIDE_STRING = re.compile(r'["\[\]{},]')
_INSIDE_STRING = re.compile(r'["\\]')
_NOT_SPACE = re.compile(r"[^ \t\r\n]")
_decode = json.JSONDecoder().raw_decode


class JSONLayoutError(ValueError):
    """A JSON array's structure is broken: the elements before the one named were read."""


def starts_array(head: bytes) -> bool:
    """Whether text starting with ``head`` (its first non-space byte included) is a JSON array."""
    return head.lstrip(b" \t\r\n").startswith(b"[")


class _Text:
    """The file's text so far, decoded as it is needed; bytes that are not UTF-8 are kept as
    surrogate escapes, so an element's bytes come back exactly as they were in the file."""

    def __init__(self, pieces: Iterator[bytes]):
        self.pieces = pieces
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self.text = ""
        self.ended = False

    def grow(self, keep_from: int, at_least: int = 1) -> int:
        """Drop the text before ``keep_from`` and add at least ``at_least`` characters (fewer at the
        end of the file, then ``ended``); returns how many characters were dropped."""
        added = []
        size = 0
        while size < at_least and not self.ended:
            piece = next(self.pieces, None)
            chunk = self.decoder.decode(piece or b"", final=piece is None)
            self.ended = piece is None
            added.append(chunk)
            size += len(chunk)
        self.text = self.text[keep_from:] + "".join(added)
        return keep_from

    def next_byte(self, at: int) -> int:
        """Index of the first non-space character from ``at`` on (text before ``at`` may be dropped
        to read on, so use the returned index), or -1 at the end of the file."""
        while True:
            match = _NOT_SPACE.search(self.text, at)
            if match:
                return match.start()
            if self.ended:
                return -1
            at -= self.grow(at)


class _Extent:
    """Finds the top-level ',' or ']' that ends the element starting at ``start`` (element
    ``number``) by following strings and bracket depth. Resumable: when the text ends first it keeps
    its place, so an element read on over many growths of the text is scanned once in all."""

    def __init__(self, start: int, number: int):
        self.at, self.number = start, number
        self.depth, self.in_string = 0, False

    def shift(self, dropped: int) -> None:
        """The text lost its first ``dropped`` characters."""
        self.at -= dropped

    def find(self, text: str) -> int:
        """Index of the ending ',' or ']'; -1 when ``text`` ends first (call again once it grew)."""
        at = self.at
        while True:
            match = (_INSIDE_STRING if self.in_string else _OUTSIDE_STRING).search(text, at)
            if match is None:
                self.at = len(text)
                return -1
            char, at = match.group(), match.end()
            if self.in_string:
                if char == '"':
                    self.in_string = False
                elif at == len(text):  # the escaped character is in the next piece
                    self.at = match.start()
                    return -1
                else:
                    at += 1
            elif char == '"':
                self.in_string = True
            elif char in "[{":
                self.depth += 1
            elif char == "," and self.depth == 0:
                return match.start()
            elif char in "]}" and self.depth > 0:
                self.depth -= 1
            elif char == "]":
                return match.start()
            elif char == "}":
                raise JSONLayoutError(f"a '}}' without its '{{' in element {self.number}")


def _element(source: _Text, at: int, number: int) -> tuple[int, int, int]:
    """(start, end, stop) of element ``number`` starting at ``at``: its text is ``[start:end]`` and
    the ',' or ']' after it is at ``stop`` (reading on as needed, which may move ``start``)."""
    extent = _Extent(at, number)
    while True:
        text = source.text
        try:
            _, end = _decode(text, at)
            following = _NOT_SPACE.search(text, end)
            stop = following.start() if following else -1
            if stop >= 0 and text[stop] not in ",]":  # valid JSON, then something else
                end = stop = extent.find(text)
        except (json.JSONDecodeError, RecursionError):  # _Extent does not recurse
            end = stop = extent.find(text)
        if stop >= 0:
            return at, end, stop
        if source.ended:
            raise JSONLayoutError(f"the file ends inside element {number}")
        dropped = source.grow(at, max(len(text) - at, 1))  # doubling: raw_decode re-reads log-many times
        at -= dropped
        extent.shift(dropped)


def array_records(pieces: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    """(1-based element number, element bytes) of the JSON array that ``pieces`` spell out.

    Raises :class:`JSONLayoutError` where the structure breaks, after yielding every element before.
    """
    source = _Text(pieces)
    at = source.next_byte(0)
    if at < 0 or source.text[at] != "[":
        raise JSONLayoutError("the file does not start with a JSON array")
    at = source.next_byte(at + 1)
    if at >= 0 and source.text[at] == "]":
        _check_end(source, at + 1)
        return
    number = 0
    while True:
        number += 1
        if at < 0:
            raise JSONLayoutError(f"the file ends inside the array, before element {number}")
        start, end, stop = _element(source, at, number)
        text = source.text
        yield number, text[start:end].strip().encode("utf-8", "surrogateescape")
        if text[stop] == "]":
            _check_end(source, stop + 1)
            return
        at = source.next_byte(stop + 1)


def _check_end(source: _Text, at: int) -> None:
    if source.next_byte(at) >= 0:
        raise JSONLayoutError("something follows the array's closing ']'")
