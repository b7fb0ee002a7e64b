"""The built-in reward functions."""

from __future__ import annotations

import pytest

from twinkle_agentic.rewards.builtin import contains_ground_truth, final_answer


def answered(text, **row) -> dict:
    return {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": text},
                         {"role": "tool", "content": "sunny"}], **row}  # fmt: skip


def test_contains_ground_truth_is_the_share_of_facts_the_final_answer_states():
    assert contains_ground_truth(answered("Sunny and 24 C.", ground_truth=["sunny", "24 C"])) == 1.0
    assert contains_ground_truth(answered("It is sunny.", ground_truth=["sunny", "24 C"])) == 0.5
    assert contains_ground_truth(answered("The answer is 145", ground_truth="145")) == 1.0
    assert contains_ground_truth(answered("", ground_truth="sunny")) == 0.0  # a tool said it, the answer did not


def test_final_answer_reads_the_last_assistant_message_and_content_parts():
    parts = {"messages": [{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}
    assert final_answer(parts) == "a b"
    assert final_answer({"messages": [{"role": "user", "content": "q"}]}) == ""


@pytest.mark.parametrize("truth", [None, [], [1], {"a": 1}])
def test_a_row_without_usable_ground_truth_is_an_error(truth):
    with pytest.raises(ValueError, match="needs the prompt row's 'ground_truth'"):
        contains_ground_truth(answered("x", ground_truth=truth))
