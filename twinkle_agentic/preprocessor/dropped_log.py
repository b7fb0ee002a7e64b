"""The drop ledger: one JSON line ``{"step", "reason", "source", "line", "row"}`` per dropped row.

The one record every drop ledger holds, written by ``QualityPreprocessor(dropped_log_path=...)``
through :class:`DroppedLog` and by the preprocess job (column-wise in Arrow, from the same
``LEDGER_KEYS``). ``row`` is the row as the step saw it, without ``drop_reason``. ``source`` and
``line`` say where the row was read: the input's URI and its 1-based line (JSON Lines), row
(Parquet) or array element (JSON). The job always knows them; ``QualityPreprocessor`` is handed rows,
not files, so its lines carry ``null`` for both.

Many writers share one file (HF ``num_proc`` workers, Ray tasks, threads), so each call serialises
all of its lines first and appends them with a single ``write()`` on an ``O_APPEND`` descriptor while
holding ``fcntl.flock(LOCK_EX)``: lines from different writers never interleave and none is lost.
On file systems whose locks are unreliable (some network mounts) ``shard=True`` makes every process
write its own ``<path>.<pid>``; :func:`merge_log_shards` concatenates them afterwards.

No file handle is held between calls, so the object pickles; the log is never deleted implicitly.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from typing import Any

REASON_KEY = "drop_reason"
UNKNOWN_REASON = "unknown"
# The keys of a ledger line, in the order they are written.
LEDGER_KEYS = ("step", "reason", "source", "line", "row")


def ledger_record(
    step: str, reason: str, row: Any, source: str | None = None, line: int | None = None
) -> dict[str, Any]:
    """One ledger record, keys in ``LEDGER_KEYS`` order."""
    return {"step": step, "reason": reason, "source": source, "line": line, "row": row}


def ledger_line(step: str, row: Any, source: str | None = None, line: int | None = None) -> str:
    """The ledger line (no newline) of ``row`` dropped by ``step``; its reason is the row's
    ``drop_reason`` (``unknown`` when missing), and ``row`` is written without it."""
    if isinstance(row, dict):
        reason = row.get(REASON_KEY)
        body = {k: v for k, v in row.items() if k != REASON_KEY}
    else:
        reason, body = None, row
    reason = reason if isinstance(reason, str) else UNKNOWN_REASON
    record = ledger_record(step, reason, body, source, line)
    try:
        return json.dumps(record, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        # Keys that JSON cannot hold, or a reference cycle: keep the line, with the row as its repr.
        record["row"] = repr(body)
        return json.dumps(record, ensure_ascii=False)


def format_lines(step: str, rows: Iterable[Any]) -> str:
    """The ledger lines for ``rows`` dropped by ``step`` (origin unknown), newline-terminated."""
    return "".join(ledger_line(step, row) + "\n" for row in rows)


def append_locked(path: str, data: str | bytes) -> None:
    """Append ``data`` to ``path`` in one ``write()`` under an exclusive ``flock``.

    The loop only matters for a short write (a signal, a full disk); the lock is still held, so even
    then no other writer's bytes can land in between.
    """
    if not data:
        return
    payload = data.encode("utf-8") if isinstance(data, str) else data
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def shard_paths(path: str) -> list[str]:
    """Existing ``<path>.<pid>`` shards, in pid order."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = os.path.basename(path) + "."
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        suffix = name[len(prefix) :]
        if name.startswith(prefix) and suffix.isdigit():
            found.append((int(suffix), os.path.join(directory, name)))
    return [p for _, p in sorted(found)]


def merge_log_shards(path: str, *, remove: bool = True) -> int:
    """Append every ``<path>.<pid>`` shard to ``path`` in pid order; return the number of lines moved.

    Each shard is appended with one locked write and removed afterwards (``remove=False`` keeps
    them), so running the merge twice never duplicates lines.
    """
    moved = 0
    for shard in shard_paths(path):
        with open(shard, "rb") as f:
            data = f.read()
        if data and not data.endswith(b"\n"):
            data += b"\n"
        append_locked(path, data)
        moved += data.count(b"\n")
        if remove:
            os.remove(shard)
    return moved


class DroppedLog:
    """Appends dropped rows to a JSONL file; safe to share between processes and threads.

    ``overwrite=True`` truncates the log (and removes stale shards) once, here, in the process that
    constructs the object; copies unpickled in workers only append.
    """

    def __init__(self, path: str | os.PathLike, *, shard: bool = False, overwrite: bool = False) -> None:
        self.path = os.fspath(path)
        self.shard = shard
        if overwrite:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with open(self.path, "wb"):
                pass
            for stale in shard_paths(self.path):
                os.remove(stale)

    @property
    def target(self) -> str:
        """The file this process appends to."""
        return f"{self.path}.{os.getpid()}" if self.shard else self.path

    def write(self, records: Iterable[tuple[str, list[Any]]]) -> int:
        """Append ``(step, dropped_rows)`` records in one write; return the number of lines."""
        text = "".join(format_lines(step, rows) for step, rows in records)
        if text:
            append_locked(self.target, text)
        return text.count("\n")

    def __repr__(self) -> str:
        return f"DroppedLog({self.path!r}, shard={self.shard})"
