"""The sink's Arrow-built output lines, without Ray."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow as pa
import pytest
from pyarrow import fs
from twinkle_agentic.jobs.preprocess.frame import (
    DKEY,
    DPART,
    DROPPED,
    KIND,
    LEDGER,
    LIVE,
    STATS,
    FrameBuilder,
)
from twinkle_agentic.jobs.preprocess.shared_storage import StorageNotSharedError, write_marker
from twinkle_agentic.jobs.preprocess.sink import (
    EarlyLedger,
    PreprocessDatasink,
    SinkResult,
    ledger_lines,
    split_dropped,
    text_buffers,
)

from twinkle_agentic.preprocessor.dropped_log import LEDGER_KEYS, REASON_KEY, ledger_line
from twinkle_agentic.preprocessor.stats import StepStats

SOURCES = ["/data/a.jsonl", '/data/we"ird ü.jsonl']


def expected_ledger_line(step: str, reason: str, source: str, line: int, row: str) -> str:
    literal = json.dumps  # the reference: one json.dumps per field, the row embedded as is
    return (
        f'{{"step": {literal(step, ensure_ascii=False)}, "reason": {literal(reason, ensure_ascii=False)}, '
        f'"source": {literal(source, ensure_ascii=False)}, "line": {line}, "row": {row}}}\n'
    )


def frame(rows: list[tuple]) -> pa.Table:
    out = FrameBuilder()
    for src, line, kind, step, reason, row in rows:
        out.add(src, line, kind, step, reason, row)
    return out.build()


ROWS = [
    (0, 1, LIVE, None, None, '{"id": 1, "text": "héllo \\"q\\""}'),
    (1, 2, DROPPED, "HardFilter", "too_short", '{"id": 2}'),
    (0, 3, DROPPED, "read", "malformed_json", '"{not json"'),
    (1, 40, LIVE, None, None, '{"id": 4, "zh": "你好"}'),
    (0, 5, DROPPED, 'Weird "Step"', "duplicate", '{"id": 5, "emoji": "🙂"}'),
]


def test_ledger_lines_match_one_json_dumps_per_field():
    dropped = frame([r for r in ROWS if r[2] == DROPPED])
    sources = pa.array([json.dumps(s, ensure_ascii=False).encode() for s in SOURCES], pa.large_binary())
    text = b"".join(bytes(b) for b in text_buffers(ledger_lines(dropped, sources))).decode()
    expected = "".join(
        expected_ledger_line(step, reason, SOURCES[src], line, row)
        for src, line, _, step, reason, row in ROWS
        if step
    )
    assert text == expected
    for line in text.splitlines():
        json.loads(line)


def test_the_job_and_quality_preprocessor_write_one_ledger_record():
    """The job's Arrow-built line is the line DroppedLog writes for the same drop, origin included."""
    dropped = frame([r for r in ROWS if r[2] == DROPPED])
    sources = pa.array([json.dumps(s, ensure_ascii=False).encode() for s in SOURCES], pa.large_binary())
    job_lines = b"".join(bytes(b) for b in text_buffers(ledger_lines(dropped, sources))).decode().splitlines()
    library_lines = [
        ledger_line(step, {**json.loads(row), REASON_KEY: reason} if row.startswith("{") else json.loads(row),
                    SOURCES[src], line)
        for src, line, _, step, reason, row in ROWS
        if step and row.startswith("{")
    ]
    assert [line for line in job_lines if '"row": {' in line] == library_lines
    assert list(json.loads(job_lines[0])) == list(LEDGER_KEYS)


def test_text_buffers_of_sliced_and_chunked_arrays():
    values = [b"a\n", b"bb\n", b"", b"ccc\n", b"d\n"]
    array = pa.array(values, pa.large_binary())
    chunked = pa.chunked_array([array.slice(1, 3), array.slice(4)])
    assert b"".join(bytes(b) for b in text_buffers(chunked)) == b"bb\nccc\nd\n"
    assert b"".join(bytes(b) for b in text_buffers(array.slice(2, 1))) == b""
    assert text_buffers(array.slice(0, 0)) == []


def marked(folder) -> str:
    """``folder`` holding the storage marker of run "run", as the driver writes it before a run."""
    write_marker(fs.LocalFileSystem(), str(folder), "run")
    return str(folder)


def test_sink_writes_kept_rows_ledger_and_counts(tmp_path):
    marked(tmp_path)
    sink = PreprocessDatasink(str(tmp_path), SOURCES, "run", "jsonl", 1000)
    table = frame(ROWS)
    result = sink.write([table.slice(0, 2), table.slice(2)], SimpleNamespace(task_idx=3))
    kept = (tmp_path / "kept" / "part-run-000003.jsonl").read_text(encoding="utf-8")
    assert kept == "".join(row + "\n" for _, _, kind, _, _, row in ROWS if kind == LIVE)
    ledger = (tmp_path / "dropped" / "part-run-000003.jsonl").read_text(encoding="utf-8")
    assert [json.loads(line)["line"] for line in ledger.splitlines()] == [2, 3, 5]
    assert result["kept"] == 2 and result["dropped"] == 3
    assert sorted(map(tuple, result["drops"])) == [
        ("HardFilter", "too_short", 1),
        ('Weird "Step"', "duplicate", 1),
        ("read", "malformed_json", 1),
    ]


def keyed_frame(rows: list[tuple]) -> pa.Table:
    """A frame as a stage before a dedup exchange emits it: live rows with a group key."""
    out = FrameBuilder(with_dedup_key=True)
    for src, line, kind, step, reason, row in rows:
        out.add(src, line, kind, step, reason, row, f"key-{line}" if kind == LIVE else None, 1)
    out.add_stats([{"position": 0, **StepStats("HardFilter").to_dict()}])
    return out.build()


def test_early_ledger_writes_the_drops_and_passes_on_the_rest_and_a_record(tmp_path):
    marked(tmp_path)
    table = keyed_frame(ROWS)
    frames = list(
        EarlyLedger(str(tmp_path), "run", SOURCES).route(
            iter([table.slice(0, 3), table.slice(3)]), "read-000007"
        )
    )

    ledger = (tmp_path / "dropped" / "part-run-read-000007.jsonl").read_text(encoding="utf-8")
    assert [json.loads(line)["line"] for line in ledger.splitlines()] == [2, 3, 5]
    *passed, record = frames
    assert [f.schema for f in passed] == [table.schema] * 2
    passed_kinds = [k for f in passed for k in f.column(KIND).to_pylist()]
    assert passed_kinds == [LIVE, LIVE, STATS]  # live rows and the statistics record go on
    assert record.schema == table.schema and record.column(KIND).to_pylist() == [LEDGER]
    assert record.column(DKEY).to_pylist() == [None] and record.column(DPART).to_pylist()[0] >= 0
    wire = SinkResult.from_wire(json.loads(record.column("row")[0].as_py()))
    assert (wire.kept, wire.dropped) == (0, 3)
    assert wire.files == [str(tmp_path / "dropped" / "part-run-read-000007.jsonl")]

    # the sink counts what the record says, beside the rows it writes itself
    sink = PreprocessDatasink(str(tmp_path), SOURCES, "run", "jsonl", 1000)
    result = SinkResult.from_wire(sink.write(passed + [record], SimpleNamespace(task_idx=0)))
    assert (result.kept, result.dropped) == (2, 3)
    assert result.drops == wire.drops
    assert not (tmp_path / "dropped" / "part-run-000000.jsonl").exists()  # no drops of its own
    assert sorted(result.files) == sorted(wire.files + [str(tmp_path / "kept" / "part-run-000000.jsonl")])


def test_early_ledger_without_drops_leaves_no_file_and_no_record(tmp_path):
    table = keyed_frame([r for r in ROWS if r[2] == LIVE])
    frames = list(EarlyLedger(str(tmp_path), "run", SOURCES).route(iter([table]), "read-000000"))
    assert [f.num_rows for f in frames] == [table.num_rows]
    assert not (tmp_path / "dropped").exists()


def test_tasks_write_nothing_into_a_folder_without_the_runs_marker(tmp_path):
    """A write task on a node whose disk does not hold the driver's output folder (or any folder
    without this run's marker) refuses before creating a file."""
    write_marker(fs.LocalFileSystem(), str(tmp_path), "other-run")
    sink = PreprocessDatasink(str(tmp_path), SOURCES, "run", "jsonl", 1000)
    with pytest.raises(StorageNotSharedError, match=r"lacks the marker \.twinkle-run-run .* on (host|node) "):
        sink.write([frame(ROWS)], SimpleNamespace(task_idx=0))
    with pytest.raises(StorageNotSharedError):
        list(EarlyLedger(str(tmp_path), "run", SOURCES).route(iter([keyed_frame(ROWS)]), "read-000000"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".twinkle-run-other-run"]


def test_split_dropped_slices_a_stage_output_and_filters_any_other_order():
    stage_order = keyed_frame(sorted(ROWS, key=lambda r: r[2] != DROPPED))  # drops first, as stages emit
    dropped, rest = split_dropped(stage_order)
    assert dropped.column(KIND).to_pylist() == [DROPPED] * 3
    assert rest.column(KIND).to_pylist() == [LIVE, LIVE, STATS]
    assert rest.column("row").chunk(0).offset == 3  # a slice of the same buffers: no row copied

    dropped, rest = split_dropped(keyed_frame(ROWS))  # interleaved
    assert dropped.column("_line").to_pylist() == [2, 3, 5]
    assert rest.column("_line").to_pylist() == [1, 40, -1]
