"""Fixtures of the preprocess job tests: generated inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from job_data import chat_rows, write_jsonl_files


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
