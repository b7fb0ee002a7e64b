"""Per-round trace files of ``ScoreFilter``: one JSON file per scored round, in a directory never cleared.

File names are ``{ok|fail}-{row}-{asst}-{i}-{ms}.json``: only ``[A-Za-z0-9_.-]``, at most 64
characters (the row id is sanitised and shortened to fit), ``i`` a per-process sequence number and
``ms`` the wall clock in milliseconds. ``twinkle_agentic.traces.TraceWriter`` writes them; a name
already taken (Ray actors sharing a directory) is replaced by a fresh one, never overwritten.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
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


def round_trace_names(record: dict[str, Any]) -> Callable[[int], str]:
    """Candidate file names for one round's record: a fresh sequence number and clock each try."""
    passed, row_id, asst = bool(record.get("passed")), str(record.get("row_id")), int(record.get("round", -1))
    return lambda _n: trace_name(passed, row_id, asst, next(_sequence), int(time.time() * 1000))
