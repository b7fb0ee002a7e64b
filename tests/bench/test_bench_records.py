"""How every bench script prints and keeps its JSON record (bench/records.py)."""

from __future__ import annotations

import json

from bench.records import emit_record, git_sha


def test_a_record_is_printed_as_one_json_line_and_appended_when_a_path_is_given(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    emit_record({"bench": "x", "git_sha": git_sha(), "results": [1]}, path)
    emit_record({"bench": "y", "results": "ü"}, path)
    emit_record({"bench": "z"}, None)
    assert [json.loads(line)["bench"] for line in capsys.readouterr().out.splitlines()] == ["x", "y", "z"]
    kept = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [r["bench"] for r in kept] == ["x", "y"] and kept[1]["results"] == "ü"
    assert kept[0]["git_sha"] not in ("", "unknown")  # this checkout is a git repository
