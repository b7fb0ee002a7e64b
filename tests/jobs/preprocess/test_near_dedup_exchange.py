"""The near-dedup exchange's steps without Ray: routed by hand over any number of partitions they
keep and drop exactly the rows NearDedupFilter does in one process, with the same ledger."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest
from twinkle_agentic.jobs.preprocess.frame import DROPPED, LIVE, PART_SPACE, STATS, FrameBuilder, frame_schema
from twinkle_agentic.jobs.preprocess.near_exchange import (
    BAND,
    CANDIDATE,
    COPY,
    NPART,
    NearAttach,
    NearBands,
    NearMark,
    near_candidates,
    near_schema,
)
from twinkle_agentic.jobs.preprocess.steps import plan_stages

from bench.near_copies import VARIANTS, near_copy
from tests.support.job_data import chat_rows
from twinkle_agentic.preprocessor import DedupFilter, HardFilter, NearDedupFilter
from twinkle_agentic.preprocessor.near_dedup import DUPLICATE_OF_KEY, ORIGIN_KEY

URIS = ["file:///a.jsonl", "file:///b.jsonl"]


def rows_with_near_copies(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = chat_rows(n, seed=seed)
    for row in list(rows[: n // 3]):
        # a tenth are exact copies once normalised (surface variants only)
        share = 0.0 if rng.random() < 0.1 else rng.uniform(0.01, 0.1)
        copy = near_copy(row, share, rng.choice(VARIANTS), rng)
        rows.insert(rng.randrange(len(rows) + 1), copy)
    for i, row in enumerate(rows):
        row["id"] = i
    return rows


def frames(rows: list[dict]) -> list[pa.Table]:
    """Two input blocks of live rows (from two sources), a dropped row and a statistics record."""
    blocks = []
    for src, part in enumerate((rows[: len(rows) // 2], rows[len(rows) // 2 :])):
        out = FrameBuilder()
        out.add(src, 10**6, DROPPED, "HardFilter", "too_short", json.dumps({"id": -1}))
        for line, row in enumerate(part, start=1):
            out.add(src, line, LIVE, None, None, json.dumps(row))
        out.add_stats([])
        blocks.append(out.build())
    return blocks


def route(tables: list[pa.Table], partitions: int) -> list[pa.Table]:
    """What the job's sort on ``_npart`` with equal cut points does."""
    table = pa.concat_tables(tables)
    bucket = table.column(NPART).to_numpy() * partitions // PART_SPACE
    return [table.filter(pa.array(bucket == p)) for p in range(partitions)]


def run_exchange(rows: list[dict], step: NearDedupFilter, partitions: int) -> tuple[dict, list[dict], dict]:
    banded = [NearBands(step)(block) for block in frames(rows)]
    assert all(t.schema == near_schema() for t in banded)
    assert any(pc_count(t, BAND) for t in banded)
    candidates = [near_candidates(t) for t in route(banded, partitions)]
    assert not any(pc_count(t, BAND) for t in candidates)
    assert any(pc_count(t, COPY) for t in candidates) and any(pc_count(t, CANDIDATE) for t in candidates)
    attached = [NearAttach(step)(t) for t in route(candidates, partitions)]
    assert all(t.schema == near_schema() for t in attached)
    marked = [NearMark(step, "NearDedupFilter", 3, URIS)(t) for t in route(attached, partitions)]
    out = pa.concat_tables(marked)
    assert out.schema == frame_schema()
    kinds = out.column("_kind").to_pylist()
    texts = out.column("row").to_pylist()
    reasons = out.column("_reason").to_pylist()
    kept = {json.loads(t)["id"]: json.loads(t) for k, t in zip(kinds, texts, strict=True) if k == LIVE}
    dropped = [
        json.loads(t)
        for k, t, r in zip(kinds, texts, reasons, strict=True)
        if k == DROPPED and r == "near_duplicate"
    ]
    stats = [json.loads(t) for k, t in zip(kinds, texts, strict=True) if k == STATS]
    totals = {"before": 0, "after": 0, "dropped": 0}
    for records in stats:
        for record in records:
            if record["position"] == 3:
                for key in totals:
                    totals[key] += record[key]
    return kept, dropped, totals


def pc_count(table: pa.Table, kind: int) -> int:
    return int(np.count_nonzero(table.column("_kind").to_numpy() == kind))


def origin(rows: list[dict]) -> list[dict]:
    """The rows as run_pipeline hands them over: with [source, line] as the frames say."""
    half = len(rows) // 2
    return [
        {**row, ORIGIN_KEY: [URIS[0], i + 1] if i < half else [URIS[1], i - half + 1]} for i, row in enumerate(rows)
    ]


@pytest.mark.parametrize("partitions", [1, 3, 8])
@pytest.mark.parametrize("settings", [{}, {"turns": "user", "threshold": 0.7}, {"shingle_words": 2, "max_turns": 2}])
def test_exchange_matches_one_process(partitions, settings):
    rows = rows_with_near_copies(240, seed=partitions)
    step = NearDedupFilter(**settings)
    kept, dropped, totals = run_exchange(rows, step, partitions)
    ref_kept, ref_dropped = step(origin(rows))
    assert sorted(kept) == sorted(r["id"] for r in ref_kept)
    strip = lambda row: {k: v for k, v in row.items() if k not in (ORIGIN_KEY, "drop_reason")}  # noqa: E731
    assert sorted(json.dumps(r, sort_keys=True) for r in dropped) == sorted(
        json.dumps(strip(r), sort_keys=True) for r in ref_dropped
    )
    assert dropped, "the near-copies must be found"
    assert totals == {"before": len(rows), "after": len(kept), "dropped": len(dropped)}
    for row in dropped:
        parent = row[DUPLICATE_OF_KEY]
        assert set(parent) == {"source", "line"} and parent["source"] in URIS


def test_plan_puts_the_exchange_where_the_step_is():
    stages = plan_stages([HardFilter(), NearDedupFilter(), DedupFilter(), HardFilter()])
    assert [s.kind for s in stages] == ["map", "near", "map", "dedup", "map"]
    assert stages[2].dedup_next is not None and stages[0].dedup_next is None
    first = plan_stages([NearDedupFilter(), HardFilter()])
    assert [s.kind for s in first] == ["map", "near", "map"] and first[0].parse
    assert "near-dedup exchange" in first[1].describe(["NearDedupFilter", "HardFilter"])
