"""bench/read_formats.py runs end to end on a small corpus and records every layout it compares."""

from __future__ import annotations

import json

from bench import read_formats


def test_every_layout_reads_every_row_and_is_recorded(tmp_path, capsys):
    record = tmp_path / "r.jsonl"
    assert read_formats.main(["--rows", "300", "--rounds", "1", "--record", str(record)]) == 0
    (entry,) = [json.loads(line) for line in record.read_text().splitlines()]
    layouts = [r["layout"] for r in entry["results"]]
    assert layouts == ["jsonl", "jsonl .gz", "json array", "json array .gz"]
    assert all(r["us_per_record"] > 0 and len(r["cpu_s"]) == 1 for r in entry["results"])
    table = capsys.readouterr().out
    assert "json array .gz" in table and "ratio" in table
