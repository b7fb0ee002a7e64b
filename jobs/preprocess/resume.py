"""Resumable preprocess runs (``--resume``): a fingerprint of the run, and what a resume keeps.

A run started with ``resume`` keeps, under ``<output>/_resume/``:

- ``run.json``: the run's id and the fingerprint of what decides its output (each input's URI, size
  and modification time; the steps and the settings that change rows), written before any task runs;
- ``units/<index>/``: per input file, the frames it sends into the first exchange (a dedup or
  near-dedup shuffle; with none, into the writes), that is after every per-row stage: the read and
  the steps fused with it, later cheap stages and model stages on actor pools. The rows the read
  task dropped are already in that file's own ledger part ``dropped/part-<run>-read-<index>.jsonl``;
  the rows later stages dropped are in the frames. An input is committed when its parts add up to
  its read record (:mod:`.checkpoints`).

Resuming (the same command with ``--resume`` again) checks the fingerprint, deletes everything not
committed (kept parts, ledger parts and checkpoint files of inputs not committed, temporary files,
the report), and runs again: the committed inputs' frames are read back from their checkpoints and
go straight to the exchange; the other inputs are read and run through every stage. The first
exchange, the stages after it and the writes are redone on every row, because the exchange makes
every kept row depend on every input. Checkpoints of the earlier layout (``_resume/inputs/``, the
first stage's frames per input) are not reused: a resume deletes them and processes those inputs
again. ``stats.json`` is written last (atomically); once it is there the run is complete and a
resume does nothing and says so. A resume into an empty output folder starts a fresh resumable run.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import signal
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.io import Source, input_location
from twinkle_agentic.io.location import Location, read_bytes, write_bytes

from .steps import ConfigError

logger = logging.getLogger(__name__)

RESUME_DIR = "_resume"
RUN_FILE = "run.json"
# Checkpoints of the earlier layout (the first stage's frames per input): never reused, deleted.
OLD_CHECKPOINT_DIR = "inputs"
TMP_MARK = ".tmp-"
# Settings of PreprocessConfig that change which rows are kept or dropped, or how they are written;
# the others (cluster, parallelism, progress bars, file sizes) only change how the work is spread.
OUTPUT_SETTINGS = ("input_format", "output_format", "unreadable_files", "batch_size", "lineage")
# Test hook: comma-separated crash points at which a process stops until the test kills the run
# ("die:<point>": the process kills itself, as a worker that dies), each once per PAUSE_DIR_ENV.
PAUSE_ENV = "TWINKLE_PREPROCESS_PAUSE_AT"
PAUSE_DIR_ENV = "TWINKLE_PREPROCESS_PAUSE_DIR"


def crash_point(name: str) -> None:
    """How the tests kill a run at an exact moment (``partial:<input>`` after an input's first block is
    read, ``read:<input>`` once its read record is written, ``staged:<input>`` after a part of it is
    committed, ``exchange``, ``write:<task>``, ``written``; test steps may add their own): when
    :data:`PAUSE_ENV` names this point, announce it with a file in :data:`PAUSE_DIR_ENV` and wait to be
    killed (or, for ``die:<point>``, SIGKILL this process). Ray workers inherit the driver's
    environment on the embedded cluster; unset, this costs one lookup."""
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted:
        return
    for spec in wanted.split(","):
        if spec.removeprefix("die:") != name:
            continue
        flag = os.path.join(os.environ[PAUSE_DIR_ENV], spec.replace(":", "_").replace("/", "_"))
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue  # fired before (a retried task passes)
        if spec.startswith("die:"):
            os.kill(os.getpid(), signal.SIGKILL)
        while True:
            time.sleep(60)


def input_fingerprint(sources: list[Source]) -> list[dict[str, Any]]:
    """Each input's URI, size and modification time (ns), from one ``stat`` per file."""
    prints = []
    for source in sources:
        filesystem, path, _ = input_location(source.uri)
        info = filesystem.get_file_info(path)
        mtime = info.mtime_ns if info.mtime is not None else None
        prints.append({"uri": source.uri, "size_bytes": info.size, "mtime_ns": mtime})
    return prints


def fingerprint(cfg: Any, sources: list[Source]) -> dict[str, Any]:
    """What decides a run's output: its inputs as they are now, its steps, the settings in
    :data:`OUTPUT_SETTINGS` and the installed twinkle-agentic's version (its steps' code), as JSON."""
    from importlib.metadata import PackageNotFoundError, version

    settings = {name: getattr(cfg, name) for name in OUTPUT_SETTINGS}
    try:
        settings["twinkle_agentic_version"] = version("twinkle-agentic")
    except PackageNotFoundError:  # run from a source tree that is not installed
        settings["twinkle_agentic_version"] = None
    return json.loads(
        json.dumps(
            {
                "inputs": input_fingerprint(sources),
                "steps": [spec.to_config() for spec in cfg.steps],
                "settings": settings,
            }
        )
    )


def changes(earlier: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, one phrase each (empty: the run may be resumed)."""
    found = []
    old_inputs = {i["uri"]: i for i in earlier.get("inputs", [])}
    new_inputs = {i["uri"]: i for i in now.get("inputs", [])}
    for uri in old_inputs.keys() - new_inputs.keys():
        found.append(f"input {uri} is gone")
    for uri in new_inputs.keys() - old_inputs.keys():
        found.append(f"input {uri} is new")
    for uri in old_inputs.keys() & new_inputs.keys():
        old, new = old_inputs[uri], new_inputs[uri]
        for key in ("size_bytes", "mtime_ns"):
            if old.get(key) != new.get(key):
                found.append(f"input {uri} changed ({key} {old.get(key)} -> {new.get(key)})")
    if not found and [i["uri"] for i in earlier.get("inputs", [])] != [i["uri"] for i in now.get("inputs", [])]:
        found.append("the inputs are listed in another order")
    if earlier.get("steps") != now.get("steps"):
        found.append(f"steps {earlier.get('steps')!r} -> {now.get('steps')!r}")
    old_settings, new_settings = earlier.get("settings", {}), now.get("settings", {})
    for name in sorted(old_settings.keys() | new_settings.keys()):
        if old_settings.get(name) != new_settings.get(name):
            found.append(f"{name} {old_settings.get(name)!r} -> {new_settings.get(name)!r}")
    return sorted(found)


def early_ledger_name(run_id: str, index: int) -> str:
    """File name (in ``dropped/``) of the ledger part the read task of input ``index`` writes."""
    return f"part-{run_id}-read-{index:06d}.jsonl"


def kept_after_resume(run_id: str, committed: set[int], names: list[str]) -> list[str]:
    """Which names in ``dropped/`` a resume keeps: the ledger parts of committed inputs."""
    keep = {early_ledger_name(run_id, i) for i in committed}
    return [n for n in names if n in keep]


REDONE = (
    "the first exchange, the stages after it and the writes, on every row; "
    "the stages before the exchange, on the processed inputs' rows only"
)


@dataclass
class ResumeState:
    """What a resumable run found in its output folder when it started."""

    run_id: str
    committed: dict[int, int] = field(default_factory=dict)  # committed input -> bytes of its checkpoint
    complete: bool = False  # stats.json is there: nothing to do
    resumed: bool = False  # an earlier attempt's run.json was there

    def summary(self, sources: int) -> dict[str, Any]:
        """The ``resume`` entry of stats.json: inputs taken from checkpoints or processed now, and what
        the run did again for all of them."""
        return {
            "run_id": self.run_id,
            "resumed": self.resumed,
            "inputs_reused": len(self.committed),
            "inputs_processed": sources - len(self.committed),
            "redone": REDONE,
        }


def _names(filesystem: Any, folder: str) -> list[str]:
    from pyarrow import fs

    selector = fs.FileSelector(folder, allow_not_found=True)
    return [posixpath.basename(i.path) for i in filesystem.get_file_info(selector)]


def _delete(filesystem: Any, path: str) -> None:
    from pyarrow import fs

    kind = filesystem.get_file_info(path).type
    if kind == fs.FileType.Directory:
        filesystem.delete_dir(path)
    elif kind != fs.FileType.NotFound:
        filesystem.delete_file(path)


def open_run(filesystem: Any, root: str, output: str, now: dict[str, Any], entries: list[str]) -> ResumeState:
    """Start or continue the resumable run in ``root``: a folder without a run gets a fresh
    ``run.json``; one with a run of the same fingerprint is cleared of everything not committed; a
    run of another fingerprint, or output not made by a resumable run, is a ConfigError naming why and
    the fix. ``entries``: the run's output files and folders (kept/, dropped/, stats.json, ...)."""
    from pyarrow import fs

    from .report import STATS_FILE
    from .shared_storage import stale_markers
    from .sink import DROPPED_DIR

    base = Location(filesystem, posixpath.join(root, RESUME_DIR))
    entries = [e for e in entries if e.rstrip("/") != base.path]
    run_file = base.child(RUN_FILE)
    if not run_file.exists():
        present = [e for e in entries if filesystem.get_file_info(e).type != fs.FileType.NotFound]
        if present:
            raise ConfigError(
                f"output directory {output!r} holds a run that was not started with --resume ({present[0]}), "
                "so nothing of it can be reused: pass --overwrite to start over"
            )
        state = ResumeState(uuid.uuid4().hex[:12])
        filesystem.create_dir(base.path, recursive=True)
        write_bytes(run_file, json.dumps({"run_id": state.run_id, "fingerprint": now}, indent=2).encode())
        return state
    try:
        record = json.loads(read_bytes(run_file))
        run_id, earlier = record["run_id"], record["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot read {run_file.uri}: {exc}; pass --overwrite to start over") from exc
    differ = changes(earlier, now)
    if differ:
        raise ConfigError(
            f"output directory {output!r} holds a run of other inputs or settings ({'; '.join(differ)}); "
            "resuming would mix them: pass --overwrite to start over, or choose another --output"
        )
    if filesystem.get_file_info(posixpath.join(root, STATS_FILE)).type == fs.FileType.File:
        finish(filesystem, root)  # a run killed after stats.json, before it removed them
        return ResumeState(run_id, complete=True, resumed=True)
    committed = _clear_checkpoints(filesystem, base.path)
    keep = set(
        kept_after_resume(run_id, set(committed), _names(filesystem, posixpath.join(root, DROPPED_DIR)))
    )
    for entry in entries:
        if entry == posixpath.join(root, DROPPED_DIR):
            for name in _names(filesystem, entry):
                if name not in keep:
                    _delete(filesystem, posixpath.join(entry, name))
        else:
            _delete(filesystem, entry)
    for marker in stale_markers(filesystem, root):
        _delete(filesystem, marker)
    return ResumeState(run_id, committed, resumed=True)


def _clear_checkpoints(filesystem: Any, base: str) -> dict[int, int]:
    """Delete every checkpoint file of ``base`` (``_resume/``) but the committed inputs' parts and read
    records; returns the committed inputs (index -> bytes of their parts)."""
    from pyarrow import fs

    from .checkpoints import UNITS_DIR, complete_units, list_units, parse_name

    old = posixpath.join(base, OLD_CHECKPOINT_DIR)
    if filesystem.get_file_info(old).type != fs.FileType.NotFound:
        logger.warning(
            "%s holds checkpoints of an earlier layout (the first stage's frames): they are not reused, "
            "those inputs are processed again",
            old,
        )
        _delete(filesystem, old)
    folder = posixpath.join(base, UNITS_DIR)
    listing = list_units(filesystem, folder)
    committed = complete_units(listing)
    for entry, files in listing.items():
        if not entry.isdigit() or int(entry) not in committed:
            _delete(filesystem, posixpath.join(folder, entry))
            continue
        for name, _ in files:
            if parse_name(name) is None:  # a temporary file
                _delete(filesystem, posixpath.join(folder, entry, name))
    return committed


def finish(filesystem: Any, root: str) -> None:
    """After stats.json: the checkpoints are no longer needed (run.json stays, so a resume knows the
    run is complete and of which inputs)."""
    from .checkpoints import UNITS_DIR

    for name in (UNITS_DIR, OLD_CHECKPOINT_DIR):
        _delete(filesystem, posixpath.join(root, RESUME_DIR, name))


def read_summary(filesystem: Any, root: str) -> dict[str, Any]:
    """The stats.json of a complete run."""
    from .report import STATS_FILE

    return json.loads(read_bytes(Location(filesystem, posixpath.join(root, STATS_FILE))))
