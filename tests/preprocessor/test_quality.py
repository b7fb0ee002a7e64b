"""QualityPreprocessor: shapes in = shapes out, statistics, contract errors and the dropped log."""

from __future__ import annotations

import copy
import json
import logging
import multiprocessing
import os
import pickle

import numpy as np
import pandas as pd
import pytest

from tests.support.preprocessor_rows import LONG_A, LONG_Q, assistant, user
from twinkle_agentic.preprocessor import (
    HardFilter,
    MessageNormalizer,
    QualityPreprocessor,
    StepStats,
    merge_log_shards,
)
from twinkle_agentic.preprocessor.dropped_log import DroppedLog

GOOD = {"id": 1, "messages": [user(LONG_Q), assistant(LONG_A)]}
TRIVIAL = {"id": 2, "messages": [user("hi"), assistant(LONG_A)]}
NO_USER = {"id": 3, "messages": [assistant(LONG_A)], "extra": "x"}


def columns(rows):
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k) for r in rows] for k in keys}


def test_list_in_list_out_and_stats(caplog):
    qp = QualityPreprocessor([HardFilter(), MessageNormalizer()])
    with caplog.at_level(logging.INFO, logger="twinkle_agentic.preprocessor.quality"):
        out = qp([GOOD, TRIVIAL, NO_USER])
    assert [r["id"] for r in out] == [1]
    hard, norm = qp.last_stats
    assert isinstance(hard, StepStats)
    assert (hard.step, hard.before, hard.after, hard.dropped) == ("HardFilter", 3, 1, 2)
    assert hard.reasons == {"trivial_single_turn": 1, "no_user": 1}
    assert (norm.before, norm.after, norm.dropped) == (1, 1, 0)
    assert hard.seconds >= 0
    assert "[QualityPreprocessor] 3 -> 1" in caplog.text
    assert "HardFilter: 3 -> 1" in caplog.text


def test_column_dict_keeps_input_keys_then_new_ones():
    batch = {"id": [1, 2], "messages": [GOOD["messages"], TRIVIAL["messages"]]}
    out = QualityPreprocessor([HardFilter(), lambda rows: ([{**r, "tag": 1} for r in rows], [])])(batch)
    assert list(out) == ["id", "messages", "tag"]
    assert out["id"] == [1]


def test_all_dropped_column_dict_keeps_keys_no_ghost_rows():
    """SPEC Decision: upstream returns {} and HF map then keeps the original batch."""
    batch = {"id": [2, 3], "messages": [TRIVIAL["messages"], NO_USER["messages"]], "extra": [None, "x"]}
    assert QualityPreprocessor([HardFilter()])(batch) == {"id": [], "messages": [], "extra": []}


def test_numpy_columns_and_dataframe():
    batch = {"id": np.array([1, 2]), "messages": np.array([GOOD["messages"], TRIVIAL["messages"]], dtype=object)}
    out = QualityPreprocessor([HardFilter()])(batch)
    assert out["id"] == [1]
    df = pd.DataFrame([GOOD, TRIVIAL])
    out_df = QualityPreprocessor([HardFilter()])(df)
    assert isinstance(out_df, pd.DataFrame)
    assert list(out_df["id"]) == [1] and list(out_df.columns) == ["id", "messages"]
    empty = QualityPreprocessor([HardFilter()])(pd.DataFrame([TRIVIAL]))
    assert len(empty) == 0 and list(empty.columns) == ["id", "messages"]


def test_hf_datasets_map_keeps_exactly_the_survivors():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list([{"id": i, "text": t} for i, t in enumerate(["keep", "drop", "drop", "drop"])])

    def only_keep(rows):
        return [r for r in rows if r["text"] == "keep"], [{**r, "drop_reason": "x"} for r in rows if r["text"] != "keep"]

    for batch_size in (2, 4):
        out = ds.map(QualityPreprocessor([only_keep]), batched=True, batch_size=batch_size)
        assert out["id"] == [0], batch_size


def test_input_not_mutated_and_early_stop():
    rows = [copy.deepcopy(TRIVIAL)]
    before = copy.deepcopy(rows)
    calls = []
    qp = QualityPreprocessor([HardFilter(), lambda r: calls.append(r) or (r, [])])
    assert qp(rows) == []
    assert rows == before
    assert calls == []  # no rows left: later steps are not run
    assert [s.before for s in qp.last_stats] == [1, 0]


def test_step_naming():
    def my_step(rows):
        return rows, []

    class Named:
        name = "custom"

        def __call__(self, rows):
            return rows, []

    class Anonymous:
        def __call__(self, rows):
            return rows, []

    qp = QualityPreprocessor([my_step, Named(), Anonymous()])
    assert qp.names == ["my_step", "custom", "Anonymous"]


def test_contract_errors_name_the_step():
    with pytest.raises(TypeError, match="bad_step"):

        def bad_step(rows):
            return rows

        QualityPreprocessor([bad_step])([GOOD])
    with pytest.raises(TypeError, match="loses_rows"):

        def loses_rows(rows):
            return [], []

        QualityPreprocessor([loses_rows])([GOOD])
    with pytest.raises(TypeError, match="not callable"):
        QualityPreprocessor([HardFilter(), 3])


def test_column_dict_kept_from_a_step_is_converted():
    qp = QualityPreprocessor([lambda rows: ({"id": [r["id"] for r in rows]}, [])])
    assert qp([{"id": 1}, {"id": 2}]) == [{"id": 1}, {"id": 2}]


def test_total_stats_add_up():
    qp = QualityPreprocessor([HardFilter()])
    qp([GOOD, TRIVIAL])
    qp([NO_USER])
    (total,) = qp.total_stats
    assert (total.before, total.after, total.dropped) == (3, 1, 2)
    assert StepStats.from_dict(total.to_dict()).to_dict() == total.to_dict()


def read_log(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_dropped_log_lines(tmp_path):
    path = tmp_path / "sub" / "dropped.jsonl"
    qp = QualityPreprocessor([HardFilter()], dropped_log_path=path)
    qp([GOOD, TRIVIAL, {**NO_USER, "when": np.datetime64("2024-01-01")}])
    lines = read_log(path)
    assert [(x["step"], x["reason"], x["row"]["id"]) for x in lines] == [("HardFilter", "trivial_single_turn", 2), ("HardFilter", "no_user", 3)]
    assert "drop_reason" not in lines[0]["row"]
    assert lines[1]["row"]["when"] == "2024-01-01"  # default=str
    # the job's ledger record; the origin of rows handed in as a batch is unknown here
    assert all(list(x) == ["step", "reason", "source", "line", "row"] for x in lines)
    assert all(x["source"] is None and x["line"] is None for x in lines)


def test_log_is_never_deleted_implicitly(tmp_path):
    path = tmp_path / "dropped.jsonl"
    QualityPreprocessor([HardFilter()], dropped_log_path=path)([TRIVIAL])
    QualityPreprocessor([HardFilter()], dropped_log_path=path)([TRIVIAL])
    assert len(read_log(path)) == 2
    QualityPreprocessor([HardFilter()], dropped_log_path=path, overwrite_log=True)
    assert read_log(path) == []


def test_preprocessor_pickles(tmp_path):
    qp = QualityPreprocessor([HardFilter()], dropped_log_path=tmp_path / "d.jsonl")
    clone = pickle.loads(pickle.dumps(qp))
    clone([TRIVIAL])
    assert len(read_log(tmp_path / "d.jsonl")) == 1


def _writer(path: str, worker: int, batches: int, shard: bool) -> None:
    log = DroppedLog(path, shard=shard)
    for b in range(batches):
        rows = [{"worker": worker, "batch": b, "i": i, "pad": "x" * (1000 + 37 * i), "drop_reason": "r"} for i in range(20)]
        log.write([("step", rows)])


@pytest.mark.parametrize("shard", [False, True])
def test_many_processes_never_interleave_or_lose_lines(tmp_path, shard):
    path = str(tmp_path / "dropped.jsonl")
    workers, batches = 4, 25
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, batches, shard)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    if shard:
        assert not os.path.exists(path)
        assert merge_log_shards(path) == workers * batches * 20
        assert merge_log_shards(path) == 0  # shards removed: a second merge adds nothing
    lines = read_log(path)  # json.loads fails on any interleaved line
    assert len(lines) == workers * batches * 20
    seen = {(x["row"]["worker"], x["row"]["batch"], x["row"]["i"]) for x in lines}
    assert len(seen) == len(lines)
    # each call's lines stay contiguous: one write() per call
    for k in range(0, len(lines), 20):
        block = {(x["row"]["worker"], x["row"]["batch"]) for x in lines[k : k + 20]}
        assert len(block) == 1


def test_threads_share_one_log(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "dropped.jsonl"
    qp = QualityPreprocessor([HardFilter()], dropped_log_path=path)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: qp([TRIVIAL] * 50), range(20)))
    assert len(read_log(path)) == 1000
