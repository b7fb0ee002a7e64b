"""Write a job's final frames: kept rows, the drop ledger, and the summed statistics records.

One Ray Data ``Datasink``: each write task streams its blocks into ``kept/part-<run>-<task>.jsonl``
(or ``.parquet``) and ``dropped/part-<run>-<task>.jsonl`` and returns its counts and summed
``StepStats``; ``on_write_complete`` (on the driver) adds those up. File names depend only on the
run id and the task index, so a retried task overwrites its own files instead of duplicating rows.
"""

from __future__ import annotations

import json
import posixpath
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ray.data.datasource import Datasink

from twinkle_agentic.preprocessor.stats import StepStats

from .frame import DROPPED, KIND, LINE, LIVE, REASON, ROW, SRC, STATS, STEP

KEPT_DIR = "kept"
DROPPED_DIR = "dropped"
# Blocks reach the sink whole (a dedup partition is one block): convert them to Python in slices so
# a write task holds at most this many rows as Python objects.
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


def output_filesystem(uri: str) -> tuple[Any, str]:
    from pyarrow import fs

    if "://" in uri and not uri.startswith("file://"):
        return fs.FileSystem.from_uri(uri)
    import os

    local = uri[len("file://") :] if uri.startswith("file://") else uri
    return fs.LocalFileSystem(), os.path.abspath(os.path.expanduser(local))


def ledger_line(step: str, reason: str, source: str, line: int, row_json: str) -> str:
    """``{"step", "reason", "source", "line", "row"}`` with the row's JSON embedded as is."""
    return (
        f'{{"step": {json.dumps(step, ensure_ascii=False)}, "reason": {json.dumps(reason, ensure_ascii=False)}, '
        f'"source": {json.dumps(source, ensure_ascii=False)}, "line": {line}, "row": {row_json}}}\n'
    )


class _LazyFile:
    """An output stream opened on first write, so tasks without such rows leave no empty file."""

    def __init__(self, filesystem: Any, path: str):
        self.filesystem, self.path, self.stream = filesystem, path, None

    def open(self) -> Any:
        if self.stream is None:
            # Created here, not on the driver: with local paths a worker may be another machine.
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


class PreprocessDatasink(Datasink):
    """Streams kept rows and ledger lines of each write task into files of their own."""

    def __init__(self, output: str, sources: list[str], run_id: str, output_format: str, rows_per_file: int):
        self.output = output
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
        filesystem, root = output_filesystem(self.output)
        name = f"part-{self.run_id}-{ctx.task_idx:06d}"
        suffix = ".parquet" if self.output_format == "parquet" else ".jsonl"
        kept_file = _LazyFile(filesystem, posixpath.join(root, KEPT_DIR, name + suffix))
        ledger_file = _LazyFile(filesystem, posixpath.join(root, DROPPED_DIR, name + ".jsonl"))
        result = SinkResult()
        parquet_writer = None
        for block in _slices(blocks):  # empty blocks (possibly without columns) yield nothing
            columns = {c: block.column(c).to_pylist() for c in (SRC, LINE, KIND, STEP, REASON, ROW)}
            kept_src, kept_line, kept_rows, ledger = [], [], [], []
            for src, line, kind, step, reason, row in zip(*columns.values(), strict=True):
                if kind == LIVE:
                    kept_src.append(src)
                    kept_line.append(line)
                    kept_rows.append(row)
                elif kind == DROPPED:
                    result.drops[(step, reason)] += 1
                    ledger.append(ledger_line(step, reason, self.sources[src], line, row))
                elif kind == STATS:
                    for record in json.loads(row):
                        stats = StepStats.from_dict(record)
                        position = int(record["position"])
                        mine = result.stats.get(position)
                        result.stats[position] = stats if mine is None else mine + stats
            result.kept += len(kept_rows)
            result.dropped += len(ledger)
            if ledger:
                ledger_file.write("".join(ledger).encode("utf-8", "surrogatepass"))
            if not kept_rows:
                continue
            if self.output_format == "parquet":
                import pyarrow as pa
                import pyarrow.parquet as pq

                table = pa.table(
                    {
                        "source": pa.array([self.sources[s] for s in kept_src], pa.string()),
                        "line": pa.array(kept_line, pa.int64()),
                        "row": pa.array(kept_rows, pa.large_string()),
                    }
                )
                if parquet_writer is None:
                    parquet_writer = pq.ParquetWriter(kept_file.open(), table.schema)
                parquet_writer.write_table(table)
            else:
                text = "\n".join(kept_rows) + "\n"
                kept_file.write(text.encode("utf-8", "surrogatepass"))
        if parquet_writer is not None:
            parquet_writer.close()
        result.files = kept_file.close() + ledger_file.close()
        return result.to_wire()

    def on_write_complete(self, write_result: Any) -> None:
        total = SinkResult()
        for part in write_result.write_returns:
            total.add(SinkResult.from_wire(part))
        self.result = total
