"""The preprocess bench's ``--timeline`` summary of ``ray.timeline()`` events (pure logic)."""

from __future__ import annotations

from bench.preprocess_job import timeline_summary

START = 1_000.0  # epoch seconds of the run's start


def task(name: str, worker: str, begin: float, seconds: float) -> dict:
    return {
        "ph": "X",
        "cat": f"task::{name}",
        "tid": worker,
        "ts": (START + begin) * 1e6,
        "dur": seconds * 1e6,
    }


def test_tasks_are_summed_per_kind_in_order_of_first_start():
    events = [
        task("ReadRecords", "w1", 0.5, 4.0),
        task("ReadRecords", "w2", 2.0, 3.0),
        task("_AutoscalingCoordinatorActor.get_reserved_resources", "a1", 0.1, 0.01),
        task("map", "w1", 5.1, 0.2),
        {"ph": "X", "cat": "task:execute", "tid": "w1", "ts": (START + 0.6) * 1e6, "dur": 1e6},  # a sub-event
        {"ph": "i", "cat": "task::ReadRecords", "tid": "w1", "ts": START * 1e6},  # not a complete event
        task("ReadRecords", "w3", -5.0, 1.0),  # ended before the run started
    ]
    lines = timeline_summary(events, START, START + 6.0)
    rows = [line.split() for line in lines[1:4]]
    assert [r[0] for r in rows] == [
        "_AutoscalingCoordinatorActor.get_reserved_resources",
        "ReadRecords",
        "map",
    ]
    assert rows[1][1:] == ["2", "0.50", "5.00", "7.00"]
    assert rows[2][1:] == ["1", "5.10", "5.30", "0.20"]


def test_idle_gaps_of_data_workers_only():
    events = [
        task("ReadRecords", "w1", 0.5, 4.0),
        task("map", "w1", 4.6, 0.2),  # 0.1 s after the read: not a gap
        task("ReadRecords", "w2", 2.0, 3.0),
        task("_StatsActor.register_dataset", "a1", 0.0, 0.1),  # an actor call: not a data worker
    ]
    lines = timeline_summary(events, START, START + 6.0)
    workers = [line for line in lines if line.startswith("data worker")]
    assert workers == [
        "data worker 1: busy 4.20 s; idle > 0.25 s: 0.00-0.50, 4.80-6.00",
        "data worker 2: busy 3.00 s; idle > 0.25 s: 0.00-2.00, 5.00-6.00",
    ]
