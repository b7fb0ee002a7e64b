"""Lineage: kept rows as {"source", "line", "row"} with ``--lineage``, the same in the one-process
pipeline, and each input's size and SHA-256 in stats.json."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest
from twinkle_agentic.jobs.preprocess import main
from twinkle_agentic.jobs.preprocess.frame import LIVE, FrameBuilder
from twinkle_agentic.jobs.preprocess.sink import kept_lines

from tests.support.job_data import canonical
from tests.support.paths import REPO_ROOT
from twinkle_agentic.io import expand_inputs, file_digest
from twinkle_agentic.preprocessor import run_pipeline

SAMPLE = REPO_ROOT / "data" / "sample" / "chats.jsonl"


def expected_digest(path: Path) -> dict:
    data = path.read_bytes()
    return {"uri": str(path), "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_kept_lines_wrap_each_row_with_its_source_and_line_without_touching_it():
    frame = FrameBuilder()
    frame.add(1, 7, LIVE, None, None, '{"source": "mine", "line": 3, "messages": []}')
    frame.add(0, 2, LIVE, None, None, "{}")
    literals = pa.array([json.dumps(u).encode() for u in ["a.jsonl", 's3://b/"x".jsonl']], pa.large_binary())
    table = frame.build()
    lines = kept_lines(table, literals, lineage=True).to_pylist()
    assert [json.loads(line) for line in lines] == [
        {"source": 's3://b/"x".jsonl', "line": 7, "row": {"source": "mine", "line": 3, "messages": []}},
        {"source": "a.jsonl", "line": 2, "row": {}},
    ]
    assert kept_lines(table, literals, lineage=False).to_pylist() == [
        b'{"source": "mine", "line": 3, "messages": []}\n',
        b"{}\n",
    ]


def test_file_digest_is_hashlib_over_the_bytes_as_stored(chat_inputs):
    for path in sorted(chat_inputs.iterdir()):  # one of them gzipped: hashed compressed
        assert file_digest(str(path)) == expected_digest(path)


def test_run_pipeline_lineage_points_each_kept_row_at_its_input_line():
    plain = run_pipeline([str(SAMPLE)])
    traced = run_pipeline([str(SAMPLE)], lineage=True)
    assert [r["row"] for r in traced.kept] == plain.kept
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    for record in traced.kept:
        assert record["source"] == str(SAMPLE)
        assert json.loads(lines[record["line"] - 1])["id"] == record["row"]["id"]


@pytest.mark.integration
def test_job_with_lineage_equals_run_pipeline_and_records_input_checksums(ray_local, chat_inputs, tmp_path):
    inputs = [str(chat_inputs), str(SAMPLE)]
    out = tmp_path / "out"
    assert main(["--input", *inputs, "--output", str(out), "--lineage", "--no-progress"]) == 0
    kept = [
        json.loads(line)
        for p in sorted((out / "kept").glob("*.jsonl"))
        for line in p.read_text().splitlines()
    ]
    reference = run_pipeline(inputs, lineage=True)
    assert sorted(canonical(r) for r in kept) == sorted(canonical(r) for r in reference.kept)
    assert {(r["source"], r["line"]) for r in kept} == {(r["source"], r["line"]) for r in reference.kept}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["inputs"] == [expected_digest(Path(s.uri)) for s in expand_inputs(inputs)]
