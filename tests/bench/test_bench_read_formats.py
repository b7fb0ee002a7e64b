"""bench/read_formats.py runs end to end on a small corpus and records every layout it compares."""

from __future__ import annotations

import json

from bench import read_formats


def test_every_layout_reads_every_row_and_is_recorded(tmp_path, capsys):
    record = tmp_path / "r.jsonl"
    argv = ["--rows", "300", "--rounds", "1", "--long-line-mib", "1", "--record", str(record)]
    assert read_formats.main(argv) == 0
    (entry,) = [json.loads(line) for line in record.read_text().splitlines()]
    layouts = [r["layout"] for r in entry["results"]]
    assert layouts == ["jsonl", "jsonl .gz", "json array", "json array .gz", "jsonl utf-16"] + [
        "jsonl, 1 MiB line",
        "json array, 1 MiB element",
    ]
    assert all(r["us_per_record"] > 0 and len(r["cpu_s"]) == 1 for r in entry["results"][:5])
    assert all(r["mib_per_s"] > 0 for r in entry["results"][5:])
    table = capsys.readouterr().out
    assert "json array .gz" in table and "ratio" in table and "MiB/s" in table
