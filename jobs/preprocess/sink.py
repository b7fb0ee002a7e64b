"""Write a job's final frames: kept rows, the drop ledger, and the summed statistics records.

One Ray Data ``Datasink``: each write task streams its blocks into ``kept/part-<run>-<task>.jsonl``
(or ``.parquet``) and ``dropped/part-<run>-<task>.jsonl`` and returns its counts and summed
``StepStats``; ``on_write_complete`` (on the driver) adds those up. File names depend only on the
run id and the task index, so a retried task overwrites its own files instead of duplicating rows.

Rows dropped by the stage fused with the read take a shorter route (``EarlyLedger``): the read task
writes them to ``dropped/part-<run>-read-<first input>.jsonl`` itself, and only a ledger record with
their counts travels on to the sink. They are rows the dedup exchange would only have carried along.
"""

from __future__ import annotations

import json
import posixpath
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ray.data.datasource import Datasink

from twinkle_agentic.io import locate
from twinkle_agentic.preprocessor.dropped_log import LEDGER_KEYS
from twinkle_agentic.preprocessor.stats import StepStats

from .frame import DKEY, DROPPED, KIND, LEDGER, LINE, LIVE, REASON, ROW, SRC, STATS, STEP, FrameBuilder
from .resume import crash_point
from .shared_storage import check_output, marker_path

KEPT_DIR = "kept"
DROPPED_DIR = "dropped"
# Blocks reach the sink whole (a dedup partition is one block): write them in slices so a write task
# holds the output text of at most this many rows at once.
WRITE_SLICE_ROWS = 8192


def _slices(blocks: Iterable[Any]) -> Iterable[Any]:
    for block in blocks:
        for offset in range(0, block.num_rows, WRITE_SLICE_ROWS):
            yield block.slice(offset, WRITE_SLICE_ROWS)


@dataclass
class SinkResult:
    kept: int = 0
    dropped: int = 0
    drops: Counter = field(default_factory=Counter)  # (step, reason) -> rows
    stats: dict[int, StepStats] = field(default_factory=dict)  # pipeline position -> summed stats
    files: list[str] = field(default_factory=list)

    def add(self, other: SinkResult) -> None:
        self.kept += other.kept
        self.dropped += other.dropped
        self.drops.update(other.drops)
        for position, stats in other.stats.items():
            mine = self.stats.get(position)
            self.stats[position] = stats if mine is None else mine + stats
        self.files += other.files

    def to_wire(self) -> dict:
        return {
            "kept": self.kept,
            "dropped": self.dropped,
            "drops": [[s, r, n] for (s, r), n in self.drops.items()],
            "stats": {str(p): s.to_dict() for p, s in self.stats.items()},
            "files": self.files,
        }

    @classmethod
    def from_wire(cls, data: dict) -> SinkResult:
        return cls(
            data["kept"],
            data["dropped"],
            Counter({(s, r): n for s, r, n in data["drops"]}),
            {int(p): StepStats.from_dict(s) for p, s in data["stats"].items()},
            list(data["files"]),
        )


def add_stats_records(texts: Iterable[str], result: SinkResult) -> None:
    """Sum statistics records (the ``row`` of ``_kind`` STATS frame rows) into ``result.stats``."""
    for text in texts:
        for record in json.loads(text):
            stats = StepStats.from_dict(record)
            position = int(record["position"])
            mine = result.stats.get(position)
            result.stats[position] = stats if mine is None else mine + stats


def output_filesystem(uri: str) -> tuple[Any, str]:
    """(pyarrow file system, folder path in it) of the output ``uri`` (:func:`twinkle_agentic.io.locate`)."""
    where = locate(uri)
    return where.filesystem, where.path


def _literal(value: str) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _json_literals(column: Any) -> Any:
    """``column`` (strings) as JSON string literals, encoded once per distinct value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column).combine_chunks()
    literals = [_literal(v) for v in encoded.dictionary.to_pylist()]
    return pa.array(literals, pa.large_binary()).take(encoded.indices)


def _concat(*parts: Any) -> Any:
    """Row-wise concatenation of binary columns and ``bytes`` constants."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def binary(part: Any) -> Any:
        if isinstance(part, bytes):
            return pa.scalar(part, pa.large_binary())
        return pc.cast(part, pa.large_binary())

    return pc.binary_join_element_wise(*(binary(p) for p in parts), binary(b""))


# The text before each value of a ledger line: b'{"step": ', b', "reason": ', ... (json.dumps spacing).
_LEDGER_PREFIXES = tuple((b", " if i else b"{") + _literal(key) + b": " for i, key in enumerate(LEDGER_KEYS))


def ledger_lines(dropped: Any, source_literals: Any) -> Any:
    """One line per row of ``dropped`` (frame rows), built column-wise in Arrow: the drop-ledger
    record of ``twinkle_agentic.preprocessor.dropped_log`` (``LEDGER_KEYS``), byte for byte what
    ``json.dumps`` writes, with the row's JSON embedded as is.

    ``source_literals`` holds the JSON literal of each input file's URI, indexed by ``_src``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    values = {
        "step": _json_literals(dropped.column(STEP)),
        "reason": _json_literals(dropped.column(REASON)),
        "source": source_literals.take(dropped.column(SRC)),
        "line": pc.cast(dropped.column(LINE), pa.string()),
        "row": dropped.column(ROW),
    }
    parts: list[Any] = []
    for prefix, key in zip(_LEDGER_PREFIXES, LEDGER_KEYS, strict=True):
        parts += [prefix, values[key]]
    return _concat(*parts, b"}\n")


# The text around a kept row with lineage: {"source": <uri>, "line": <n>, "row": <row>}.
_LINEAGE_PREFIXES = tuple(
    (b", " if i else b"{") + _literal(key) + b": " for i, key in enumerate(("source", "line", "row"))
)


def kept_lines(kept: Any, source_literals: Any, lineage: bool) -> Any:
    """One JSON Lines line per kept frame row: the row's JSON as it is, or with ``lineage`` the
    record ``{"source", "line", "row"}`` (the layout of the Parquet output and of the ledger), built
    column-wise without decoding the row, so a row's own ``source`` or ``line`` keys stay intact."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not lineage:
        return _concat(kept.column(ROW), b"\n")
    source, line, row = _LINEAGE_PREFIXES
    return _concat(
        source,
        source_literals.take(kept.column(SRC)),
        line,
        pc.cast(kept.column(LINE), pa.string()),
        row,
        kept.column(ROW),
        b"}\n",
    )


def text_buffers(lines: Any) -> list:
    """The bytes of a (chunked) large_binary array of lines, one buffer per chunk, no copy."""
    import numpy as np

    buffers = []
    for chunk in getattr(lines, "chunks", [lines]):
        if len(chunk):
            _, offsets, data = chunk.buffers()
            ends = np.frombuffer(offsets, np.int64)[chunk.offset : chunk.offset + len(chunk) + 1]
            buffers.append(data.slice(int(ends[0]), int(ends[-1] - ends[0])))
    return buffers


class _LazyFile:
    """An output stream opened on first write, so tasks without such rows leave no empty file.
    Before it creates anything it checks that the output folder here is the driver's (``marker``,
    see :mod:`.shared_storage`)."""

    def __init__(self, filesystem: Any, path: str, marker: str):
        self.filesystem, self.path, self.marker, self.stream = filesystem, path, marker, None

    def open(self) -> Any:
        if self.stream is None:
            check_output(self.filesystem, self.marker)
            self.filesystem.create_dir(posixpath.dirname(self.path), recursive=True)
            self.stream = self.filesystem.open_output_stream(self.path)
        return self.stream

    def write(self, data: bytes) -> None:
        self.open().write(data)

    def close(self) -> list[str]:
        if self.stream is None:
            return []
        self.stream.close()
        return [self.path]


class LedgerFile:
    """Ledger lines of dropped frame rows, streamed into one file, counted by (step, reason)."""

    def __init__(self, filesystem: Any, path: str, sources: list[str], marker: str):
        import pyarrow as pa

        self.file = _LazyFile(filesystem, path, marker)
        self.source_literals = pa.array([_literal(uri) for uri in sources], pa.large_binary())

    def write(self, dropped: Any, result: SinkResult) -> None:
        if not dropped.num_rows:
            return
        counts = dropped.group_by([STEP, REASON]).aggregate([([], "count_all")])
        for step, reason, n in zip(*(counts.column(i).to_pylist() for i in range(3)), strict=True):
            result.drops[(step, reason)] += n
        result.dropped += dropped.num_rows
        for buffer in text_buffers(ledger_lines(dropped, self.source_literals)):
            self.file.write(buffer)

    def close(self) -> list[str]:
        return self.file.close()


def split_dropped(frame: Any) -> tuple[Any, Any]:
    """(dropped rows, the rest) of a frame table. A stage's output lists its dropped rows first
    (``StageAdapter`` adds them before the live rows), so this is two slices, without copying any
    row's text; any other order is filtered."""
    import numpy as np
    import pyarrow as pa

    dropped = frame.column(KIND).to_numpy() == DROPPED
    count = int(np.count_nonzero(dropped))
    if dropped[:count].all():
        return frame.slice(0, count), frame.slice(count)
    mask = pa.array(dropped)
    return frame.filter(mask), frame.filter(np.logical_not(dropped))


def ledger_path(root: str, run_id: str, name: str) -> str:
    return posixpath.join(root, DROPPED_DIR, f"part-{run_id}-{name}.jsonl")


@dataclass(frozen=True)
class EarlyLedger:
    """The drop ledger as read tasks write it: the rows their fused stage dropped go straight to a
    ledger file of the task's own, instead of through the dedup exchange's sort (into the object
    store three times: read output, sort map, sort reduce) to the sink. The task's file name depends
    only on the run and its first input, so a retried task rewrites its own file (the read tasks of a
    resumable run write one file per input, named after it)."""

    output: str
    run_id: str
    sources: list[str]

    def route(self, frames: Iterator[Any], name: str) -> Iterator[Any]:
        """``frames`` without their dropped rows, which go to ledger file ``name``; then one ledger
        record (``_kind`` LEDGER) saying what the file holds, for the sink to count."""
        filesystem, root = output_filesystem(self.output)
        marker = marker_path(root, self.run_id)
        ledger = LedgerFile(filesystem, ledger_path(root, self.run_id, name), self.sources, marker)
        result = SinkResult()
        schema = None
        try:
            for frame in frames:
                schema = frame.schema
                dropped, rest = split_dropped(frame)
                ledger.write(dropped, result)
                yield rest
        finally:  # also when the read fails (an unreadable file) or Ray stops the task
            result.files = ledger.close()
        if result.dropped:
            record = FrameBuilder(DKEY in schema.names)
            record.add(-1, -1, LEDGER, None, None, json.dumps(result.to_wire()))
            yield record.build()


class PreprocessDatasink(Datasink):
    """Streams kept rows and ledger lines of each write task into files of their own."""

    def __init__(
        self,
        output: str,
        sources: list[str],
        run_id: str,
        output_format: str,
        rows_per_file: int,
        lineage: bool = False,
    ):
        self.output = output
        self.lineage = lineage  # JSONL kept rows as {"source", "line", "row"} (Parquet always is)
        self.sources = list(sources)
        self.run_id = run_id
        self.output_format = output_format
        self.rows_per_file = rows_per_file
        self.result: SinkResult | None = None

    @property
    def min_rows_per_write(self) -> int:
        return self.rows_per_file

    def get_name(self) -> str:
        return "WriteKeptAndLedger"

    def write(self, blocks: Iterable[Any], ctx: Any) -> dict:
        import pyarrow as pa
        import pyarrow.compute as pc

        filesystem, root = output_filesystem(self.output)
        name = f"part-{self.run_id}-{ctx.task_idx:06d}"
        suffix = ".parquet" if self.output_format == "parquet" else ".jsonl"
        marker = marker_path(root, self.run_id)
        kept_file = _LazyFile(filesystem, posixpath.join(root, KEPT_DIR, name + suffix), marker)
        ledger_file = LedgerFile(
            filesystem, ledger_path(root, self.run_id, f"{ctx.task_idx:06d}"), self.sources, marker
        )
        result = SinkResult()
        parquet_writer = None
        source_literals = ledger_file.source_literals
        for block in _slices(blocks):  # empty blocks (possibly without columns) yield nothing
            kinds = block.column(KIND)
            ledger_file.write(block.filter(pc.equal(kinds, DROPPED)), result)
            add_stats_records(block.filter(pc.equal(kinds, STATS)).column(ROW).to_pylist(), result)
            for text in block.filter(pc.equal(kinds, LEDGER)).column(ROW).to_pylist():
                result.add(SinkResult.from_wire(json.loads(text)))  # drops a read task wrote itself
            kept = block.filter(pc.equal(kinds, LIVE))
            if not kept.num_rows:
                continue
            result.kept += kept.num_rows
            if self.output_format == "parquet":
                import pyarrow.parquet as pq

                table = pa.table(
                    {
                        "source": pa.array(self.sources, pa.string()).take(kept.column(SRC)),
                        "line": pc.cast(kept.column(LINE), pa.int64()),
                        "row": kept.column(ROW),
                    }
                )
                if parquet_writer is None:
                    parquet_writer = pq.ParquetWriter(kept_file.open(), table.schema)
                parquet_writer.write_table(table)
            else:
                for buffer in text_buffers(kept_lines(kept, source_literals, self.lineage)):
                    kept_file.write(buffer)
            crash_point(f"write:{ctx.task_idx}")
        if parquet_writer is not None:
            parquet_writer.close()
        result.files += kept_file.close() + ledger_file.close()
        return result.to_wire()

    def on_write_complete(self, write_result: Any) -> None:
        total = SinkResult()
        for part in write_result.write_returns:
            total.add(SinkResult.from_wire(part))
        self.result = total
