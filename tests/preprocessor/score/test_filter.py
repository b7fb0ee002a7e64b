"""ScoreFilter's aggregation, drop reasons, key_rounds rewrite, traces and construction rules.

The model scorers are exercised on real models in test_tiny_model.py and test_pass_n.py; here a
pure-logic scorer (fails rounds containing BAD) isolates the filter's own logic.
"""

import copy
import json
import logging
import os
import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinkle_agentic.data_format import pack_value, user_data_get
from twinkle_agentic.preprocessor import ScoreFilter
from twinkle_agentic.preprocessor.score import (
    SCORE_ALL_ROUNDS_FAILED,
    SCORE_NO_CONTEXT,
    SCORE_ROUND_FAILED,
    ChrMinScorer,
    PassNScorer,
    Scorer,
    ScoreResult,
)


class MarkerScorer(Scorer):
    name = "marker"

    def score_batch(self, contexts):
        return [
            ScoreResult(0.0 if "BAD" in c.answer else 1.0, "BAD" not in c.answer, {"chars": len(c.answer)})
            for c in contexts
        ]


class BrokenScorer(Scorer):
    name = "broken"

    def score_batch(self, contexts):
        raise RuntimeError("boom")


def conv(*answers, user="question"):
    messages = [{"role": "system", "content": "sys"}]
    for a in answers:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": a}]
    return messages  # assistant rounds at 2, 4, 6, ...


def row(rid, *answers, key_rounds=None, **extra):
    user_data = [("source", pack_value("unit"))]
    if key_rounds is not None:
        user_data.append(("key_rounds", pack_value(key_rounds)))
    return {"id": rid, "messages": conv(*answers), "user_data": user_data, **extra}


def run(f, rows):
    before = copy.deepcopy(rows)
    kept, dropped = f(rows)
    assert rows == before, "the filter mutated its input"
    assert len(kept) + len(dropped) == len(rows)
    assert all("drop_reason" not in r for r in kept)
    return kept, dropped


def reasons(dropped):
    return {r["id"]: r["drop_reason"] for r in dropped}


def test_default_filter_needs_no_model():
    f = ScoreFilter()
    assert [s.name for s in f.scorers] == ["char_stats"] and f.backend is None and f.needs_actor is False
    kept, dropped = run(f, [row("good", "Paris is in France."), row("soup", "fine", "?!?!?!?!?!?!")])
    assert [r["id"] for r in kept] == ["good"]
    assert reasons(dropped) == {"soup": SCORE_ROUND_FAILED}


def test_rows_without_key_rounds():
    rows = [row("ok", "good", "fine"), row("one_bad", "good", "BAD")]
    assert reasons(run(ScoreFilter([MarkerScorer()]), rows)[1]) == {"one_bad": SCORE_ROUND_FAILED}
    kept, dropped = run(ScoreFilter([MarkerScorer()], drop_row_on_any_fail=False), rows)
    assert dropped == [] and kept == rows


def test_key_rounds_rewritten_to_passing_rounds():
    r = row("k", "good", "BAD", "fine", key_rounds=[2, 4, 6])
    (kept,), _ = run(ScoreFilter([MarkerScorer()]), [r])
    assert user_data_get(kept["user_data"], "key_rounds") == [2, 6]
    assert user_data_get(kept["user_data"], "source") == "unit"  # other entries kept
    assert kept["messages"] is r["messages"]  # shallow copy, nothing else touched
    # unchanged key rounds: the row object itself is kept
    r2 = row("k2", "good", "BAD", key_rounds=[2])
    assert run(ScoreFilter([MarkerScorer()]), [r2])[0][0] is r2


def test_dict_user_data_stays_a_dict():
    r = {"id": "d", "messages": conv("good", "BAD"), "user_data": {"key_rounds": [2, 4], "x": 1}}
    (kept,), _ = run(ScoreFilter([MarkerScorer()]), [r])
    assert kept["user_data"] == {"key_rounds": [2], "x": 1}


def test_all_key_rounds_failed():
    r = row("k", "BAD one", "good", key_rounds=[2])
    assert reasons(run(ScoreFilter([MarkerScorer()]), [r])[1]) == {"k": SCORE_ALL_ROUNDS_FAILED}


def test_no_scoreable_round():
    think_only = row("t", "<think>just thinking</think>", key_rounds=[2])
    no_answer = {"id": "u", "messages": [{"role": "user", "content": "hello?"}]}
    f = ScoreFilter([MarkerScorer()])
    kept, dropped = run(f, [think_only, no_answer])
    assert reasons(dropped) == {"t": SCORE_NO_CONTEXT} and kept == [no_answer]
    assert run(ScoreFilter([MarkerScorer()], keep_if_no_key_rounds=True), [think_only])[1] == []
    # under an intent filter, a row with nothing of those intents has no context
    kept, dropped = run(ScoreFilter([MarkerScorer()], intents=["code"]), [row("o", "good")])
    assert reasons(dropped) == {"o": SCORE_NO_CONTEXT}


def test_intent_filter_scores_only_matching_rounds():
    r = row("i", "BAD", "good", key_rounds=[2, 4])
    r["user_data"].append(("intents", pack_value({"2": "math", "4": "code"})))
    (kept,), _ = run(ScoreFilter([MarkerScorer()], intents="code"), [r])
    assert user_data_get(kept["user_data"], "key_rounds") == [4]


def test_invalid_rows_and_column_dicts():
    kept, dropped = ScoreFilter([MarkerScorer()])(["not a row", row("ok", "good")])
    assert [d["drop_reason"] for d in dropped] == ["invalid_row"] and kept[0]["id"] == "ok"
    rows = [row("a", "good"), row("b", "BAD")]
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    kept, dropped = ScoreFilter([MarkerScorer()])(columns)
    assert [r["id"] for r in kept] == ["a"] and [r["id"] for r in dropped] == ["b"]


def test_failing_scorer_costs_its_measurement_not_the_batch(caplog):
    f = ScoreFilter([MarkerScorer(), BrokenScorer()])
    with caplog.at_level(logging.ERROR):
        kept, dropped = run(f, [row("a", "good"), row("b", "BAD")])
    assert [r["id"] for r in kept] == ["a"] and reasons(dropped) == {"b": SCORE_ROUND_FAILED}
    assert "scorer broken failed" in caplog.text
    assert f.last_summary["broken"]["scored"] == 0 and f.last_summary["broken"]["passed"] == 2


def test_one_log_line_per_scorer(caplog):
    f = ScoreFilter([MarkerScorer(), "char_stats"])
    with caplog.at_level(logging.INFO, logger="twinkle_agentic.preprocessor.score.filter"):
        f([row("a", "good", "BAD"), row("b", "fine")])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[ScoreFilter]")]
    assert len(lines) == 2
    assert lines[0].startswith(
        "[ScoreFilter] marker: n=3 scored=3 mean=0.6667 min=0 max=1 passed=2/3 | chars="
    )
    assert lines[1].startswith("[ScoreFilter] char_stats: n=3")


def test_traces_files_and_callbacks(tmp_path):
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir()
    (trace_dir / "keep-me.txt").write_text("older run")
    seen, successes = [], []
    f = ScoreFilter(
        [MarkerScorer()],
        trace_dir=str(trace_dir),
        trace_callback=seen.append,
        success_callback=successes.append,
    )
    ScoreFilter([MarkerScorer()], trace_dir=str(trace_dir))  # constructing again never clears
    long_id = "row/with spaces/" + "x" * 80
    run(f, [row(long_id, "good", "BAD"), row("b", "fine")])
    assert (trace_dir / "keep-me.txt").read_text() == "older run"
    names = sorted(n for n in os.listdir(trace_dir) if n.endswith(".json"))
    assert len(names) == 3 and len(seen) == 3 and len(successes) == 2
    for name in names:
        assert re.fullmatch(r"(ok|fail)-[A-Za-z0-9_.-]+-\d+-\d+-\d+\.json", name) and len(name) <= 64
    fail = next(json.loads((trace_dir / n).read_text()) for n in names if n.startswith("fail-"))
    assert fail["round"] == 4 and fail["passed"] is False and fail["kept"] is False
    assert fail["drop_reason"] == SCORE_ROUND_FAILED and fail["intent"] == "other"
    assert fail["scores"]["marker"] == {"score": 0.0, "passed": False, "extras": {"chars": 3}}
    assert fail["messages"][-1] == {"role": "assistant", "content": "BAD"}
    assert set(fail) >= {"n_prompt", "prompt_ids", "asst_ids", "features"}


def test_broken_callback_is_logged_not_raised(caplog):
    def explode(record):
        raise ValueError("callback bug")

    f = ScoreFilter([MarkerScorer()], trace_callback=explode)
    with caplog.at_level(logging.ERROR):
        kept, _ = f([row("a", "good")])
    assert len(kept) == 1 and "trace callback failed" in caplog.text


def test_construction_errors():
    with pytest.raises(ValueError, match="needs a model backend"):
        ScoreFilter([ChrMinScorer()])
    with pytest.raises(ValueError, match="needs a model backend"):
        ScoreFilter(["pass_n"])
    with pytest.raises(ValueError, match="distinct names"):
        ScoreFilter([MarkerScorer(), MarkerScorer()])
    with pytest.raises(ValueError, match="unknown scorer type"):
        ScoreFilter([{"type": "nope"}])
    with pytest.raises(ValueError, match="needs 'model'"):
        ScoreFilter(["sifd"], backend={"type": "sampler"})
    with pytest.raises(ValueError, match="template"):
        ScoreFilter(["sifd"], backend=type("S", (), {"sample": lambda self, f, p: []})())
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        ScoreFilter(max_prompt_tokens=0)
    with pytest.raises(ValueError, match="grader"):
        PassNScorer(grader="judge")


def test_yaml_config_builds_lazily_and_pickles():
    f = ScoreFilter(
        scorers=["sifd", {"type": "chr_min", "threshold": 0.5}, {"type": "CharStatsScorer"}],
        backend={"type": "sampler", "model": "/nonexistent/model", "max_model_len": 512},
    )
    assert f.needs_actor is True and ScoreFilter.needs_actor is False
    assert [s.name for s in f.scorers] == ["sifd", "chr_min", "char_stats"] and f.scorers[1].threshold == 0.5
    assert f.scorers[0].backend is f.backend and f.backend._sampler is None  # nothing built yet
    clone = pickle.loads(pickle.dumps(f))
    assert clone.backend._config == {
        "model": "/nonexistent/model",
        "sampling_overrides": {"detokenize": False},
        "max_model_len": 512,
    }
    g = ScoreFilter(
        ["chr_min"], backend={"type": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"}
    )
    assert g.backend.root == "http://127.0.0.1:1" and pickle.loads(pickle.dumps(g)).needs_actor


ANSWERS = st.sampled_from(["good", "BAD", "<think>x</think>", "fine answer", ""])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(ANSWERS, min_size=0, max_size=4),
            st.one_of(st.none(), st.lists(st.integers(-1, 9), max_size=4)),
            st.booleans(),
        ),
        max_size=6,
    ),
    st.booleans(),
    st.booleans(),
)
def test_every_row_is_kept_or_dropped(spec, drop_any, keep_no_context):
    rows = [
        row(str(i), *answers, key_rounds=kr) if as_row else "junk"
        for i, (answers, kr, as_row) in enumerate(spec)
    ]
    f = ScoreFilter([MarkerScorer()], drop_row_on_any_fail=drop_any, keep_if_no_key_rounds=keep_no_context)
    kept, dropped = run(f, rows)
    originals = {r["id"]: r for r in rows if isinstance(r, dict)}
    for r in kept:
        kr = user_data_get(r["user_data"], "key_rounds")
        if kr != user_data_get(originals[r["id"]]["user_data"], "key_rounds"):
            # rewritten key rounds name only passing, scoreable assistant rounds
            assert kr and all(r["messages"][i]["role"] == "assistant" for i in kr)
            assert all("BAD" not in r["messages"][i]["content"] for i in kr)
