"""What every benchmark record carries besides its figures (the revision it measured), and how it is
printed and kept."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_sha() -> str:
    """Short sha of the checkout's HEAD, or 'unknown' outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def emit_record(record: dict, path: str | os.PathLike[str] | None) -> None:
    """Print ``record`` as one JSON line and, when ``path`` is given, append that line to it."""
    line = json.dumps(record)
    print(line)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def child_record(command: list[str], what: str) -> dict:
    """Run one measurement in a fresh interpreter (so its peak RSS is its own) and return the record
    it prints as its last line; a failed child ends the bench with its stderr, naming ``what``."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the run of {what} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
