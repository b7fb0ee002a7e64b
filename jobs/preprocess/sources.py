"""Input files: expand paths/globs/URIs, read them line by line, parse lines into rows.

Pure functions over pyarrow file systems, with no Ray: the Ray datasource, the one-process reference
run and the tests all read through these, so every run numbers and parses rows the same way.

A row's id is ``(source index, line)``: the position of its file in the expanded input list and its
1-based line number (for Parquet, its 1-based row number; for a ``.json`` file holding one JSON
array, the element's 1-based number). Sorting by id gives input order, which
is what deterministic tie-breaks (dedup) use.
"""

from __future__ import annotations

import base64
import codecs
import datetime as _dt
import decimal
import itertools
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .json_array import JSONLayoutError, array_records, starts_array

logger = logging.getLogger(__name__)

MALFORMED_JSON = "malformed_json"
INVALID_ROW = "invalid_row"
UNREADABLE_FILE = "unreadable_file"
# What a run does with a file that cannot be read to its end: stop, or drop its unreadable rest.
UNREADABLE_FAIL, UNREADABLE_DROP = "fail", "drop"
UNREADABLE_MODES = (UNREADABLE_FAIL, UNREADABLE_DROP)

JSONL = "jsonl"
JSON = "json"  # JSON Lines, or one JSON array of records (told apart by the first byte)
PARQUET = "parquet"
FORMATS = (JSONL, JSON, PARQUET)
# Extension (after stripping a compression suffix) -> format.
_EXTENSIONS = {".jsonl": JSONL, ".json": JSON, ".ndjson": JSONL, ".parquet": PARQUET, ".pq": PARQUET}
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".lz4", ".br")
_GLOB_CHARS = re.compile(r"[*?\[]")
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

# Row ids pack into one int64 for cheap sorting: source index in the high bits, line in the low 40.
LINE_BITS = 40
MAX_LINE = (1 << LINE_BITS) - 1
MAX_SOURCES = 1 << 22


class InputError(ValueError):
    """An input path or file cannot be used; the message names it and says why."""


class UnreadableInputError(InputError):
    """A file could not be read to its end: truncated or corrupt compressed data, a damaged Parquet
    file, or an I/O error. Every record before ``line`` was read; ``line`` and the rest were not."""

    def __init__(self, uri: str, line: int, why: str):
        self.uri, self.line, self.why = uri, line, why
        super().__init__(
            f"{uri}: unreadable from record {line} on ({why}); repair or remove the file, or pass "
            "--unreadable-files drop to record its unreadable rest in the drop ledger and go on"
        )

    def __reduce__(self) -> tuple:  # Ray ships it from the worker to the driver
        return type(self), (self.uri, self.line, self.why)


@dataclass(frozen=True)
class Source:
    index: int
    uri: str
    format: str
    size_bytes: int | None = None


def row_order(src: int, line: int) -> int:
    return (src << LINE_BITS) | line


def _strip_compression(path: str) -> str:
    lower = path.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        if lower.endswith(suffix):
            return path[: -len(suffix)]
    return path


def format_of(path: str, forced: str | None = None) -> str | None:
    if forced:
        return forced
    return _EXTENSIONS.get(os.path.splitext(_strip_compression(path))[1].lower())


def input_location(spec: str) -> tuple[Any, str, str]:
    """(pyarrow file system, path inside it, prefix that turns such a path back into a URI).

    Local paths and ``file://`` URIs use the local file system; any other URI goes through
    ``pyarrow.fs.FileSystem.from_uri`` (s3://, gs://, hdfs://, ...). Glob characters may follow the
    bucket or directory part.
    """
    from pyarrow import fs

    if "://" not in spec or spec.startswith("file://"):
        local = spec[len("file://") :] if spec.startswith("file://") else spec
        return fs.LocalFileSystem(), os.path.abspath(os.path.expanduser(local)), ""
    root = _glob_root(spec) if _GLOB_CHARS.search(spec) else spec
    try:
        filesystem, root_path = fs.FileSystem.from_uri(root)
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError with its own explanation
        raise InputError(f"cannot open input {spec!r}: {exc}") from exc
    bare = root_path.rstrip("/")
    at = root.find(bare) if bare else -1
    prefix = root[:at] if at > 0 else root.split("://", 1)[0] + "://"
    path = bare + ("/" + spec[len(root) :].lstrip("/") if root != spec else "")
    return filesystem, path, prefix


def _glob_root(pattern: str) -> str:
    """The longest leading part of a glob pattern without glob characters, ending at a '/'."""
    head = _GLOB_CHARS.split(pattern, 1)[0]
    return head[: head.rfind("/") + 1] if "/" in head else ""


def _glob_regex(pattern: str) -> re.Pattern:
    """Shell glob semantics: ``*`` and ``?`` stay within one path segment, ``**`` spans segments."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _is_data_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return not name.startswith((".", "_"))


def _list_files(filesystem: Any, root: str) -> list[Any]:
    from pyarrow import fs

    infos = filesystem.get_file_info(fs.FileSelector(root.rstrip("/") or "/", recursive=True))
    return sorted((i for i in infos if i.type == fs.FileType.File), key=lambda i: i.path)


def expand_inputs(
    specs: list[str], input_format: str | None = None, skip: Callable[[str], bool] | None = None
) -> list[Source]:
    """Expand files, directories (recursive, files with a known extension) and globs, in the order
    given; each glob or directory expands in sorted order. A file named twice is read once, also when
    a link leads to it (under the first name it was found by).

    ``skip(location)`` names files that must not be read (``location``: the URI, or a local file's
    real path): found through a directory or glob they are
    left out (and counted in a warning), named on their own they are an InputError. The job skips
    its own outputs with it, so that ``--input data --output data/clean`` does not read an earlier
    run's output back.
    """
    from pyarrow import fs

    if input_format is not None and input_format not in FORMATS:
        raise InputError(f"input format {input_format!r} is not supported; use one of {', '.join(FORMATS)}")
    if not specs:
        raise InputError("no input given: pass --input PATH (files, directories, globs or URIs)")
    found: list[tuple[str, str, int | None, bool]] = []  # uri, format, size, named on its own
    for spec in specs:
        filesystem, path, prefix = input_location(spec)
        if _GLOB_CHARS.search(path):
            root = _glob_root(path) or "./"
            regex = _glob_regex(path)
            matches = [
                i for i in _list_files(filesystem, root) if regex.match(i.path) and _is_data_file(i.path)
            ]
            if not matches:
                raise InputError(f"input glob {spec!r} matches no file")
            found += [
                (prefix + i.path, format_of(i.path, input_format) or "", i.size, False) for i in matches
            ]
            continue
        info = filesystem.get_file_info(path)
        if info.type == fs.FileType.NotFound:
            raise InputError(f"input {spec!r} does not exist")
        if info.type == fs.FileType.Directory:
            files = [
                i
                for i in _list_files(filesystem, path)
                if _is_data_file(i.path) and format_of(i.path, input_format)
            ]
            if not files:
                raise InputError(f"input directory {spec!r} holds no .jsonl/.json/.parquet file")
            found += [(prefix + i.path, format_of(i.path, input_format) or "", i.size, False) for i in files]
        else:
            found.append((prefix + path, format_of(path, input_format) or "", info.size, True))
    sources: list[Source] = []
    seen: set[str] = set()
    skipped: set[str] = set()
    for uri, fmt, size, named in found:
        location = uri if "://" in uri else os.path.realpath(uri)  # a local file reached by a link too
        if location in seen:
            continue
        if skip is not None and skip(location):
            if named:
                raise InputError(
                    f"input {uri!r} is an output of this job's --output folder, which a run replaces; "
                    "copy it elsewhere first or write to another --output"
                )
            skipped.add(uri)
            continue
        if not fmt:
            raise InputError(
                f"cannot tell the format of {uri!r} from its name; use .jsonl/.json/.parquet "
                "(optionally .gz) or pass --input-format"
            )
        seen.add(location)
        sources.append(Source(len(sources), uri, fmt, size))
    if skipped:
        logger.warning(
            "not reading %d file(s) of an earlier run's output under --output (%s ...)",
            len(skipped),
            min(skipped),
        )
    if not sources and found:
        raise InputError(f"inputs {specs!r} hold only files of an earlier run's output under --output")
    if len(sources) > MAX_SOURCES:
        raise InputError(f"{len(sources)} input files; at most {MAX_SOURCES} are supported in one run")
    return sources


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


def json_default(value: Any) -> Any:
    """JSON for the non-JSON values Parquet can hold (dates, decimals, bytes, numpy)."""
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        return tolist()
    return str(value)


# One encoder for every call: ``json.dumps`` with options builds a new one each time (~2 us a row,
# 13 % of encoding the bench's rows).
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=json_default)


def dumps(row: Any) -> str:
    """The one serialisation of rows everywhere in the job: unescaped unicode, Parquet types as JSON."""
    return _ENCODER.encode(row)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """``text`` (JSON from :func:`dumps`) with lone surrogates written as ``\\uXXXX`` escapes again.

    Valid JSON may spell half of a surrogate pair (``"\\ud83d"``, a cut emoji); Python decodes it to
    a lone surrogate, which UTF-8 (and so Arrow and every output file) cannot hold. Escaped, the text
    is valid UTF-8 and still decodes to exactly the same row.
    """
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def iter_parquet_rows(uri: str, batch_rows: int = 4096) -> Iterator[tuple[int, bytes]]:
    """(1-based row number, row as JSON bytes) of every row of a Parquet file."""
    import pyarrow.parquet as pq

    filesystem, path, _ = input_location(uri)
    number = 0
    with filesystem.open_input_file(path) as handle:
        for batch in pq.ParquetFile(handle).iter_batches(batch_size=batch_rows):
            for row in batch.to_pylist():
                number += 1
                yield number, dumps(row).encode("utf-8", "surrogatepass")


def iter_records(source: Source) -> Iterator[tuple[int, bytes]]:
    """(row number, raw JSON bytes) of every record of a source, in file order; raises
    :class:`UnreadableInputError` after the last readable record when the file breaks off."""
    from pyarrow.lib import ArrowException

    records = (
        iter_parquet_rows(source.uri)
        if source.format == PARQUET
        else iter_json_text(source.uri, source.format)
    )
    last = 0
    try:
        for last, raw in records:  # ``last``: the last record read, should the file break off
            yield last, raw
    except (OSError, ArrowException, JSONLayoutError) as exc:
        raise UnreadableInputError(source.uri, last + 1, f"{type(exc).__name__}: {exc}") from exc


def read_source(source: Source, unreadable: str = UNREADABLE_FAIL) -> Iterator[tuple[int, bytes, str | None]]:
    """(row number, raw bytes, None) per record of a source. A file that breaks off raises in
    ``fail`` mode; in ``drop`` mode it ends with one ``(line, b"", why)`` record standing for its
    unreadable rest, which becomes an ``unreadable_file`` drop of step ``read``."""
    try:
        for line, raw in iter_records(source):
            yield line, raw, None
    except UnreadableInputError as exc:
        if unreadable != UNREADABLE_DROP:
            raise
        yield exc.line, b"", f"unreadable from record {exc.line} on: {exc.why}"


def parse_read(raw: bytes, error: str | None) -> tuple[dict | None, str | None, Any]:
    """What a record of :func:`read_source` becomes: :func:`parse_record` of it, or for the record
    standing for a file's unreadable rest, an ``unreadable_file`` drop holding why."""
    return parse_record(raw) if error is None else (None, UNREADABLE_FILE, error)


def parse_record(raw: bytes | str) -> tuple[dict | None, str | None, Any]:
    """(row, None, None) for a JSON object; (None, reason, ledger value) otherwise.

    The ledger value is the raw text for a line that is not JSON, the decoded value for JSON that
    is not an object.
    """
    try:
        value = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        return None, MALFORMED_JSON, text
    except RecursionError:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        return None, MALFORMED_JSON, text
    if not isinstance(value, dict):
        return None, INVALID_ROW, value
    return value, None, None
