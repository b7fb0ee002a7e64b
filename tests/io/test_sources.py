"""Input expansion, line reading and record parsing (no Ray)."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import REPO_ROOT
from twinkle_agentic.io import (
    INVALID_ROW,
    MALFORMED_JSON,
    UNREADABLE_FILE,
    InputError,
    UnreadableInputError,
    expand_inputs,
    iter_lines,
    iter_records,
    parse_read,
    parse_record,
    read_source,
)
from twinkle_agentic.io import text as text_reader


def test_lines_keep_numbers_skip_blanks_and_strip_crlf_and_bom(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n\r\n   \n{"b": 2}\n{"c": 3}')
    assert list(iter_lines(str(path))) == [(1, b'{"a": 1}'), (4, b'{"b": 2}'), (5, b'{"c": 3}')]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("piece_bytes", [3, 1 << 18])
def test_text_with_a_utf16_or_utf32_byte_order_mark_reads_as_utf8(
    tmp_path, monkeypatch, encoding, piece_bytes
):
    """Windows tools save "Unicode" text as UTF-16 with a byte-order mark; before, every line of such
    a file was a malformed_json drop. Any cut between pieces gives the same records."""
    import codecs

    monkeypatch.setattr(text_reader, "_PIECE_BYTES", piece_bytes)
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}
    bom |= {"utf-32-le": codecs.BOM_UTF32_LE, "utf-32-be": codecs.BOM_UTF32_BE}
    text = '{"content": "你好 😀"}\r\n\r\n{"b": 2}\n[1]'
    jsonl, array = tmp_path / "a.jsonl", tmp_path / "b.json"
    jsonl.write_bytes(bom.get(encoding, b"") + text.encode(encoding))
    array.write_bytes(bom.get(encoding, b"") + '  [{"a": "é"},\n {"b": 2}]'.encode(encoding))
    expected = [(1, '{"content": "你好 😀"}'.encode()), (3, b'{"b": 2}'), (4, b"[1]")]
    assert list(iter_lines(str(jsonl))) == expected
    assert [parse_record(raw)[0] for _, raw in iter_records(expand_inputs([str(array)])[0])] == [
        {"a": "é"},
        {"b": 2},
    ]


def test_bytes_that_are_not_utf16_spoil_only_their_own_line(tmp_path):
    path = tmp_path / "a.jsonl"
    lone_surrogate = "\ud83d".encode("utf-16-le", "surrogatepass")
    path.write_bytes(
        '\ufeff{"a": 1}\n{"b": "'.encode("utf-16-le")
        + lone_surrogate
        + '"}\n{"c": 3}\n'.encode("utf-16-le")
        + b"x"
    )
    records = list(iter_lines(str(path)))
    assert [number for number, _ in records] == [1, 2, 3, 4]
    assert [parse_record(raw)[1] for _, raw in records] == [None, MALFORMED_JSON, None, MALFORMED_JSON]


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    piece_bytes=st.integers(1, 50),
    ending=st.sampled_from([b"\n", b"\r\n"]),
)
def test_lines_are_the_same_however_the_file_is_cut_into_pieces(lines, piece_bytes, ending):
    """A line may span any number of pieces (a 64 MiB line read in 256 KiB pieces spans 256, and is
    joined once: before, it was copied again for every piece, 12 s where it now takes 0.2 s)."""
    data = ending.join(lines)
    pieces = [data[i : i + piece_bytes] for i in range(0, len(data), piece_bytes)]
    expected = [(n, line.removesuffix(b"\r")) for n, line in enumerate(data.split(b"\n"), 1) if line.strip()]
    assert list(text_reader._lines(iter(pieces))) == expected


def test_gzip_is_detected_from_the_name(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n\n{"b": 2}\n'))
    assert list(iter_lines(str(path))) == [(1, b'{"a": 1}'), (3, b'{"b": 2}')]


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"{not json", MALFORMED_JSON),
        (b'{"a": [1, 2', MALFORMED_JSON),
        (b"\xff\xfe{}", MALFORMED_JSON),
        (b"[1, 2]", INVALID_ROW),
        (b'"text"', INVALID_ROW),
        (b"null", INVALID_ROW),
        (b"[" * 100000, MALFORMED_JSON),
    ],
)
def test_bad_records_become_reasons(raw, reason):
    row, why, value = parse_record(raw)
    assert row is None and why == reason
    if reason == MALFORMED_JSON:
        assert isinstance(value, str) and value  # the raw text goes to the ledger


def test_good_record_parses_unicode():
    row, why, _ = parse_record('{"messages": [{"role": "user", "content": "你好"}]}'.encode())
    assert why is None and row["messages"][0]["content"] == "你好"


def test_expand_files_dirs_globs_and_uris_in_order(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in [
        "d/b.jsonl",
        "d/a.jsonl",
        "d/sub/c.jsonl.gz",
        "d/_SUCCESS",
        "d/.hidden.jsonl",
        "d/notes.txt",
        "x.jsonl",
    ]:
        (tmp_path / name).write_bytes(b"")
    sources = expand_inputs([str(tmp_path / "x.jsonl"), str(tmp_path / "d")])
    assert [s.uri.removeprefix(str(tmp_path)) for s in sources] == [
        "/x.jsonl",
        "/d/a.jsonl",
        "/d/b.jsonl",
        "/d/sub/c.jsonl.gz",
    ]
    assert [s.index for s in sources] == [0, 1, 2, 3]
    # a glob: * stays in one directory, ** descends; a file named twice is read once
    sources = expand_inputs([str(tmp_path / "d" / "*.jsonl"), str(tmp_path / "d" / "a.jsonl")])
    assert [s.uri.rsplit("/", 1)[1] for s in sources] == ["a.jsonl", "b.jsonl"]
    sources = expand_inputs([str(tmp_path / "d" / "**" / "*.jsonl*")])
    assert [s.uri.rsplit("/", 1)[1] for s in sources] == ["a.jsonl", "b.jsonl", "c.jsonl.gz"]
    sources = expand_inputs(["file://" + str(tmp_path / "x.jsonl")])
    assert sources[0].uri == str(tmp_path / "x.jsonl") and sources[0].format == "jsonl"
    # a file reached again through a link (to it, or to its folder) is read once, under its first name
    (tmp_path / "y.jsonl").symlink_to(tmp_path / "x.jsonl")
    (tmp_path / "d2").symlink_to(tmp_path / "d")
    sources = expand_inputs(
        [str(tmp_path / "x.jsonl"), str(tmp_path / "y.jsonl"), str(tmp_path / "d"), str(tmp_path / "d2")]
    )
    assert [s.uri.removeprefix(str(tmp_path)) for s in sources] == [
        "/x.jsonl",
        "/d/a.jsonl",
        "/d/b.jsonl",
        "/d/sub/c.jsonl.gz",
    ]


def test_the_jobs_own_outputs_are_skipped_in_expansions_and_refused_when_named(tmp_path, caplog):
    from twinkle_agentic.jobs.preprocess.job import is_own_output

    data = tmp_path / "data"
    for name in [
        "a.jsonl",
        "clean/kept/part-1.jsonl",
        "clean/dropped/part-1.jsonl",
        "clean/stats.json",
        "clean/extra.jsonl",
        "cleaner/b.jsonl",
    ]:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("{}\n")
    (tmp_path / "link").symlink_to(data)
    for output in [
        str(data / "clean"),
        "file://" + str(data / "clean") + "/",
        str(tmp_path / "link" / "clean"),
    ]:
        own = is_own_output(output)
        caplog.clear()
        sources = expand_inputs([str(data)], skip=own)
        # only the job's outputs are skipped: other files in the folder, and a sibling folder, are read
        assert [s.uri.removeprefix(str(data)) for s in sources] == [
            "/a.jsonl",
            "/clean/extra.jsonl",
            "/cleaner/b.jsonl",
        ]
        assert [s.index for s in sources] == [0, 1, 2]
        assert "not reading 3 file(s) of an earlier run's output" in caplog.text
        assert len(expand_inputs([str(data / "**" / "*.json*")], skip=own)) == 3
        with pytest.raises(InputError, match="is an output of this job's --output folder"):
            expand_inputs([str(data / "clean" / "stats.json")], skip=own)
        with pytest.raises(InputError, match="hold only files of an earlier run's output"):
            expand_inputs([str(data / "clean" / "kept")], skip=own)
    # object store URIs compare as URIs
    own = is_own_output("s3://bucket/data/clean")
    assert own("s3://bucket/data/clean/kept/part-1.jsonl") and own("s3://bucket/data/clean/stats.json")
    assert not own("s3://bucket/data/clean/extra.jsonl") and not own("s3://bucket/data/cleaner/kept/x.jsonl")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("missing.jsonl", "does not exist"),
        ("*.nothing", "matches no file"),
        ("notes.txt", "cannot tell the format"),
        ("empty_dir", "holds no"),
    ],
)
def test_input_errors_name_the_problem(tmp_path, spec, message):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(InputError, match=message):
        expand_inputs([str(tmp_path / spec)])


def test_parquet_rows_become_json_records(tmp_path):
    rows = [
        {"id": 1, "messages": [{"role": "user", "content": "hi there"}], "blob": b"\x00\x01"},
        {"id": 2, "messages": [{"role": "user", "content": "你好"}], "blob": None},
    ]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    (source,) = expand_inputs([str(path)])
    assert source.format == "parquet"
    records = list(iter_records(source))
    assert [n for n, _ in records] == [1, 2]
    first = json.loads(records[0][1])
    assert first["messages"] == rows[0]["messages"] and first["blob"] == "AAE="
    assert json.loads(records[1][1])["messages"][0]["content"] == "你好"


def _lines(n: int) -> bytes:
    return b"".join(json.dumps({"id": i, "text": f"row {i} " * 20}).encode() + b"\n" for i in range(n))


def _truncated_gzip(path):
    whole = gzip.compress(_lines(20_000))
    path.write_bytes(whole[: len(whole) * 3 // 4])


def _not_gzip(path):
    path.write_bytes(_lines(10))  # plain text under a .gz name


def _truncated_parquet(path):
    pq.write_table(pa.Table.from_pylist([{"id": i} for i in range(100)]), path)
    path.write_bytes(path.read_bytes()[:-20])


@pytest.mark.parametrize(
    "name, make, readable",
    [
        ("cut.jsonl.gz", _truncated_gzip, range(10_000, 15_000)),  # most of what precedes the cut
        ("plain.jsonl.gz", _not_gzip, range(0, 1)),
        ("cut.parquet", _truncated_parquet, range(0, 1)),
    ],
)
def test_a_file_that_breaks_off_stops_the_read_naming_it_or_becomes_one_drop(tmp_path, name, make, readable):
    path = tmp_path / name
    make(path)
    (source,) = expand_inputs([str(path)])

    read = []
    with pytest.raises(UnreadableInputError) as failure:
        for record in iter_records(source):
            read.append(record)
    error = failure.value
    assert isinstance(error, InputError) and error.uri == source.uri
    assert error.line == len(read) + 1 and len(read) in readable
    assert str(path) in str(error) and "--unreadable-files drop" in str(error)
    assert [n for n, _ in read] == list(range(1, len(read) + 1))
    # Ray ships the error from a worker to the driver: it must survive pickling whole
    import pickle

    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.uri, copy.line, str(copy)) == (
        UnreadableInputError,
        error.uri,
        error.line,
        str(error),
    )

    with pytest.raises(UnreadableInputError):
        list(read_source(source))  # "fail" is the default
    records = list(read_source(source, "drop"))
    assert [(n, raw) for n, raw, _ in records[:-1]] == read
    line, raw, why = records[-1]
    assert (line, raw) == (error.line, b"") and why.startswith(f"unreadable from record {line} on: ")
    assert parse_read(raw, why) == (None, UNREADABLE_FILE, why)
    assert all(error is None for _, _, error in records[:-1])


def test_the_bundled_sample_folder_reads_to_its_end():
    """``--input data/sample``: its pretty-printed manifest.json sits beside the data, and reads as
    JSON Lines (a malformed_json drop per line), never as an error that stops the run."""

    from twinkle_agentic.preprocessor.pipeline import read_rows

    folder = REPO_ROOT / "data" / "sample"
    rows, dropped, records = read_rows([str(folder)])
    manifest_lines = sum(1 for line in (folder / "manifest.json").read_text().splitlines() if line.strip())
    assert records == len(rows) + len(dropped)
    assert sum(1 for _, reason, _ in dropped if reason == MALFORMED_JSON) >= manifest_lines
