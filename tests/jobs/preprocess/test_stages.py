"""Stage functions and the stage plan, on Arrow tables without Ray."""

from __future__ import annotations

import bisect
import json
import os
import random

import pyarrow as pa
import pytest
from twinkle_agentic.jobs.preprocess.frame import (
    DKEY,
    DPART,
    DROPPED,
    KIND,
    LIVE,
    PART_SPACE,
    STATS,
    id_partition,
    key_partition,
    read_schema,
)
from twinkle_agentic.jobs.preprocess.job import partition_bounds
from twinkle_agentic.jobs.preprocess.stages import (
    StageAdapter,
    StageError,
    StepFailedError,
    StepStartError,
    mark_duplicates,
)
from twinkle_agentic.jobs.preprocess.steps import ConfigError, StepSpec, parse_steps, plan_stages

from tests.support.job_data import chat_rows, cut_emoji_row
from tests.support.job_steps import FailsToLoad, LosesKeys, ModelStep, ShoutMapper
from twinkle_agentic.preprocessor import DedupFilter, HardFilter
from twinkle_agentic.preprocessor.quality import StepContractError


def raw_table(lines: list[bytes], src: int = 0, errors: list[str | None] | None = None) -> pa.Table:
    errors = errors or [None] * len(lines)
    return pa.table([[src] * len(lines), list(range(1, len(lines) + 1)), lines, errors], schema=read_schema())


def frames(table: pa.Table, kind: int) -> list[dict]:
    return [r for r in table.to_pylist() if r[KIND] == kind]


def stats_of(table: pa.Table) -> list[dict]:
    return [rec for r in frames(table, STATS) for rec in json.loads(r["row"])]


def test_parse_stage_runs_steps_and_accounts_for_every_record():
    lines = [
        json.dumps(
            {
                "id": 1,
                "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}],
            }
        ).encode(),
        b"{broken",
        json.dumps(
            {"id": 2, "messages": [{"role": "user", "content": "请解释快速排序的最坏情况复杂度"}]},
            ensure_ascii=True,
        ).encode(),
        b"[1]",
        b"",  # stands for the unreadable rest of a broken file (read_source in drop mode)
    ]
    adapter = StageAdapter([HardFilter(), ShoutMapper()], [0, 1], ["HardFilter", "ShoutMapper"], parse=True)
    why = "unreadable from record 5 on: OSError: Truncated compressed stream"
    out = adapter(raw_table(lines, src=3, errors=[None] * 4 + [why]))
    live = frames(out, LIVE)
    assert [(r["_src"], r["_line"]) for r in live] == [(3, 3)]
    # rows are re-serialised with unescaped unicode and without the internal row id
    assert "请解释" in live[0]["row"] and "__twinkle_row_id__" not in live[0]["row"]
    dropped = {(r["_line"], r["_step"], r["_reason"]) for r in frames(out, DROPPED)}
    assert dropped == {
        (2, "read", "malformed_json"),
        (4, "read", "invalid_row"),
        (5, "read", "unreadable_file"),
        (1, "HardFilter", "trivial_single_turn"),
    }
    assert json.loads(next(r["row"] for r in frames(out, DROPPED) if r["_line"] == 2)) == "{broken"
    assert json.loads(next(r["row"] for r in frames(out, DROPPED) if r["_line"] == 5)) == why
    # drops first, then live rows, then the statistics record: read tasks split the drops off by slicing
    assert out.column(KIND).to_pylist() == [DROPPED] * 4 + [LIVE] + [STATS]
    records = {r["step"]: r for r in stats_of(out)}
    assert records["read"]["before"] == 5 and records["read"]["after"] == 2
    assert records["HardFilter"]["before"] == 2 and records["HardFilter"]["dropped"] == 1
    assert records["ShoutMapper"]["before"] == records["ShoutMapper"]["after"] == 1


def test_rows_with_lone_surrogates_are_kept_exactly():
    row = cut_emoji_row(5)
    out = StageAdapter([HardFilter()], [0], ["HardFilter"], parse=True)(raw_table([json.dumps(row).encode()]))
    (live,) = frames(out, LIVE)
    assert json.loads(live["row"]) == row
    live["row"].encode("utf-8")  # the text the sink writes is valid UTF-8


def test_later_stage_passes_dropped_rows_through_and_adds_dedup_keys():
    first = StageAdapter([], [], [], parse=True)(raw_table([b'{"messages": []}', b"nope"]))
    second = StageAdapter([ShoutMapper()], [0], ["ShoutMapper"], dedup=DedupFilter())(first)
    assert DKEY in second.column_names
    assert len(frames(second, DROPPED)) == 1 and len(frames(second, STATS)) == 2
    (live,) = frames(second, LIVE)
    assert live[DKEY].startswith("f:") and live["_dlen"] == 0
    assert live[DPART] == key_partition(live[DKEY])
    (dropped,) = frames(second, DROPPED)
    assert dropped[DKEY] is None and dropped[DPART] == id_partition(dropped["_src"], dropped["_line"])
    assert all(0 <= r[DPART] < PART_SPACE for r in second.to_pylist())


def test_step_contract_violations_name_the_step():
    import pickle

    table = raw_table([b'{"id": 1, "messages": []}'])
    with pytest.raises(StepContractError, match="LosesKeys") as broke:
        StageAdapter([LosesKeys()], [0], ["LosesKeys"], parse=True)(table)
    assert str(pickle.loads(pickle.dumps(broke.value))) == str(broke.value)  # as Ray ships it

    def not_a_tuple(rows):
        return rows

    with pytest.raises(StepContractError, match="not_a_tuple"):
        StageAdapter([not_a_tuple], [0], ["not_a_tuple"], parse=True)(table)


def test_a_step_that_raises_is_named_with_the_input_lines_of_its_batch():
    import pickle

    row = {"messages": [{"role": "user", "content": "hello there"}]}
    lines = [b"{broken"] + [json.dumps({"id": i, **row}).encode() for i in range(2, 6)]

    def explodes(rows):
        raise KeyError("tool_calls")

    names = ["ShoutMapper", "explodes"]
    adapter = StageAdapter([ShoutMapper(), explodes], [0, 1], names, parse=True, uris=["a", "b"])
    with pytest.raises(StepFailedError) as failed:
        adapter(raw_table(lines, src=1))
    message = str(failed.value)
    assert message == (
        "step 'explodes' raised KeyError: 'tool_calls' on a batch of 4 rows, from b line 2 to b line 5"
    )
    assert isinstance(failed.value.__cause__, KeyError)  # the step's own traceback comes with it
    assert str(pickle.loads(pickle.dumps(failed.value))) == message  # as Ray ships it to the driver

    def strips_and_explodes(rows):
        rows.clear()
        raise KeyError("tool_calls")

    with pytest.raises(StepFailedError, match="on a batch of 4 rows, from unknown lines to unknown lines"):
        StageAdapter([strips_and_explodes], [0], ["strips"], parse=True)(raw_table(lines))


def test_warmup_loads_models_of_the_stage(tmp_path):
    step = ModelStep(str(tmp_path))
    adapter = StageAdapter([step], [0], ["ModelStep"], parse=True)
    adapter.warmup()
    assert [p.name for p in tmp_path.iterdir()] == [f"warmup-{os.getpid()}"]
    out = adapter(raw_table([b'{"messages": [{"role": "user", "content": "SQL please"}]}']))
    assert frames(out, DROPPED)[0]["_reason"] == "mentions_sql"
    assert len(list(tmp_path.iterdir())) == 1  # no second, lazy load


def test_errors_of_the_stage_code_itself_are_user_code_errors_that_keep_their_message():
    """Not Ray's own errors (Ray Data asks for a report on Ray's tracker for those), and what went
    wrong reaches the driver (the job has Ray Data raise errors unwrapped)."""
    import pickle

    from ray.exceptions import UserCodeException

    with pytest.raises(StageError) as failed:
        StageAdapter([ShoutMapper()], [0], ["ShoutMapper"])(raw_table([b"{}"]))  # raw records, not frames
    assert isinstance(failed.value, UserCodeException)
    assert str(failed.value).startswith("stage ShoutMapper failed: KeyError:")
    assert str(pickle.loads(pickle.dumps(failed.value))) == str(failed.value)
    with pytest.raises(StageError, match="stage mark_duplicates failed: KeyError"):
        mark_duplicates(raw_table([b"{}"]), step="DedupFilter", position=1)


def test_a_warmup_that_raises_names_the_step():
    import pickle

    adapter = StageAdapter([FailsToLoad()], [0], ["FailsToLoad"], parse=True)
    with pytest.raises(StepStartError) as failed:
        adapter.warmup()
    message = "step 'FailsToLoad' could not start: FileNotFoundError: no model weights at /models/pii-xl"
    assert str(failed.value) == message
    assert isinstance(failed.value.__cause__, FileNotFoundError)
    assert str(pickle.loads(pickle.dumps(failed.value))) == message


@pytest.mark.parametrize("partitions", [1, 2, 5, 13])
@pytest.mark.parametrize("seed", [0, 1])
def test_dedup_winners_match_dedup_filter_for_any_partitioning(partitions, seed):
    rows = chat_rows(300, seed)
    lines = [json.dumps(r).encode() for r in rows]
    keyed = StageAdapter([], [], [], parse=True, dedup=DedupFilter())(raw_table(lines))
    # route rows as the exchange does (by _dpart, cut by partition_bounds), and shuffle rows
    # inside each partition, as the exchange may deliver them in any order
    rng = random.Random(seed)
    bounds = partition_bounds(partitions)
    parts: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    for i, part in enumerate(keyed.column(DPART).to_pylist()):
        parts[bisect.bisect_right(bounds, part)].append(i)
    assert partitions == 1 or sum(1 for p in parts if p) > 1  # the routing spreads rows
    kept_ids, dropped_ids = set(), set()
    for index in parts:
        rng.shuffle(index)
        out = mark_duplicates(keyed.take(pa.array(index, pa.int64())), "DedupFilter", 0)
        kept_ids |= {json.loads(r["row"])["id"] for r in frames(out, LIVE)}
        dropped_ids |= {
            json.loads(r["row"])["id"] for r in frames(out, DROPPED) if r["_reason"] == "duplicate"
        }
    kept, dropped = DedupFilter()(rows)
    assert dropped_ids, "the data must hold duplicates"
    assert kept_ids == {r["id"] for r in kept}
    assert dropped_ids == {r["id"] for r in dropped}


def test_plan_groups_cheap_steps_and_isolates_actor_and_dedup_steps(tmp_path):
    hard, shout, model, dedup = HardFilter(), ShoutMapper(), ModelStep(str(tmp_path)), DedupFilter()
    names = ["DedupFilter", "HardFilter", "ShoutMapper", "ModelStep", "HardFilter#2"]
    stages = plan_stages([dedup, hard, shout, model, hard])
    described = [s.describe(names) for s in stages]
    assert described == [
        "map_batches: parse + dedup keys",
        "dedup shuffle: DedupFilter",
        "map_batches: HardFilter -> ShoutMapper",
        "map_batches (actor pool): ModelStep",
        "map_batches: HardFilter#2",
    ]
    stages = plan_stages([model, dedup])
    assert [s.kind for s in stages] == ["map", "actor", "dedup"]
    assert stages[0].parse and stages[1].dedup_next is dedup


@pytest.mark.parametrize(
    "entries, message",
    [
        ("HardFilter", "must be a list"),
        ([{"HardFilter": {}, "DeadLoopFilter": {}}], "exactly one step name"),
        ([{"HardFilter": [1]}], "must be a mapping"),
        ([{"HardFilter": {}, "actors": 0}], "positive integer"),
        ([42], "expected a step name"),
    ],
)
def test_step_entries_are_validated(entries, message):
    with pytest.raises(ConfigError, match=message):
        parse_steps(entries)


def test_step_entries_parse_names_kwargs_and_options():
    specs = parse_steps(
        ["DedupFilter", {"HardFilter": {"min_user_chars": 5}}, {"tests.support.job_steps:ModelStep": None, "actors": 2}]
    )
    assert specs == [
        StepSpec("DedupFilter"),
        StepSpec("HardFilter", {"min_user_chars": 5}),
        StepSpec("tests.support.job_steps:ModelStep", {}, actors=2),
    ]
    assert specs[2].to_config() == {"tests.support.job_steps:ModelStep": {}, "actors": 2}


def test_stage_pauses_the_garbage_collector_only_for_the_batch():
    import gc

    seen = []

    def step(rows):
        seen.append(gc.isenabled())
        return rows, []

    adapter = StageAdapter([step], [0], ["Probe"], parse=True)
    table = raw_table([json.dumps({"id": 1, "messages": []}).encode()])
    assert gc.isenabled()
    adapter(table)
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        adapter(table)
        assert not gc.isenabled()  # a collector the caller turned off stays off
    finally:
        gc.enable()
