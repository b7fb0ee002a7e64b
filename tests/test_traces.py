"""TraceWriter: whole files under free names only; the rollouts and ScoreFilter both write through it."""

from __future__ import annotations

import json
import os

import pytest

from twinkle_agentic.traces import TraceWriter


def numbered(n: int) -> str:
    return "t.json" if n == 0 else f"t-{n}.json"


def test_writes_json_and_never_overwrites(tmp_path):
    writer = TraceWriter(tmp_path / "new" / "dir", indent=2)
    first = writer.write({"text": "é", "odd": object()}, numbered)
    second = writer.write({"n": 2}, numbered)
    assert (first.name, second.name) == ("t.json", "t-1.json")
    assert json.loads(first.read_text(encoding="utf-8"))["text"] == "é"  # default=str kept the odd value
    assert first.read_text(encoding="utf-8").startswith("{\n  ")  # indent=2
    assert sorted(os.listdir(writer.trace_dir)) == ["t-1.json", "t.json"]  # no temporary file left


def test_a_name_taken_by_another_writer_is_skipped(tmp_path):
    (tmp_path / "t.json").write_text("someone else's")
    path = TraceWriter(tmp_path).write({"n": 1}, numbered)
    assert path.name == "t-1.json" and (tmp_path / "t.json").read_text() == "someone else's"
    assert path.read_text() == '{"n": 1}'  # indent=None: one line


def test_without_hard_links_it_still_writes_exclusively(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError("no hard links here")

    monkeypatch.setattr(os, "link", no_links)
    (tmp_path / "t.json").write_text("taken")
    path = TraceWriter(tmp_path).write([1], numbered)
    assert path.name == "t-1.json" and json.loads(path.read_text()) == [1]
    assert sorted(os.listdir(tmp_path)) == ["t-1.json", "t.json"]


def test_an_unwritable_record_raises_and_leaves_nothing(tmp_path):
    class Loop(dict):
        pass

    record = Loop()
    record["self"] = record  # circular: json refuses it
    with pytest.raises(ValueError, match="Circular"):
        TraceWriter(tmp_path).write(record, numbered)
    assert os.listdir(tmp_path) == []
