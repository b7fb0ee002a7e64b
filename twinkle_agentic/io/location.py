"""Where a job's file or folder is: a local path or a URI (``file://``, ``s3://``, ``gs://``,
``hdfs://``, ...), as a pyarrow file system and a path inside it.

One place turns a user's location into a file system, so inputs and outputs of every job accept the
same URIs, and a URI's options (``s3://bucket/out?endpoint_override=host:9000&scheme=http``) stay on
every URI made from it. Credentials are not part of a URI: pyarrow takes them from the environment
(``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_ENDPOINT_URL``, an instance role,
``GOOGLE_APPLICATION_CREDENTIALS``, ...), on each node that touches the files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
from typing import Any

from twinkle_agentic.errors import ConfigError

# File systems that publish an object only when its upload completes: one write of a whole buffer is
# atomic there. Others (HDFS, ...) get a temporary name and a rename.
_OBJECT_STORES = ("s3", "gcs", "abfs")


def is_local(uri: str) -> bool:
    """A plain path or a ``file://`` URI."""
    return "://" not in uri or uri.startswith("file://")


def split_query(uri: str) -> tuple[str, str]:
    """``(uri without its options, "?options" or "")``; a local path keeps any ``?`` in its name."""
    if is_local(uri) or "?" not in uri:
        return uri, ""
    base, query = uri.split("?", 1)
    return base, "?" + query


def local_path(uri: str) -> str:
    """The absolute local path of a plain path or a ``file://`` URI (``~`` expanded)."""
    return os.path.abspath(os.path.expanduser(uri.removeprefix("file://")))


@dataclasses.dataclass(frozen=True)
class Location:
    """A path in a pyarrow file system, and how to write it back as the URI the user gave."""

    filesystem: Any
    path: str
    prefix: str = ""  # scheme and authority: prefix + path is the URI ("" for local files)
    query: str = ""  # the URI's options ("?endpoint_override=..."), kept on every URI made from it

    @property
    def local(self) -> bool:
        from pyarrow import fs

        return isinstance(self.filesystem, fs.LocalFileSystem)

    @property
    def uri(self) -> str:
        """A local path, or the URI (with its options) that names this location."""
        return self.prefix + self.path + self.query

    def child(self, *names: str) -> Location:
        return dataclasses.replace(self, path=posixpath.join(self.path, *names))

    def exists(self) -> bool:
        from pyarrow import fs

        return self.filesystem.get_file_info(self.path).type != fs.FileType.NotFound


def locate(uri: str) -> Location:
    """The file system and path of ``uri``: the local file system for a plain path or ``file://``,
    else ``pyarrow.fs.FileSystem.from_uri``. A URI it cannot open is a ConfigError naming it."""
    from pyarrow import fs

    if is_local(uri):
        return Location(fs.LocalFileSystem(), local_path(uri))
    base, query = split_query(uri)
    try:
        filesystem, path = fs.FileSystem.from_uri(base + query)
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError with its own explanation
        raise ConfigError(f"cannot open {uri!r}: {exc}") from exc
    bare = path.rstrip("/")
    at = base.find(bare) if bare else -1
    prefix = base[:at] if at > 0 else base.split("://", 1)[0] + "://"
    return Location(filesystem, bare, prefix, query)


def write_bytes(where: Location, data: bytes) -> None:
    """Write ``data`` (as it is: a ``.gz`` name compresses nothing) to ``where`` so that a reader sees the old file or the whole new one: a local
    file through a temporary name, fsync and rename; an object store in one upload (published when it
    completes); any other file system through a temporary name and a move."""
    if where.local:
        _write_local(where.path, data)
        return
    if where.filesystem.type_name in _OBJECT_STORES:
        with where.filesystem.open_output_stream(where.path, compression=None) as stream:
            stream.write(data)
        return
    tmp = where.path + ".tmp"
    with where.filesystem.open_output_stream(tmp, compression=None) as stream:
        stream.write(data)
    where.filesystem.move(tmp, where.path)


def read_bytes(where: Location) -> bytes:
    with where.filesystem.open_input_stream(where.path, compression=None) as stream:
        return stream.read()


def remove(where: Location) -> None:
    """Delete the file or folder at ``where`` (nothing there is fine)."""
    from pyarrow import fs

    kind = where.filesystem.get_file_info(where.path).type
    if kind == fs.FileType.Directory:
        where.filesystem.delete_dir(where.path)
    elif kind != fs.FileType.NotFound:
        where.filesystem.delete_file(where.path)


def _write_local(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_directory(os.path.dirname(path))


def fsync_directory(directory: str) -> None:
    """Make a local folder's entries (a file created or renamed in it) survive a crash."""
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_output(where: Location) -> Any:
    """A stream that writes ``where``, for outputs too large to hold in memory (a Parquet file). On an
    error inside the block, a local file keeps its old content (the stream wrote a temporary name);
    elsewhere the partial file is deleted, since an object store publishes whatever a closed stream
    holds: there is then no file, so write only what can be written again."""
    tmp = where if not where.local else dataclasses.replace(where, path=where.path + ".tmp")
    stream = tmp.filesystem.open_output_stream(tmp.path, compression=None)
    try:
        yield stream
    except BaseException:
        stream.close()
        with contextlib.suppress(OSError):
            tmp.filesystem.delete_file(tmp.path)
        raise
    stream.close()
    if where.local:
        os.replace(tmp.path, where.path)
        fsync_directory(os.path.dirname(where.path))
