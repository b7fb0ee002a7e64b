"""Assertions on a finished engine-rollout trajectory, shared by the fake-sampler and the vLLM tests."""

from __future__ import annotations

from typing import Any

from twinkle_agentic.rollout.bookkeeping import IGNORE_INDEX, check_aligned


def trainable_spans(labels: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, label in enumerate([*labels, IGNORE_INDEX]):
        if label != IGNORE_INDEX and start is None:
            start = i
        elif label == IGNORE_INDEX and start is not None:
            spans.append((start, i))
            start = None
    return spans


def assert_trajectory_tokens(traj: dict[str, Any], template: Any, n_input_messages: int) -> None:
    """Every invariant the issue lists, on one output trajectory."""
    ids, labels, logprobs = traj["input_ids"], traj["labels"], traj["logprobs"]
    check_aligned(traj)
    assert len(ids) == len(labels) == len(traj["attention_mask"]) == len(traj["position_ids"]) == traj["length"]
    assert traj["position_ids"] == list(range(len(ids)))
    assert all(label in (IGNORE_INDEX, token) for token, label in zip(ids, labels, strict=True))
    trainable = sum(label != IGNORE_INDEX for label in labels)
    assert logprobs is not None and len(logprobs) == trainable
    assert all(lp <= 0.0 for lp in logprobs)

    generated = [m for m in traj["messages"][n_input_messages:] if m["role"] == "assistant"]
    assert len(generated) == traj["turns"]
    spans = trainable_spans(labels)
    nonempty = [m for m in generated if m.get("content") or m.get("tool_calls")]
    assert len(spans) == len(nonempty), (spans, nonempty)
    for (start, end), message in zip(spans, nonempty, strict=True):
        text = template.decode(ids[start:end], skip_special_tokens=True)
        assert template.clean_tool_call(text) == message["content"]
        calls = template.parse_tool_call(text)
        assert [c["function"] for c in calls] == [c["function"] for c in message.get("tool_calls", [])]

    untrainable = template.decode([t for t, lab in zip(ids, labels, strict=True) if lab == IGNORE_INDEX], False)
    trainable_text = template.decode([t for t, lab in zip(ids, labels, strict=True) if lab != IGNORE_INDEX], False)
    for message in traj["messages"][n_input_messages:]:
        if message["role"] == "tool":
            assert f"<tool_response>\n{message['content']}\n</tool_response>" in untrainable
    assert "<tool_response>" not in trainable_text and "<|im_start|>" not in trainable_text
    assert traj["token_drift"] == 0, traj["token_drift"]
