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
    COPY_LINK,
    DECISION,
    FRAME_KINDS,
    LINK,
    NPART,
    PENDING,
    KindFilter,
    NearAttach,
    NearBands,
    NearMark,
    NearVerify,
    near_candidates,
    near_decide,
    near_pass_state,
    near_schema,
)
from twinkle_agentic.jobs.preprocess.steps import plan_stages

from bench.near_copies import VARIANTS, near_copy
from tests.support.job_data import chat_rows
from twinkle_agentic.preprocessor import DedupFilter, HardFilter, NearDedupFilter
from twinkle_agentic.preprocessor.near_dedup import DUPLICATE_OF_KEY, ORIGIN_KEY
from twinkle_agentic.preprocessor.near_dedup_select import jaccard

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


def run_exchange(
    rows: list[dict], step: NearDedupFilter, partitions: int, rounds: list[int] | None = None
) -> tuple[dict, list[dict], dict]:
    """The job's exchange routed by hand; ``rounds`` receives the number of rounds it took."""
    banded = [NearBands(step)(block) for block in frames(rows)]
    assert all(t.schema == near_schema() for t in banded)
    assert any(pc_count(t, BAND) for t in banded)
    candidates = [near_candidates(t) for t in route(banded, partitions)]
    assert not any(pc_count(t, BAND) for t in candidates)
    assert any(pc_count(t, CANDIDATE) for t in candidates)
    if rounds is None:  # the generated rows: exact copies among them too
        assert any(pc_count(t, COPY) for t in candidates)
    attached = [NearAttach(step)(t) for t in route(candidates, partitions)]
    assert all(t.schema == near_schema() for t in attached)
    verified = [NearVerify(step)(t) for t in route(attached, partitions)]
    assert all(t.schema == near_schema() for t in verified)
    graph = [KindFilter((LINK, COPY_LINK, PENDING))(t) for t in verified]
    count = 0
    while sum(pc_count(t, LINK) + pc_count(t, COPY_LINK) for t in graph):
        count += 1
        assert count <= len(rows), "every round decides at least one row"
        graph = [near_pass_state(t) for t in route(graph, partitions)]
        graph = [near_decide(t) for t in route(graph, partitions)]
    if rounds is not None:
        rounds.append(count)
    decided = [KindFilter((DECISION,))(t) for t in graph]
    kept_frames = [KindFilter(FRAME_KINDS)(t) for t in verified]
    marked = [NearMark(step, "NearDedupFilter", 3, URIS)(t) for t in route(kept_frames + decided, partitions)]
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
        {**row, ORIGIN_KEY: [URIS[0], i + 1] if i < half else [URIS[1], i - half + 1]}
        for i, row in enumerate(rows)
    ]


@pytest.mark.parametrize("partitions", [1, 3, 8])
@pytest.mark.parametrize(
    "settings", [{}, {"turns": "user", "threshold": 0.7}, {"shingle_words": 2, "max_turns": 2}]
)
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
    kept_at = {(URIS[0], i + 1) if i < len(rows) // 2 else (URIS[1], i - len(rows) // 2 + 1) for i in kept}
    for row in dropped:
        parent = row[DUPLICATE_OF_KEY]
        assert set(parent) == {"source", "line"} and (parent["source"], parent["line"]) in kept_at


def chain(links: int) -> list[dict]:
    """Rows each a near copy of the next (Jaccard ~0.68 on 3-word shingles) but of none further
    (~0.45 and less), all of one length, so they rank in input order."""
    words = [f"x{i:04d}" for i in range(200 + 38 * links)]
    return [
        {"id": k, "messages": [{"role": "user", "content": " ".join(words[38 * k : 38 * k + 200])}]}
        for k in range(links + 1)
    ]


@pytest.mark.parametrize(
    "links, kept, dropped, rounds", [(2, [0, 2], {1: 0}, 2), (3, [0, 2], {1: 0, 3: 2}, 3)]
)
def test_a_chain_is_decided_against_kept_rows_only_in_both(links, kept, dropped, rounds):
    rows = chain(links)
    step = NearDedupFilter()
    sets = [step.shingles(row) for row in rows]
    assert all(jaccard(a, b) >= step.threshold for a, b in zip(sets, sets[1:], strict=False))
    assert all(jaccard(a, b) < step.threshold for a, b in zip(sets, sets[2:], strict=False))
    ref_kept, ref_dropped = step(rows)
    assert [r["id"] for r in ref_kept] == kept
    assert {r["id"]: r[DUPLICATE_OF_KEY]["index"] for r in ref_dropped} == dropped
    taken: list[int] = []
    job_kept, job_dropped, _ = run_exchange(rows, step, 3, taken)
    assert sorted(job_kept) == kept and taken == [rounds]
    half = len(rows) // 2
    at = {(URIS[0], i + 1) if i < half else (URIS[1], i - half + 1): i for i in range(len(rows))}
    assert {
        r["id"]: at[r[DUPLICATE_OF_KEY]["source"], r[DUPLICATE_OF_KEY]["line"]] for r in job_dropped
    } == dropped


def test_plan_puts_the_exchange_where_the_step_is():
    stages = plan_stages([HardFilter(), NearDedupFilter(), DedupFilter(), HardFilter()])
    assert [s.kind for s in stages] == ["map", "near", "map", "dedup", "map"]
    assert stages[2].dedup_next is not None and stages[0].dedup_next is None
    first = plan_stages([NearDedupFilter(), HardFilter()])
    assert [s.kind for s in first] == ["map", "near", "map"] and first[0].parse
    assert "near-dedup exchange" in first[1].describe(["NearDedupFilter", "HardFilter"])
