"""Records of input files as raw bytes with their numbers, and what each record parses to.

Every reader of the project goes through :func:`read_source` and :func:`parse_read`, so a file yields
the same rows, numbers and drop reasons in a Ray job, in one process and in a test.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import re
from collections.abc import Iterator
from typing import Any

from twinkle_agentic.preprocessor.base import INVALID_ROW  # JSON that is not an object: the steps' reason too

from .inputs import PARQUET, InputError, Source, input_location
from .json_array import JSONLayoutError
from .text import iter_json_text

# The step name of drops made while reading, before any pipeline step.
READ_STEP = "read"
MALFORMED_JSON = "malformed_json"
UNREADABLE_FILE = "unreadable_file"
# What a run does with a file that cannot be read to its end: stop, or drop its unreadable rest.
UNREADABLE_FAIL, UNREADABLE_DROP = "fail", "drop"
UNREADABLE_MODES = (UNREADABLE_FAIL, UNREADABLE_DROP)


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
