"""Reading rows from files, line-robust: JSON Lines, JSON arrays and Parquet, compressed or not,
local or behind a URI, named directly, by directory or by glob; and where any job's files are
(:mod:`.location`: local paths and pyarrow-filesystem URIs, written whole or not at all).

A record that does not parse costs only itself (it becomes a drop with its file and number), so one
bad line never fails a read. No Ray here: the jobs wrap these readers in their Ray Data datasources,
and anything else (a one-process run, the rollout job's prompts, a notebook) calls them directly.
"""

from __future__ import annotations

from .digest import file_digest
from .inputs import (
    FORMATS,
    JSON,
    JSONL,
    PARQUET,
    InputError,
    Source,
    expand_inputs,
    format_of,
    input_location,
)
from .json_array import JSONLayoutError
from .location import Location, is_local, locate, read_bytes, remove, split_query, write_bytes
from .records import (
    INVALID_ROW,
    MALFORMED_JSON,
    UNREADABLE_DROP,
    UNREADABLE_FAIL,
    UNREADABLE_FILE,
    UNREADABLE_MODES,
    UnreadableInputError,
    dumps,
    iter_records,
    parse_read,
    parse_record,
    read_source,
)
from .text import iter_json_text, iter_lines

__all__ = [
    "FORMATS",
    "INVALID_ROW",
    "JSON",
    "JSONL",
    "MALFORMED_JSON",
    "PARQUET",
    "UNREADABLE_DROP",
    "UNREADABLE_FAIL",
    "UNREADABLE_FILE",
    "UNREADABLE_MODES",
    "InputError",
    "JSONLayoutError",
    "Location",
    "Source",
    "UnreadableInputError",
    "dumps",
    "expand_inputs",
    "file_digest",
    "format_of",
    "input_location",
    "is_local",
    "iter_json_text",
    "iter_lines",
    "iter_records",
    "locate",
    "parse_read",
    "parse_record",
    "read_bytes",
    "read_source",
    "remove",
    "split_query",
    "write_bytes",
]
