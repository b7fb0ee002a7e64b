"""A Ray Data datasource yielding raw records with their ids, never failing on a bad line.

``ray.data.read_json`` parses whole files with pyarrow: one bad line fails the file (and the job).
Here a read task only splits files into records (``_src``, ``_line``, ``_raw`` bytes) and the first
map stage parses them, so a bad line becomes a ``malformed_json`` drop with its file and line number.
A file that breaks off part-way (``_error`` set on the one record standing for its rest, in ``drop``
mode) becomes an ``unreadable_file`` drop the same way.
Files are assigned to read tasks in contiguous runs of similar total size; each task streams its
files in blocks of ``block_rows`` records.

Given a ``transform`` (the first stage), each read task applies it to every block as soon as the
block is cut, and yields the stage's output instead of raw records. That is the read fused with the
first stage, in batches of exactly ``block_rows``: Ray Data fuses a read with a following
``map_batches`` only when it may merge the read's blocks first, which turns batches into whole files
(every row of a file alive at once, and the garbage collector scanning all of them). Given an
``EarlyLedger`` too, the task writes the rows the stage dropped to the drop ledger itself and yields
the rest. Given ``checkpoints`` (a resumable run), a task records each input it finished there
(:mod:`.checkpoints`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from twinkle_agentic.io import UNREADABLE_FAIL, Source, read_source

from .checkpoints import UnitCheckpoints, line_digest
from .frame import KIND, LEDGER, LINE, LIVE, ROW, read_schema
from .resume import crash_point
from .shared_storage import check_input
from .sink import EarlyLedger

# Assumed in-memory size of a file whose size is unknown, and expansion of compressed files.
_UNKNOWN_SIZE = 64 << 20
_COMPRESSED_EXPANSION = 5


def estimated_size(source: Source) -> int:
    """Bytes a source's records take once read: its size (x5 compressed, 64 MiB when unknown)."""
    size = source.size_bytes if source.size_bytes is not None else _UNKNOWN_SIZE
    return size * _COMPRESSED_EXPANSION if source.uri.endswith((".gz", ".bz2", ".zst")) else size


def estimated_total(sources: list[Source]) -> int:
    """Bytes the records of all ``sources`` take once read (:func:`estimated_size` summed)."""
    return sum(estimated_size(s) for s in sources)


def read_blocks(sources: list[Source], block_rows: int, unreadable: str = UNREADABLE_FAIL) -> Iterator[Any]:
    """Blocks of raw records of ``sources``, in order, ``block_rows`` records at most per block
    (``unreadable``: what a file that breaks off becomes, see :func:`twinkle_agentic.io.read_source`). Each
    file must be the one the driver listed (:func:`.shared_storage.check_input`)."""
    import pyarrow as pa

    schema = read_schema()
    for source in sources:
        check_input(source)
        srcs: list[int] = []
        lines: list[int] = []
        raws: list[bytes] = []
        errors: list[str | None] = []
        for line, raw, error in read_source(source, unreadable):
            srcs.append(source.index)
            lines.append(line)
            raws.append(raw)
            errors.append(error)
            if len(raws) >= block_rows:
                yield pa.table([srcs, lines, raws, errors], schema=schema)
                srcs, lines, raws, errors = [], [], [], []
        if raws:
            yield pa.table([srcs, lines, raws, errors], schema=schema)


def split_sources(sources: list[Source], parallelism: int) -> list[list[Source]]:
    """Contiguous groups of sources with about equal estimated size, at most ``parallelism`` groups."""
    if not sources:
        return []
    groups = max(1, min(parallelism, len(sources)))
    total = estimated_total(sources)
    target = total / groups
    result: list[list[Source]] = [[]]
    filled = 0
    for i, source in enumerate(sources):
        remaining_sources = len(sources) - i
        remaining_groups = groups - len(result)
        # Start a new group when this one is full, or when every remaining group needs a source.
        if result[-1] and (filled >= target or remaining_sources <= remaining_groups):
            result.append([])
            filled = 0
        result[-1].append(source)
        filled += estimated_size(source)
    return result


class RecordDatasource(Datasource):
    """Raw records of JSONL (plain or compressed) and Parquet files with (source, line) ids."""

    def __init__(
        self,
        sources: list[Source],
        block_rows: int,
        transform: Callable[[Any], Any] | None = None,
        unreadable: str = UNREADABLE_FAIL,
        ledger: EarlyLedger | None = None,
        checkpoints: UnitCheckpoints | None = None,
    ):
        super().__init__()
        self.sources = list(sources)
        self.block_rows = block_rows
        self.transform = transform
        self.unreadable = unreadable
        self.ledger = ledger  # with a transform: where its drops go, straight from the read task
        self.checkpoints = checkpoints  # a resumable run's: each input read is recorded there

    def get_name(self) -> str:
        return "ReadRecords" if self.transform is None else "ReadRecordsAndFilter"

    def _schema(self) -> Any:
        return read_schema() if self.transform is None else self.transform.output_schema()

    def estimate_inmemory_data_size(self) -> int | None:
        return estimated_total(self.sources)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        tasks = []
        for group in split_sources(self.sources, parallelism if parallelism > 0 else len(self.sources)):
            metadata = BlockMetadata(
                num_rows=None,
                size_bytes=estimated_total(group),
                input_files=[s.uri for s in group],
                exec_stats=None,
            )
            tasks.append(
                ReadTask(
                    lambda group=group: self._read(group),
                    metadata,
                    schema=self._schema(),
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks

    def _read(self, group: list[Source]) -> Iterator[Any]:
        if self.checkpoints is not None:
            return self._read_resumable(group, self.checkpoints)
        return self._filtered(read_blocks(group, self.block_rows, self.unreadable), group[0])

    def _filtered(self, blocks: Iterator[Any], first: Source) -> Iterator[Any]:
        """``blocks`` through the fused stage, if any; its drops to the ledger part named after ``first``."""
        if self.transform is None:
            return blocks
        frames = map(self.transform, blocks)
        return frames if self.ledger is None else self.ledger.route(frames, f"read-{first.index:06d}")

    def _read_resumable(self, group: list[Source], checkpoints: UnitCheckpoints) -> Iterator[Any]:
        """One input at a time, each then recorded as read (:meth:`.checkpoints.UnitCheckpoints.read_done`)
        with the rows it sent on, so that its checkpoint is known complete once the commit stage has
        seen them all: its raw records, each of which the first stage makes one row; or, fused with the
        first stage, its live rows, the drops going to the input's own ledger part."""
        import numpy as np

        for source in group:
            blocks = self._filtered(read_blocks([source], self.block_rows, self.unreadable), source)
            rows, digest, drops = 0, 0, None
            for number, block in enumerate(blocks):
                lines = block.column(LINE).to_numpy()
                if self.transform is not None:
                    kinds = block.column(KIND).to_numpy()
                    if (kinds == LEDGER).any():
                        drops = json.loads(block.column(ROW)[int(np.argmax(kinds == LEDGER))].as_py())
                    lines = lines[kinds == LIVE]
                rows += len(lines)
                digest += line_digest(lines)
                yield block
                if number == 0:
                    crash_point(f"partial:{source.index}")
            checkpoints.read_done(source.index, rows, digest, drops)
