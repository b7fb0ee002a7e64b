"""Input files: expand paths, directories, globs and URIs into the list of files a run reads.

Pure functions over pyarrow file systems, with no Ray, so every reader (a Ray Data datasource, a
one-process run, the rollout job's prompts) lists the same files in the same order.

A row's id is ``(source index, line)``: the position of its file in the expanded input list and its
1-based record number (a line of JSON Lines, a row of Parquet, an element of a ``.json`` file holding
one JSON array). Sorting by id gives input order, which is what deterministic tie-breaks (dedup) use.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twinkle_agentic.errors import ConfigError

from .location import is_local, local_path, locate, split_query

logger = logging.getLogger(__name__)

JSONL = "jsonl"
JSON = "json"  # JSON Lines, or one JSON array of records (told apart by the first byte)
PARQUET = "parquet"
FORMATS = (JSONL, JSON, PARQUET)
# Extension (after stripping a compression suffix) -> format.
_EXTENSIONS = {".jsonl": JSONL, ".json": JSON, ".ndjson": JSONL, ".parquet": PARQUET, ".pq": PARQUET}
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".lz4", ".br")
_GLOB_CHARS = re.compile(r"[*?\[]")

# Row ids pack into one int64 for cheap sorting: source index in the high bits, line in the low 40.
LINE_BITS = 40
MAX_LINE = (1 << LINE_BITS) - 1
MAX_SOURCES = 1 << 22


class InputError(ConfigError):
    """An input path or file cannot be used; the message names it and says why. A configuration
    error: the fix is another ``inputs`` setting (or ``unreadable_files: drop``)."""


@dataclass(frozen=True)
class Source:
    """One input file of a run: its position in the expanded list, URI, format and listed size."""

    index: int
    uri: str
    format: str
    size_bytes: int | None = None


def row_order(src: int, line: int) -> int:
    """The row id ``(src, line)`` packed into one sortable int."""
    return (src << LINE_BITS) | line


def _strip_compression(path: str) -> str:
    lower = path.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        if lower.endswith(suffix):
            return path[: -len(suffix)]
    return path


def format_of(path: str, forced: str | None = None) -> str | None:
    """``forced``, else the format a file name implies (compression suffix ignored), else None."""
    if forced:
        return forced
    return _EXTENSIONS.get(os.path.splitext(_strip_compression(path))[1].lower())


def input_location(spec: str) -> tuple[Any, str, str]:
    """(pyarrow file system, path inside it, prefix that turns such a path back into a URI).

    Local paths and ``file://`` URIs use the local file system; any other URI goes through
    ``pyarrow.fs.FileSystem.from_uri`` (s3://, gs://, hdfs://, ...; see :mod:`.location`). Glob
    characters may follow the bucket or directory part; the URI's options (``?...``) are not part of
    the path: :func:`expand_inputs` puts them back on every URI it lists.
    """
    from pyarrow import fs

    base, query = split_query(spec)
    if is_local(base):
        return fs.LocalFileSystem(), local_path(base), ""
    root = _glob_root(base) if _GLOB_CHARS.search(base) else base
    try:
        where = locate(root + query)
    except ConfigError as exc:
        raise InputError(f"cannot open input {spec!r}: {exc.__cause__ or exc}") from exc
    path = where.path + ("/" + base[len(root) :].lstrip("/") if root != base else "")
    return where.filesystem, path, where.prefix


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
        query = split_query(spec)[1]
        if _GLOB_CHARS.search(path):
            root = _glob_root(path) or "./"
            regex = _glob_regex(path)
            matches = [
                i for i in _list_files(filesystem, root) if regex.match(i.path) and _is_data_file(i.path)
            ]
            if not matches:
                raise InputError(f"input glob {spec!r} matches no file")
            found += [
                (prefix + i.path + query, format_of(i.path, input_format) or "", i.size, False)
                for i in matches
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
            found += [
                (prefix + i.path + query, format_of(i.path, input_format) or "", i.size, False) for i in files
            ]
        else:
            found.append((prefix + path + query, format_of(path, input_format) or "", info.size, True))
    sources: list[Source] = []
    seen: set[str] = set()
    skipped: set[str] = set()
    for uri, fmt, size, named in found:
        # a local file reached by a link too; a URI without its options
        location = split_query(uri)[0] if "://" in uri else os.path.realpath(uri)
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
