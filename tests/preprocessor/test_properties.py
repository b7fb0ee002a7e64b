"""Property tests: for any rows, no step raises, kept + dropped == input, the input is unchanged."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twinkle_agentic.preprocessor import (
    DeadLoopFilter,
    HardFilter,
    IntentClassifier,
    MessageNormalizer,
    ModelFilter,
    QualityPreprocessor,
    RefuseFilter,
    TokenSoupFilter,
)

TOKENS = list("ab wait hmm 等嗯不对ちょっと음어잠깐<>|/[]{}\ufffd\x00\ue000中アб.,!?\n\t`")
TOKENS += ["<think>", "</think>", "<tool_call>", "I can't help", "wait, no", "```", "heartbeat", "Action: f[x]"]
TEXT = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
SCALAR = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.booleans(), TEXT)
CONTENT = st.one_of(
    TEXT,
    st.none(),
    st.integers(),
    st.lists(st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), st.fixed_dictionaries({"type": st.just("image")}), SCALAR), max_size=3),
)
TOOL_CALLS = st.one_of(st.none(), st.just(""), st.just("[]"), st.just("{bad"), TEXT, st.lists(st.fixed_dictionaries({"id": TEXT, "function": st.fixed_dictionaries({"name": TEXT, "arguments": TEXT})}), max_size=2))
MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool", "developer", "function"]), SCALAR)},
    optional={"content": CONTENT, "tool_calls": TOOL_CALLS, "reasoning_content": st.one_of(TEXT, SCALAR), "name": SCALAR, "tool_call_id": SCALAR},
)
ROW = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.one_of(st.lists(st.one_of(MESSAGE, SCALAR), max_size=6), SCALAR, st.dictionaries(TEXT, SCALAR, max_size=2)),
        "model_id": SCALAR,
        "user_data": st.one_of(st.none(), st.lists(st.tuples(TEXT, TEXT), max_size=2), st.dictionaries(TEXT, TEXT, max_size=2), TEXT),
        "id": st.integers(),
        "drop_reason": st.just("stale"),
    },
)
ROWS = st.lists(st.one_of(ROW, SCALAR), max_size=6)

STEPS = [
    HardFilter(system_deny_keywords=["hack"], max_chars_per_round=50, max_total_chars=100, max_rounds=2),
    DeadLoopFilter(),
    RefuseFilter(),
    TokenSoupFilter(),
    ModelFilter(allowed_models=["m"], patterns=["q*"]),
    MessageNormalizer(),
    IntentClassifier(),
    IntentClassifier(drop_no_key_rounds=True),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: repr(s)[:40])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS)
def test_steps_account_for_every_row_and_never_mutate(step, rows):
    before = copy.deepcopy(rows)
    kept, dropped = step(rows)
    assert rows == before
    assert len(kept) + len(dropped) == len(rows)
    assert all(isinstance(d, dict) and isinstance(d.get("drop_reason"), str) for d in dropped)
    for k in kept:
        if isinstance(k, dict) and not isinstance(step, MessageNormalizer):
            assert "drop_reason" not in k


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=6))
def test_pipeline_column_dict_round_trip(rows):
    keys = list(dict.fromkeys(k for r in rows for k in r))
    batch = {k: [r.get(k) for r in rows] for k in keys}
    before = copy.deepcopy(batch)
    qp = QualityPreprocessor(STEPS[:6])
    out = qp(batch)
    assert batch == before
    assert list(out)[: len(keys)] == keys
    n = len(next(iter(out.values()))) if out else 0
    n_in = len(rows) if keys else 0  # a column dict without keys holds no rows
    assert n == n_in - sum(s.dropped for s in qp.last_stats)
    for s in qp.last_stats:
        assert s.before == s.after + s.dropped
