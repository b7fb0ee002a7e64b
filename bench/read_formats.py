#!/usr/bin/env python
"""Reading the same rows from each JSON text layout the preprocess job accepts, side by side in one run.

    python bench/read_formats.py --rows 50000 --rounds 3 --long-line-mib 64

Generates chat rows (scripts/make_sample_data.py, bad lines left out so that every layout holds the
same rows), writes them as JSON Lines and as one pretty-printed JSON array in a ``.json`` file, each
plain and gzipped, and as JSON Lines in UTF-16 with a byte-order mark (as Windows tools save text),
then reads each with ``read_source`` + ``parse_read`` (what a read task and the first stage do before
any step runs), alternating layouts within each round. Prints CPU microseconds per record (median
over rounds) and the ratio to JSON Lines. ``--long-line-mib N`` also reads a file whose second row
is N MiB long, as JSON Lines and as a JSON array, and prints CPU seconds and MiB/s. Appends a JSON
record to ``--record`` when given.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.records import emit_record, git_sha  # noqa: E402


def write_layouts(rows: list[dict], folder: Path) -> dict[str, Path]:
    lines = ("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n").encode("utf-8")
    array = json.dumps(rows, ensure_ascii=False, indent=2).encode("utf-8")
    paths = {}
    for name, file, data in [("jsonl", "rows.jsonl", lines), ("json array", "rows.json", array)]:
        paths[name] = folder / file
        paths[name].write_bytes(data)
        paths[name + " .gz"] = folder / (file + ".gz")
        paths[name + " .gz"].write_bytes(gzip.compress(data, compresslevel=6))
    paths["jsonl utf-16"] = folder / "rows-utf16.jsonl"
    paths["jsonl utf-16"].write_bytes(lines.decode("utf-8").encode("utf-16"))  # with its byte-order mark
    return paths


def write_long_row(mib: int, folder: Path) -> dict[str, Path]:
    """A JSON Lines file and a JSON array file of three rows, the second ``mib`` MiB long."""
    rows = [{"id": 1}, {"id": 2, "messages": [{"role": "tool", "content": "x" * (mib << 20)}]}, {"id": 3}]
    texts = [json.dumps(row) for row in rows]
    jsonl, array = folder / "long.jsonl", folder / "long.json"
    jsonl.write_text("\n".join(texts) + "\n")
    array.write_text("[" + ",\n".join(texts) + "]\n")
    return {f"jsonl, {mib} MiB line": jsonl, f"json array, {mib} MiB element": array}


def read_cpu_s(path: Path) -> tuple[float, int]:
    """CPU seconds to read and parse every record of ``path``, and how many rows came out."""
    from twinkle_agentic.io import expand_inputs, parse_read, read_source

    (source,) = expand_inputs([str(path)])
    start = time.process_time()
    rows = sum(parse_read(raw, error)[0] is not None for _, raw, error in read_source(source))
    return time.process_time() - start, rows


def cpu_by_layout(paths: dict[str, Path], rows: int, rounds: int) -> dict[str, list[float]]:
    """CPU seconds to read each layout, once per round, alternating layouts within each round."""
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, path in paths.items():
            seconds, read = read_cpu_s(path)
            if read != rows:
                raise SystemExit(f"{name}: read {read} rows, wrote {rows}")
            cpu[name].append(seconds)
    return cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--long-line-mib", type=int, default=0, help="also read a file with one row this long"
    )
    parser.add_argument("--record", help="append the JSON record to this file")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_sample_data import generate_rows

    rows = [row for row in generate_rows(args.rows, args.seed)[0] if isinstance(row, dict)]
    with tempfile.TemporaryDirectory(prefix="twinkle-read-formats-") as tmp:
        paths = write_layouts(rows, Path(tmp))
        cpu = cpu_by_layout(paths, len(rows), args.rounds)
        sizes = {name: path.stat().st_size for name, path in paths.items()}
        long_rows = write_long_row(args.long_line_mib, Path(tmp)) if args.long_line_mib else {}
        long_cpu = cpu_by_layout(long_rows, 3, args.rounds)
    per_record = {name: statistics.median(values) / len(rows) * 1e6 for name, values in cpu.items()}
    print(f"{len(rows):,} rows, {args.rounds} rounds; CPU us per record (median), ratio to JSON Lines")
    print(f"{'layout':<16} {'MB':>7} {'us/record':>10} {'ratio':>6}")
    for name, us in per_record.items():
        print(f"{name:<16} {sizes[name] / 1e6:>7.1f} {us:>10.1f} {us / per_record['jsonl']:>6.2f}")
    long_results = [
        {"layout": name, "cpu_s": values, "mib_per_s": args.long_line_mib / statistics.median(values)}
        for name, values in long_cpu.items()
    ]
    for result in long_results:
        print(
            f"{result['layout']}: {statistics.median(result['cpu_s']):.2f} CPU s, {result['mib_per_s']:.0f} MiB/s"
        )
    emit_record(
        {
            "bench": "read_formats",
            "params": {
                "rows": len(rows),
                "rounds": args.rounds,
                "seed": args.seed,
                "long_line_mib": args.long_line_mib,
            },
            "git_sha": git_sha(),
            "results": [
                {"layout": name, "bytes": sizes[name], "cpu_s": cpu[name], "us_per_record": per_record[name]}
                for name in paths
            ]
            + long_results,
        },
        args.record,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
