"""Per-round trace files of ``ScoreFilter``: one JSON file per scored round, in a directory never cleared.

File names are ``{ok|fail}-{row}-{asst}-{i}-{ms}.json``: only ``[A-Za-z0-9_.-]``, at most 64
characters (the row id is sanitised and shortened to fit), ``i`` a per-process sequence number and
``ms`` the wall clock in milliseconds. Files are created exclusively, so concurrent writers (Ray
actors sharing a directory) never overwrite each other.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from typing import Any

UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
MAX_NAME_CHARS = 64
_sequence = itertools.count()


def trace_name(passed: bool, row_id: str, asst: int, i: int, ms: int) -> str:
    head = "ok-" if passed else "fail-"
    tail = f"-{asst}-{i}-{ms}.json"
    room = max(1, MAX_NAME_CHARS - len(head) - len(tail))
    row = UNSAFE_CHARS.sub("_", row_id)[:room] or "_"
    return head + row + tail


class TraceWriter:
    def __init__(self, trace_dir: str | os.PathLike) -> None:
        self.trace_dir = os.fspath(trace_dir)
        os.makedirs(self.trace_dir, exist_ok=True)

    def write(self, record: dict[str, Any]) -> str:
        """Write one round's record; returns the file path."""
        data = json.dumps(record, ensure_ascii=False, default=str)
        while True:
            name = trace_name(
                bool(record.get("passed")),
                str(record.get("row_id")),
                int(record.get("round", -1)),
                next(_sequence),
                int(time.time() * 1000),
            )
            path = os.path.join(self.trace_dir, name)
            try:
                with open(path, "x", encoding="utf-8") as fh:
                    fh.write(data)
                return path
            except FileExistsError:
                continue
