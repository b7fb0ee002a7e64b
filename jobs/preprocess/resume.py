"""Resumable preprocess runs (``--resume``): per-input checkpoints of the first stage, committed atomically.

A run started with ``resume`` keeps, under ``<output>/_resume/``:

- ``run.json``: the run's id and the fingerprint of what decides its output (each input's URI, size
  and modification time; the steps and the settings that change rows), written before any task runs;
- ``inputs/<index>.arrow``: for each input file whose read task finished, the frames the first
  stage (read + the steps fused with it) made of it, minus the rows it dropped, which are already in
  that file's own ledger part ``dropped/part-<run>-read-<index>.jsonl``. A checkpoint is written
  under a temporary name and renamed when the file is done: present means complete.

Resuming (the same command with ``--resume`` again) checks the fingerprint, deletes everything not
committed (kept parts, ledger parts of inputs without a checkpoint, temporary files, the report),
and runs again: read tasks take the committed inputs' frames from their checkpoints instead of
reading and filtering them, and run the first stage on the other inputs. Everything after the first
stage (later stages, the dedup exchange, the writes) is redone on all rows, because the global dedup
makes every kept row depend on every input. ``stats.json`` is written last (atomically); once it is
there the run is complete and a resume does nothing and says so. A resume into an empty output
folder starts a fresh resumable run.
"""

from __future__ import annotations

import json
import os
import posixpath
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.io import Source, input_location
from twinkle_agentic.io.location import Location, read_bytes, write_bytes

from .steps import ConfigError

RESUME_DIR = "_resume"
RUN_FILE = "run.json"
CHECKPOINT_DIR = "inputs"
CHECKPOINT_SUFFIX = ".arrow"
TMP_MARK = ".tmp-"
# Settings of PreprocessConfig that change which rows are kept or dropped, or how they are written;
# the others (cluster, parallelism, progress bars, file sizes) only change how the work is spread.
OUTPUT_SETTINGS = ("input_format", "output_format", "unreadable_files", "batch_size", "lineage")
# Test hook: comma-separated crash points at which a process stops until the test kills the run
# ("die:<point>": the process kills itself, as a worker that dies), each once per PAUSE_DIR_ENV.
PAUSE_ENV = "TWINKLE_PREPROCESS_PAUSE_AT"
PAUSE_DIR_ENV = "TWINKLE_PREPROCESS_PAUSE_DIR"


def crash_point(name: str) -> None:
    """How the tests kill a run at an exact moment (``partial:<input>``, ``committed:<input>``, ``exchange``,
    ``write:<task>``, ``written``): when :data:`PAUSE_ENV` names this point, announce it with a file
    in :data:`PAUSE_DIR_ENV` and wait to be killed (or, for ``die:<point>``, SIGKILL this process).
    Ray workers inherit the driver's environment on the embedded cluster; unset, this costs one lookup."""
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


def checkpoint_name(index: int) -> str:
    return f"{index:06d}{CHECKPOINT_SUFFIX}"


def committed_indexes(names: list[str]) -> set[int]:
    """Input indexes whose checkpoint is committed, from the names in the checkpoint folder (a
    temporary file is not a commit)."""
    found = set()
    for name in names:
        stem = name.removesuffix(CHECKPOINT_SUFFIX)
        if name.endswith(CHECKPOINT_SUFFIX) and TMP_MARK not in name and stem.isdigit():
            found.add(int(stem))
    return found


def early_ledger_name(run_id: str, index: int) -> str:
    """File name (in ``dropped/``) of the ledger part the read task of input ``index`` writes."""
    return f"part-{run_id}-read-{index:06d}.jsonl"


def kept_after_resume(run_id: str, committed: set[int], names: list[str]) -> list[str]:
    """Which names in ``dropped/`` a resume keeps: the ledger parts of committed inputs."""
    keep = {early_ledger_name(run_id, i) for i in committed}
    return [n for n in names if n in keep]


@dataclass(frozen=True)
class Checkpoints:
    """The checkpoint folder as read tasks use it (shipped to them): read a committed input's frames,
    or write an input's frames under a temporary name and commit them with a rename."""

    output: str
    run_id: str
    attempt: str  # names this attempt's temporary files
    committed: frozenset[int] = field(default_factory=frozenset)

    def _where(self) -> tuple[Any, str]:
        from .sink import output_filesystem

        filesystem, root = output_filesystem(self.output)
        return filesystem, posixpath.join(root, RESUME_DIR, CHECKPOINT_DIR)

    def read(self, index: int) -> Iterator[Any]:
        """The frames committed for input ``index``, one table per block as they were written."""
        import pyarrow as pa

        filesystem, folder = self._where()
        with filesystem.open_input_file(posixpath.join(folder, checkpoint_name(index))) as handle:
            reader = pa.ipc.open_file(handle)
            for i in range(reader.num_record_batches):
                yield pa.Table.from_batches([reader.get_batch(i)])

    def write(self, index: int, frames: Iterator[Any], schema: Any) -> Iterator[Any]:
        """``frames``, passed on, and written to input ``index``'s checkpoint, which is committed (renamed
        into place) once they are all written; a task that dies before leaves only a temporary file."""
        import pyarrow as pa

        filesystem, folder = self._where()
        final = posixpath.join(folder, checkpoint_name(index))
        tmp = f"{final}{TMP_MARK}{self.attempt}"
        filesystem.create_dir(folder, recursive=True)
        with filesystem.open_output_stream(tmp) as stream, pa.ipc.new_file(stream, schema) as writer:
            for number, frame in enumerate(frames):
                writer.write_table(frame.cast(schema) if frame.schema != schema else frame)
                if number == 0:
                    crash_point(f"partial:{index}")
                yield frame
        filesystem.move(tmp, final)
        crash_point(f"committed:{index}")


@dataclass
class ResumeState:
    """What a resumable run found in its output folder when it started."""

    run_id: str
    committed: frozenset[int] = frozenset()
    complete: bool = False  # stats.json is there: nothing to do
    resumed: bool = False  # an earlier attempt's run.json was there

    def summary(self, sources: int) -> dict[str, Any]:
        """The ``resume`` entry of stats.json: inputs whose first stage was reused or run now."""
        return {
            "run_id": self.run_id,
            "resumed": self.resumed,
            "inputs_reused": len(self.committed),
            "inputs_processed": sources - len(self.committed),
            "redone": "later stages, the dedup exchange and the writes, on every row",
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
    folder = posixpath.join(base.path, CHECKPOINT_DIR)
    names = _names(filesystem, folder)
    if filesystem.get_file_info(posixpath.join(root, STATS_FILE)).type == fs.FileType.File:
        _delete(filesystem, folder)  # a run killed after stats.json, before it removed them
        return ResumeState(run_id, complete=True, resumed=True)
    committed = committed_indexes(names)
    for name in names:
        if name.endswith(CHECKPOINT_SUFFIX) and TMP_MARK not in name:
            continue
        _delete(filesystem, posixpath.join(folder, name))
    keep = set(kept_after_resume(run_id, committed, _names(filesystem, posixpath.join(root, DROPPED_DIR))))
    for entry in entries:
        if entry == posixpath.join(root, DROPPED_DIR):
            for name in _names(filesystem, entry):
                if name not in keep:
                    _delete(filesystem, posixpath.join(entry, name))
        else:
            _delete(filesystem, entry)
    for marker in stale_markers(filesystem, root):
        _delete(filesystem, marker)
    return ResumeState(run_id, frozenset(committed), resumed=True)


def finish(filesystem: Any, root: str) -> None:
    """After stats.json: the checkpoints are no longer needed (run.json stays, so a resume knows the
    run is complete and of which inputs)."""
    _delete(filesystem, posixpath.join(root, RESUME_DIR, CHECKPOINT_DIR))


def read_summary(filesystem: Any, root: str) -> dict[str, Any]:
    """The stats.json of a complete run."""
    from .report import STATS_FILE

    return json.loads(read_bytes(Location(filesystem, posixpath.join(root, STATS_FILE))))
