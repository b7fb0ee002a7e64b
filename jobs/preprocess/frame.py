"""How rows travel between Ray Data stages: one Arrow table layout for every block.

Each row is carried as its JSON text (column ``row``), next to its id and its fate:

=========  ==============  ===========================================================
column     type            meaning
=========  ==============  ===========================================================
``_src``   int32           index of the source file in the expanded input list
``_line``  int64           1-based line (JSONL), row (Parquet) or array element (JSON)
``_kind``  int8            0 live, 1 dropped, 2 statistics record, 3 ledger record
``_step``  string          step that dropped the row (null while live)
``_reason`` string         drop reason (null while live)
``row``    large_string    the row as JSON; for a dropped row, the row as the step saw it
=========  ==============  ===========================================================

Between a stage and the dedup exchange that follows it, three more columns: ``_dkey`` (the live
row's group key), ``_dlen`` (its message count) and ``_dpart`` (a 32-bit hash of the group key that
routes the row to its partition; for rows that never compete, a hash of their id).

Why JSON text instead of Arrow structs: rows are schemaless. ``content`` is a string in one
message and a list of parts in the next, ``tool_calls`` is a list here and a JSON string there,
and rows carry arbitrary extra keys. Arrow needs one type per column per block and unifies
blocks by promoting types or filling missing struct fields with nulls, so a struct column would
either fail on mixed rows or silently rewrite them (a ``{"a": 1}`` beside a ``{"b": 2}`` comes back
as ``{"a": 1, "b": None}``), and the job could no longer match the one-process run. JSON text
round-trips every row exactly and costs one decode and one encode per stage, and cheap steps are
fused into one stage so that happens once for all of them.

Statistics records (``_kind`` 2) are how per-step ``StepStats`` reach the driver: every stage call
appends one record with the stats of the batch it processed, the records flow with the data, and
the output sink sums them. They are therefore counted exactly once even when Ray retries a task.
Ledger records (``_kind`` 3) stand for dropped rows a read task wrote to the drop ledger itself, so
that they never travel through the dedup exchange (see ``sink.EarlyLedger``): the file and the drops
by step and reason, which the sink adds to its own.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

SRC, LINE, KIND, STEP, REASON, ROW = "_src", "_line", "_kind", "_step", "_reason", "row"
# Present only between a stage and the dedup exchange that follows it.
DKEY, DLEN, DPART = "_dkey", "_dlen", "_dpart"
# _dpart lies in [0, PART_SPACE); the exchange cuts that range into equal partitions.
PART_SPACE = 1 << 32
# Knuth's multiplicative hash: spreads consecutive line numbers over the whole partition range.
_SPREAD = 2654435761
# Read output: the raw bytes of each record before parsing, and why the rest of a file could not be
# read (null for every real record; see ``twinkle_agentic.io.read_source``).
RAW, READ_ERROR = "_raw", "_error"

LIVE, DROPPED, STATS, LEDGER = 0, 1, 2, 3


def frame_schema(with_dedup_key: bool = False) -> Any:
    import pyarrow as pa

    fields = [
        pa.field(SRC, pa.int32()),
        pa.field(LINE, pa.int64()),
        pa.field(KIND, pa.int8()),
        pa.field(STEP, pa.string()),
        pa.field(REASON, pa.string()),
        pa.field(ROW, pa.large_string()),
    ]
    if with_dedup_key:
        fields += [pa.field(DKEY, pa.string()), pa.field(DLEN, pa.int32()), pa.field(DPART, pa.int64())]
    return pa.schema(fields)


def key_partition(key: str) -> int:
    """Where a live row goes in the dedup exchange: rows with equal group keys always meet."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass"))


def id_partition(src: int, line: int) -> int:
    """Where a row that competes in no dedup goes (dropped rows, statistics): spread by its id."""
    return ((line * _SPREAD) ^ src) & (PART_SPACE - 1)


def read_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field(SRC, pa.int32()),
            pa.field(LINE, pa.int64()),
            pa.field(RAW, pa.large_binary()),
            pa.field(READ_ERROR, pa.string()),
        ]
    )


class FrameBuilder:
    """Collects output rows of one stage call column by column, then builds the Arrow table."""

    def __init__(self, with_dedup_key: bool = False):
        self.with_dedup_key = with_dedup_key
        self.columns: dict[str, list] = {name: [] for name in frame_schema(with_dedup_key).names}

    def add(
        self,
        src: int,
        line: int,
        kind: int,
        step: str | None,
        reason: str | None,
        row_json: str,
        dkey: str | None = None,
        dlen: int = 0,
    ) -> None:
        c = self.columns
        c[SRC].append(src)
        c[LINE].append(line)
        c[KIND].append(kind)
        c[STEP].append(step)
        c[REASON].append(reason)
        c[ROW].append(row_json)
        if self.with_dedup_key:
            c[DKEY].append(dkey)
            c[DLEN].append(dlen)
            c[DPART].append(key_partition(dkey) if kind == LIVE else id_partition(src, line))

    def add_stats(self, records: list[dict]) -> None:
        """One statistics record: ``[{position, ...StepStats.to_dict()}, ...]`` as JSON."""
        self.add(-1, -1, STATS, None, None, json.dumps(records))

    def build(self) -> Any:
        import pyarrow as pa

        schema = frame_schema(self.with_dedup_key)
        try:
            return pa.table(self.columns, schema=schema)
        except UnicodeEncodeError:  # rare: a row holds a lone surrogate; pay for the scan only then
            from twinkle_agentic.io.records import escape_surrogates

            self.columns[ROW] = [escape_surrogates(text) for text in self.columns[ROW]]
            return pa.table(self.columns, schema=schema)


def passthrough(table: Any, with_dedup_key: bool = False) -> Any:
    """The rows of a frame table that are not live, unchanged, in the output layout.

    Dropped rows and statistics records never compete in a dedup; when the dedup columns are needed
    they get no key and a partition spread by their id, so the exchange spreads them evenly.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    rest = table.filter(pc.not_equal(table.column(KIND), LIVE)).select(list(frame_schema().names))
    if not with_dedup_key:
        return rest
    return (
        rest.append_column(DKEY, pa.nulls(rest.num_rows, pa.string()))
        .append_column(DLEN, pa.array([0] * rest.num_rows, pa.int32()))
        .append_column(DPART, id_partitions(rest))
    )


def id_partitions(table: Any) -> Any:
    """:func:`id_partition` of every row of a table with ``_src`` and ``_line``, in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # int64 products wrap, which keeps the low 32 bits that are used
    spread = pc.multiply(table.column(LINE), pa.scalar(_SPREAD, pa.int64()))
    part = pc.bit_wise_xor(spread, pc.cast(table.column(SRC), pa.int64()))
    return pc.bit_wise_and(part, pa.scalar(PART_SPACE - 1, pa.int64()))
