"""The records of a JSON text file (JSON Lines, or one JSON array), read a piece at a time.

A bad line never stops the read: records come back as raw bytes with their 1-based numbers and are
parsed by the caller, so one broken line costs only itself. Compression is detected from the name,
a leading UTF-8 byte-order mark is dropped, and a UTF-16 or UTF-32 one switches the encoding.
"""

from __future__ import annotations

import codecs
import itertools
from collections.abc import Iterator
from typing import Any

from .inputs import JSON, JSONL, MAX_LINE, InputError, input_location
from .json_array import array_records, starts_array

# Files are fetched in 8 MiB requests (one per request on object stores) and split into lines
# 256 KiB of decoded text at a time: small pieces stay in the CPU's cache, and a compressed file that
# breaks off loses at most one piece of what could still be decoded before the break.
_BUFFER_BYTES = 8 << 20
_PIECE_BYTES = 256 << 10
_UTF8_BOM = b"\xef\xbb\xbf"
# Text files that start with one of these byte-order marks are read as that encoding (Windows tools
# save "Unicode" text as UTF-16 with a mark; PowerShell 5's Out-File does by default). UTF-32's marks
# come first: UTF-32-LE's begins with UTF-16-LE's.
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _open_stream(uri: str) -> Any:
    filesystem, path, _ = input_location(uri)
    return filesystem.open_input_stream(path, compression="detect", buffer_size=_BUFFER_BYTES)


def _pieces(stream: Any) -> Iterator[bytes]:
    """The stream's text as UTF-8 bytes, in pieces of about ``_PIECE_BYTES``: a leading UTF-8
    byte-order mark removed, a UTF-16 or UTF-32 one read as that encoding (:func:`_as_utf8`)."""
    first = stream.read(max(_PIECE_BYTES, 4))  # a whole byte-order mark
    encoding = next((name for bom, name in _WIDE_BOMS if first.startswith(bom)), None)
    rest = iter(lambda: stream.read(_PIECE_BYTES), b"")
    if encoding:
        yield from _as_utf8(itertools.chain([first], rest), encoding)
        return
    if first := first.removeprefix(_UTF8_BOM):
        yield first
    yield from rest


def _undecodable(error: UnicodeDecodeError) -> tuple[str, int]:
    """Stands for bytes that are not text of their encoding: U+DCFF, which :func:`_as_utf8` writes
    as the byte 0xFF, never valid in UTF-8, so the record that holds it does not parse."""
    return "\udcff", error.end


_UNDECODABLE = "twinkle-agentic.undecodable"
codecs.register_error(_UNDECODABLE, _undecodable)


def _as_utf8(pieces: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    """``pieces`` of ``encoding`` text (its byte-order mark first) as UTF-8. Bytes that are not
    ``encoding`` (a lone surrogate, a cut last character) stay invalid UTF-8 in their record, so
    the record becomes a ``malformed_json`` drop and the rest of the file is read, as in UTF-8."""
    decoder = codecs.getincrementaldecoder(encoding)(_UNDECODABLE)
    for piece in pieces:
        if text := decoder.decode(piece):
            yield text.encode("utf-8", "surrogateescape")
    if text := decoder.decode(b"", final=True):
        yield text.encode("utf-8", "surrogateescape")


def _lines(pieces: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    number = 0
    partial: list[bytes] = []  # the line so far: joined once it ends, so a long line costs its length
    for chunk in pieces:
        if b"\n" not in chunk:
            partial.append(chunk)
            continue
        lines = chunk.split(b"\n")
        if partial:
            lines[0] = b"".join([*partial, lines[0]])
        partial = [lines.pop()]
        for line in lines:
            number += 1
            if line.strip():
                yield number, line.removesuffix(b"\r")
    rest = b"".join(partial)
    if rest.strip():
        yield number + 1, rest.removesuffix(b"\r")


def iter_lines(uri: str) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, UTF-8 line bytes) of every non-blank line; ``\\r\\n`` endings and a
    leading UTF-8 byte-order mark are removed, a file with a UTF-16 or UTF-32 one is read as that
    encoding. Blank lines are not rows and are skipped."""
    return iter_json_text(uri, JSONL)


def iter_json_text(uri: str, format: str) -> Iterator[tuple[int, bytes]]:
    """The records of a JSON text file: its non-blank lines (:func:`iter_lines`), or for format
    ``json`` whose first non-space byte is ``[``, the elements of that one array, numbered from 1
    (:mod:`.json_array`)."""
    with _open_stream(uri) as stream:
        pieces = _pieces(stream)
        head = b""
        if format == JSON:
            for chunk in pieces:  # up to the first non-space byte, which tells the layout
                head += chunk
                if head.strip():
                    break
        rest = itertools.chain([head], pieces)
        records = array_records(rest) if starts_array(head) else _lines(rest)
        for number, raw in records:
            if number > MAX_LINE:
                raise InputError(f"{uri}: more than {MAX_LINE} records")
            yield number, raw
