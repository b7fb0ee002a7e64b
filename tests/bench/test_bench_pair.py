"""The preprocess bench's ``--pair`` ceiling: two one-process references at once, and its median."""

from __future__ import annotations

import argparse

import pytest

from bench.preprocess_job import marginal_cpu, measure_pair, median_efficiencies
from tests.support.paths import REPO_ROOT

SAMPLE = REPO_ROOT / "data" / "sample" / "chats.jsonl"


def test_two_references_run_at_once_and_their_efficiency_is_against_the_one_alone(tmp_path):
    args = argparse.Namespace(work=tmp_path, config=None)
    base_rate = 1_000.0  # rows/s of a run alone, as measure_size passes it
    record = measure_pair(args, SAMPLE, 400, 1, base_rate)

    assert record["run"] == "one-process x2 at once" and record["cpus"] == 2
    with SAMPLE.open(encoding="utf-8") as lines:
        assert record["rows"] == sum(1 for _ in lines)  # every line read, the bad ones included
    first, second = record["pair_seconds"]
    assert record["seconds"] == pytest.approx((first + second) / 2)
    assert record["rows_per_s"] == pytest.approx(2 * record["rows"] / record["seconds"])
    assert record["efficiency"] == pytest.approx(record["rows_per_s"] / (2 * base_rate))
    for side in "ab":  # each child wrote its own outputs
        assert (tmp_path / f"out-pair-400-{side}" / "kept.jsonl").stat().st_size > 0


def test_pair_medians_are_reported_per_corpus_size_over_rounds():
    results = [{"run": "one-process x2 at once", "rows": 1_000, "efficiency": e} for e in (0.8, 0.9, 0.7)] + [
        {"run": "one-process x2 at once", "rows": 5_000, "efficiency": 0.95}
    ]  # one round: no median
    lines = median_efficiencies(results)
    assert lines == [
        "# 1,000 rows, two one-process runs at once, 3 rounds: efficiency median 80% (range 70%-90%)"
    ]


def test_the_pairs_marginal_cpu_is_per_row_processed():
    results = [
        {"run": "one-process", "cpus": 1, "rows": 1_000, "cpu_s": 1.0},
        {"run": "one-process", "cpus": 1, "rows": 2_000, "cpu_s": 2.0},
        {"run": "one-process x2 at once", "cpus": 2, "rows": 1_000, "cpu_s": 2.5, "copies": 2},
        {"run": "one-process x2 at once", "cpus": 2, "rows": 2_000, "cpu_s": 5.0, "copies": 2},
    ]
    values = marginal_cpu(results)["values"]
    assert values["one-process 1 CPU"] == pytest.approx(1e-3)
    assert values["one-process x2 at once 2 CPU"] == pytest.approx(1.25e-3)  # 25 % more CPU per row at once
