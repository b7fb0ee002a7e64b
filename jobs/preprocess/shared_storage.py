"""Every task of a run must see the run's files as the driver does.

Read and write tasks run on whichever node has room. A local path names a file on each node's own
disk: unless it lies on storage every node mounts (NFS, a shared volume), a read task on another node
finds no file there (or another file of the same name), and write tasks leave their part files on
the disks of the nodes they ran on while ``stats.json`` and the report land on the driver's. The run
would look complete and hold only part of its rows. Ray Data leaves this to the user (it assumes
shared storage for plain paths); a cluster that autoscales adds nodes nobody looked at.

So each task checks storage when it first touches it, on every cluster, one machine included:

- a read task finds each local input file with the size the driver listed when the run started
  (:func:`check_input`): one ``stat`` per file;
- a task that writes output finds the run's marker, a file the driver writes into the output folder
  before any task starts and removes once the data is written (:func:`check_output`): one ``stat``
  per task that writes.

A task that does not fails the run with :class:`StorageNotSharedError`, naming the path and the node.
The size check also stops a run whose local input file is replaced or rewritten while it is read.
"""

from __future__ import annotations

import contextlib
import posixpath
import socket
from collections.abc import Iterator
from typing import Any

from twinkle_agentic.io import InputError, Source, input_location

from .steps import ConfigError

MARKER_PREFIX = ".twinkle-run-"


class StorageNotSharedError(InputError):
    """A task on some node does not see an input file or the output folder as the driver does."""

    def __init__(self, path: str, node: str, why: str):
        self.path, self.node, self.why = path, node, why
        super().__init__(
            f"{path}: {why} on {node}. Every node of the cluster must see the run's input and output "
            "where the driver does: use storage all nodes mount (a shared volume, NFS) or an object "
            "store URI (s3://, gs://, hdfs://)"
        )

    def __reduce__(self) -> tuple:  # Ray ships it from the worker to the driver
        return type(self), (self.path, self.node, self.why)


def this_node() -> str:
    """The node a task runs on, as the messages name it: Ray's node id (short) and address."""
    import ray

    if not ray.is_initialized():
        return f"host {socket.gethostname()}"
    node_id = ray.get_runtime_context().get_node_id()
    return f"node {node_id[:12]} ({ray.util.get_node_ip_address()})"


def check_input(source: Source) -> None:
    """``source`` exists here with the size the driver listed (when it listed one). Only files on
    the local file system are checked: an object store's URI names the same object from every node,
    and one request per object would slow runs over many small objects."""
    from pyarrow import fs

    filesystem, path, _ = input_location(source.uri)
    if not isinstance(filesystem, fs.LocalFileSystem):
        return
    info = filesystem.get_file_info(path)
    if info.type == fs.FileType.NotFound:
        raise StorageNotSharedError(source.uri, this_node(), "no such file, though the driver listed it")
    if source.size_bytes is not None and info.size != source.size_bytes:
        raise StorageNotSharedError(
            source.uri,
            this_node(),
            f"{info.size} bytes where the driver listed {source.size_bytes} (another file, or it "
            "changed after the run started)",
        )


def marker_path(root: str, run_id: str) -> str:
    return posixpath.join(root, MARKER_PREFIX + run_id)


def write_marker(filesystem: Any, root: str, run_id: str) -> str:
    """Write the run's marker into the output folder (on the driver, before any task starts)."""
    path = marker_path(root, run_id)
    with filesystem.open_output_stream(path) as stream:
        stream.write(
            b"a run of twinkle-agentic preprocess is writing here; removed when its data is written\n"
        )
    return path


def remove_marker(filesystem: Any, root: str, run_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        filesystem.delete_file(marker_path(root, run_id))


@contextlib.contextmanager
def claimed_output(filesystem: Any, root: str, run_id: str) -> Iterator[str]:
    """The output folder holds this run's marker for the ``with`` block (yields its path). A folder
    the driver cannot write into is a ConfigError; the marker goes whether the run succeeds or not."""
    try:
        write_marker(filesystem, root, run_id)
    except OSError as exc:
        raise ConfigError(f"cannot write into the output folder {root!r}: {exc}") from exc
    try:
        yield marker_path(root, run_id)
    finally:
        with contextlib.suppress(OSError):  # never hide why a run failed: a stale marker is harmless
            remove_marker(filesystem, root, run_id)


def check_output(filesystem: Any, marker: str) -> None:
    """The output folder here holds ``marker``, which the driver wrote for this run."""
    from pyarrow import fs

    if filesystem.get_file_info(marker).type == fs.FileType.NotFound:
        folder, name = posixpath.split(marker)
        raise StorageNotSharedError(
            folder, this_node(), f"the output folder lacks the marker {name} the driver wrote into it"
        )


def stale_markers(filesystem: Any, root: str) -> list[str]:
    """Markers left in the output folder by runs that were killed before they could remove them."""
    from pyarrow import fs

    selector = fs.FileSelector(root, allow_not_found=True)
    return [
        info.path
        for info in filesystem.get_file_info(selector)
        if posixpath.basename(info.path).startswith(MARKER_PREFIX)
    ]
