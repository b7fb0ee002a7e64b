"""``TraceWriter``: a directory of JSON trace files, one per record, none ever overwritten.

The rollouts (one file per trajectory) and ``ScoreFilter`` (one file per scored round) both write
through it; each names its own files. A file appears whole (written to a temporary file, then
linked under its name) and only under a name that was free, so writers in several processes that
share a directory (Ray actors) never clobber or half-write each other's traces.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Names are tried in turn until one is free; past this many, the directory is treated as broken.
MAX_NAME_TRIES = 10_000


class TraceWriter:
    """Writes JSON records into ``trace_dir`` (created at construction, never cleared).

    ``indent`` is passed to ``json.dump`` (None: one line). Values JSON cannot encode are written
    as ``str(value)``; text stays unescaped (``ensure_ascii=False``).
    """

    def __init__(self, trace_dir: str | os.PathLike[str], *, indent: int | None = None) -> None:
        self.trace_dir = Path(trace_dir)
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        self.indent = indent

    def write(self, record: Any, name: Callable[[int], str]) -> Path:
        """Write ``record`` under the first free name among ``name(0)``, ``name(1)``, ...; returns its path.

        Raises ``OSError`` when the file cannot be written (the caller decides whether tracing may fail).
        """
        fd, tmp = tempfile.mkstemp(prefix=".trace-", suffix=".tmp", dir=self.trace_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record, handle, indent=self.indent, ensure_ascii=False, default=str)
            for attempt in range(MAX_NAME_TRIES):
                path = self.trace_dir / name(attempt)
                if _claim(Path(tmp), path):
                    return path
            raise FileExistsError(f"{self.trace_dir}: no free trace file name after {MAX_NAME_TRIES} tries")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _claim(tmp: Path, path: Path) -> bool:
    """Give the finished ``tmp`` the name ``path`` unless that name is taken; False when it is."""
    try:
        os.link(tmp, path)  # atomic and exclusive: fails when the name exists
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: create the name exclusively and copy into it
        try:
            with open(path, "xb") as out, open(tmp, "rb") as src:
                out.write(src.read())
        except FileExistsError:
            return False
        return True
