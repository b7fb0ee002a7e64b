"""Generated inputs of the preprocess job, as fixtures (a pytest plugin that tests/conftest.py loads:
the job tests, the input readers' tests and the cluster tests share them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.job_data import chat_rows, write_jsonl_files


@pytest.fixture(scope="session")
def chat_inputs(tmp_path_factory) -> Path:
    """~800 rows in 3 JSONL files (one CRLF, one gzipped) with bad and blank lines."""
    directory = tmp_path_factory.mktemp("chat_inputs")
    write_jsonl_files(directory, chat_rows(600, seed=7), n_files=3)
    return directory


@pytest.fixture(scope="session")
def parquet_input(tmp_path_factory) -> Path:
    """Plain-text chat rows (ids from 100,000) in a Parquet file, duplicates included."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        r
        for r in chat_rows(200, seed=11)
        if all(isinstance(m.get("content"), str) and set(m) == {"role", "content"} for m in r["messages"])
    ]
    for i, row in enumerate(rows):
        row["id"] = 100_000 + i
    path = tmp_path_factory.mktemp("parquet_input") / "chats.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture(scope="session")
def json_array_input(tmp_path_factory) -> Path:
    """Chat rows (ids from 200,000) as one pretty-printed JSON array, the layout many chat datasets
    ship in, with an element that is not JSON and one that is not an object."""
    import json

    rows = chat_rows(150, seed=13)
    for i, row in enumerate(rows):
        row["id"] = 200_000 + i
    elements = [json.dumps(row, indent=1, ensure_ascii=i % 2 == 0) for i, row in enumerate(rows)]
    elements[10:10] = ['{"id": 299998, "messages": tru}', '"not a row"']
    path = tmp_path_factory.mktemp("json_array_input") / "chats.json"
    path.write_text("[\n" + ",\n".join(elements) + "\n]\n", encoding="utf-8", errors="surrogateescape")
    return path


@pytest.fixture(scope="session")
def utf16_input(tmp_path_factory) -> Path:
    """Chat rows (ids from 300,000) as JSON Lines the way Windows tools save "Unicode" text: UTF-16
    with a byte-order mark and CRLF endings, with a line that is not JSON."""
    import json

    rows = chat_rows(60, seed=17)
    lines = [json.dumps({**row, "id": 300_000 + i}, ensure_ascii=i % 2 == 0) for i, row in enumerate(rows)]
    lines.insert(5, '{"id": 399999, "messages": [')
    path = tmp_path_factory.mktemp("utf16_input") / "chats-utf16.jsonl"
    path.write_bytes("\ufeff".encode("utf-16-le") + "\r\n".join(lines).encode("utf-16-le", "surrogatepass"))
    return path
