"""Checkpoints of a resumable run, per input file: the frames the file sends into the first exchange.

Every per-row stage (the read with the steps fused with it, later cheap stages, model stages on
actor pools) runs before the first dedup exchange, so the frames entering that exchange are the
expensive part of a run, and each of them belongs to exactly one input file (its ``_src``). The
stages re-block rows as they go (one batch may hold rows of several files; a file's rows spread
over many batches), so a file is committed in parts, under ``_resume/units/<index>/``:

- ``part-<rows>-<digest>.arrow``: the commit stage (:meth:`UnitCheckpoints.commit`, the last
  operation before the exchange) writes one part per block and file, holding the file's live and
  dropped rows of that block;
- ``read-<rows>-<digest>.json``: the read task writes it once it has passed on the file's last row:
  its raw records (each becomes one row of the first stage), or, read fused with the first stage,
  its live rows, with the counts of the drops the task wrote to the file's own ledger part.

``rows`` counts rows and ``digest`` sums a 64-bit hash of each row's line (:func:`line_digest`), so
a file is committed when the sums of its parts equal its read record: the file names alone say so.
Each file is written under a temporary name and moved into place (present means whole), and a part
that a retried task writes again has the same name, so it replaces itself.
"""

from __future__ import annotations

import json
import posixpath
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from twinkle_agentic.io.location import Location, read_bytes, write_bytes
from twinkle_agentic.preprocessor.stats import StepStats

from .frame import DKEY, DROPPED, KIND, LEDGER, LINE, LIVE, REASON, SRC, STEP, FrameBuilder
from .resume import RESUME_DIR, TMP_MARK, crash_point
from .stages import StageError

UNITS_DIR = "units"
_DIGEST_BITS = (1 << 64) - 1
_NAME = re.compile(r"(part|read)-(\d+)-([0-9a-f]{16})\.(arrow|json)")
_EXTENSION = {"part": "arrow", "read": "json"}


def line_digest(lines: Any) -> int:
    """The sum (mod 2**64) of a 64-bit mix (splitmix64's finaliser) of each line number: the same for
    the same lines however they are split into parts or ordered, and for other lines only by chance
    (2**-64)."""
    import numpy as np

    z = np.asarray(lines, dtype=np.int64).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return int(z.sum(dtype=np.uint64))


def file_name(kind: str, rows: int, digest: int) -> str:
    """``part-<rows>-<digest>.arrow`` or ``read-<rows>-<digest>.json``."""
    return f"{kind}-{rows}-{digest & _DIGEST_BITS:016x}.{_EXTENSION[kind]}"


def parse_name(name: str) -> tuple[str, int, int] | None:
    """``(kind, rows, digest)`` of a committed part or read record; None for anything else (a
    temporary file)."""
    match = _NAME.fullmatch(name)
    if match is None or _EXTENSION[match[1]] != match[4]:
        return None
    return match[1], int(match[2]), int(match[3], 16)


def is_complete(names: list[str]) -> bool:
    """Whether one input file's checkpoint folder holds its read record and parts that add up to it."""
    parsed = [p for p in map(parse_name, names) if p is not None]
    reads = [(rows, digest) for kind, rows, digest in parsed if kind == "read"]
    if len(reads) != 1:
        return False
    rows = sum(r for kind, r, _ in parsed if kind == "part")
    digest = sum(d for kind, _, d in parsed if kind == "part") & _DIGEST_BITS
    return (rows, digest) == reads[0]


def list_units(filesystem: Any, folder: str) -> dict[str, list[tuple[str, int]]]:
    """The checkpoint folder in one listing: each entry directly in it (an input's folder, or a stray
    file) -> ``(name, bytes)`` of the files inside."""
    from pyarrow import fs

    found: dict[str, list[tuple[str, int]]] = {}
    for info in filesystem.get_file_info(fs.FileSelector(folder, recursive=True, allow_not_found=True)):
        parts = info.path[len(folder) :].strip("/").split("/")
        entry = found.setdefault(parts[0], [])
        if len(parts) == 2 and info.type == fs.FileType.File:
            entry.append((parts[1], info.size or 0))
    return found


def unit_folder(index: int) -> str:
    return f"{index:06d}"


def complete_units(listing: dict[str, list[tuple[str, int]]]) -> dict[int, int]:
    """Committed inputs of a listing (:func:`list_units`): index -> bytes of their parts."""
    return {
        int(entry): sum(size for name, size in files if name.endswith(".arrow"))
        for entry, files in listing.items()
        if entry.isdigit() and is_complete([name for name, _ in files])
    }


def unit_stats(drops: Counter, live: int, steps: list[tuple[int, str]]) -> list[dict]:
    """One input's statistics records, from its checkpoint: ``drops`` counts its dropped rows by
    ``(step, reason)`` (those its read task wrote to the ledger, and those in its parts), ``live`` rows
    passed ``steps`` (``(position, name)`` of the read and of every step before the exchange, in order).
    Each row went through the steps in order until one dropped it, so each step's rows in and out
    follow from the drops. Seconds are zero: no step ran on these rows in this run. Drops of a step
    not in ``steps`` are a StageError (a checkpoint that does not belong to this pipeline)."""
    by_step: dict[str, Counter] = {}
    for (step, reason), n in drops.items():
        by_step.setdefault(step, Counter())[reason] += n
    unknown = set(by_step) - {name for _, name in steps}
    if unknown:
        raise StageError(
            "resume", f"a checkpoint holds drops of {sorted(unknown)}, which are not before the exchange"
        )
    rows = live + sum(drops.values())
    records = []
    for position, name in steps:
        reasons = by_step.get(name, Counter())
        dropped = sum(reasons.values())
        stats = StepStats(name, rows, rows - dropped, dropped, 0.0, reasons)
        records.append({"position": position, **stats.to_dict()})
        rows = stats.after
    return records


@dataclass(frozen=True)
class UnitCheckpoints:
    """The checkpoint folder as the tasks of a resumable run use it (shipped to them): the read tasks
    record each input they finished, the commit stage writes parts, the reads of ``committed`` inputs
    take their frames back."""

    output: str
    committed: dict[int, int] = field(default_factory=dict)  # committed input -> bytes of its parts

    def _folder(self, index: int) -> Location:
        from .sink import output_filesystem

        filesystem, root = output_filesystem(self.output)
        return Location(filesystem, posixpath.join(root, RESUME_DIR, UNITS_DIR, unit_folder(index)))

    def read_done(self, index: int, rows: int, digest: int, ledger: dict | None) -> None:
        """Input ``index`` is read: ``rows`` rows (lines summed in ``digest``) went on to the stages,
        ``ledger`` (a ``SinkResult`` wire, or None) counts the drops its read task wrote itself."""
        folder = self._folder(index)
        folder.filesystem.create_dir(folder.path, recursive=True)
        write_bytes(folder.child(file_name("read", rows, digest)), json.dumps({"ledger": ledger}).encode())
        crash_point(f"read:{index}")

    def commit(self, table: Any) -> Any:
        """The commit stage (a ``map_batches`` on whole blocks): write each input's live and dropped rows
        of ``table`` as a part of that input's checkpoint; ``table`` passes on unchanged."""
        import numpy as np
        import pyarrow as pa

        if table.num_rows == 0:
            return table
        kinds = table.column(KIND).to_numpy()
        data = (kinds == LIVE) | (kinds == DROPPED)
        srcs = table.column(SRC).to_numpy()
        for index in np.unique(srcs[data]):
            rows = table.filter(pa.array(data & (srcs == index)))
            part = self._folder(int(index))
            part = part.child(file_name("part", rows.num_rows, line_digest(rows.column(LINE).to_numpy())))
            part.filesystem.create_dir(posixpath.dirname(part.path), recursive=True)
            tmp = f"{part.path}{TMP_MARK}{uuid.uuid4().hex[:12]}"  # one per attempt: never shared
            with (
                part.filesystem.open_output_stream(tmp) as stream,
                pa.ipc.new_file(stream, rows.schema) as writer,
            ):
                writer.write_table(rows)
            part.filesystem.move(tmp, part.path)
            crash_point(f"staged:{int(index)}")
        return table

    def frames(self, index: int) -> Iterator[Any]:
        """The parts of committed input ``index``, one table each."""
        import pyarrow as pa

        folder = self._folder(index)
        for name in sorted(_names(folder)):
            if (parse_name(name) or ("",))[0] != "part":
                continue
            with folder.filesystem.open_input_file(folder.child(name).path) as handle:
                reader = pa.ipc.open_file(handle)
                yield reader.read_all()

    def read_record(self, index: int) -> dict:
        """Committed input ``index``'s read record: ``rows`` passed on, ``ledger`` counts (or None)."""
        folder = self._folder(index)
        for name in _names(folder):
            if (parse_name(name) or ("",))[0] == "read":
                return json.loads(read_bytes(folder.child(name)))
        raise FileNotFoundError(f"no read record in {folder.uri}")


class CheckpointDatasource(Datasource):
    """The frames of committed inputs, read back from their checkpoints instead of reading the files
    and running the stages before the exchange again; after each input's frames, one record with the
    drops its read task wrote to the ledger and one with its statistics (:func:`unit_stats`)."""

    def __init__(self, checkpoints: UnitCheckpoints, schema: Any, steps: list[tuple[int, str]]):
        super().__init__()
        self.checkpoints = checkpoints
        self.sizes = dict(sorted(checkpoints.committed.items()))
        self.schema = schema
        self.steps = list(steps)

    def get_name(self) -> str:
        return "ReadCheckpoints"

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(self.sizes.values())

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        indexes = list(self.sizes)
        count = max(1, min(parallelism if parallelism > 0 else len(indexes), len(indexes)))
        tasks = []
        for group in (indexes[i::count] for i in range(count)):
            metadata = BlockMetadata(
                num_rows=None, size_bytes=sum(self.sizes[i] for i in group), input_files=None, exec_stats=None
            )
            tasks.append(
                ReadTask(
                    lambda group=group: self._read(group),
                    metadata,
                    schema=self.schema,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks

    def _read(self, group: list[int]) -> Iterator[Any]:
        for index in group:
            yield from self._unit(index)

    def _unit(self, index: int) -> Iterator[Any]:
        import pyarrow.compute as pc

        drops: Counter = Counter()
        live = 0
        for table in self.checkpoints.frames(index):
            kinds = table.column(KIND)
            live += pc.sum(pc.equal(kinds, LIVE)).as_py() or 0
            dropped = table.filter(pc.equal(kinds, DROPPED))
            counts = dropped.group_by([STEP, REASON]).aggregate([([], "count_all")])
            for row in counts.to_pylist():
                drops[(row[STEP], row[REASON])] += row["count_all"]
            yield table if table.schema == self.schema else table.cast(self.schema)
        ledger = self.checkpoints.read_record(index)["ledger"]
        records = FrameBuilder(DKEY in self.schema.names)
        if ledger and ledger["dropped"]:
            records.add(-1, -1, LEDGER, None, None, json.dumps(ledger))
            drops.update({(step, reason): n for step, reason, n in ledger["drops"]})
        records.add_stats(unit_stats(drops, live, self.steps))
        yield records.build()


def _names(folder: Location) -> list[str]:
    from pyarrow import fs

    selector = fs.FileSelector(folder.path, allow_not_found=True)
    return [posixpath.basename(i.path) for i in folder.filesystem.get_file_info(selector)]
