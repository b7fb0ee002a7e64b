"""GRPO groups (``twinkle_agentic.rollout.groups``): advantages by hand, failed members retried then
failing their group, arrival in any order, singleton groups. No cluster."""

from __future__ import annotations

import math
import random

import pytest

from twinkle_agentic.errors import ConfigError
from twinkle_agentic.rollout.groups import (
    GroupCollector,
    GroupConfig,
    advantages,
    member_failure,
    retry_id,
    roll_groups,
    tool_errors,
)


def inputs(group: str, size: int) -> list[dict]:
    return [
        {"trajectory_id": f"{group}/s{k}", "group_id": group, "group_size": size, "sample_index": k,
         "messages": [{"role": "user", "content": group}]}
        for k in range(size)
    ]  # fmt: skip


def finished(item: dict, reward: float | None = None, **extra) -> dict:
    """What a worker hands back: the input, a stop reason, tokens, and the scorer's three keys."""
    return {**item, "stop_reason": "stop", "input_ids": [1, 2], "labels": [-100, 2], "reward": reward,
            "reward_components": {} if reward is None else {"exact": reward}, "reward_error": None, **extra}  # fmt: skip


def collect(collector: GroupCollector, results: list[dict]) -> tuple[list[list[dict]], list[dict]]:
    groups, retries = [], []
    for result in results:
        out = collector.add(result)
        groups += out.groups
        retries += out.retries
    return groups, retries


# -- advantages ---------------------------------------------------------------------------------------


def test_grpo_advantage_is_reward_minus_mean_over_population_std_plus_epsilon():
    # rewards 1, 0, 0, 1: mean 0.5, population std 0.5 (the sample std would be 0.577)
    values = advantages([1.0, 0.0, 0.0, 1.0], GroupConfig(epsilon=0.0))
    assert values == [1.0, -1.0, -1.0, 1.0]
    # rewards 3, 1, 2: mean 2, population std sqrt(2/3)
    std = math.sqrt(2 / 3)
    assert advantages([3.0, 1.0, 2.0], GroupConfig(epsilon=0.1)) == pytest.approx([1 / (std + 0.1), -1 / (std + 0.1), 0.0])


def test_dr_grpo_advantage_is_reward_minus_mean_only():
    assert advantages([3.0, 1.0, 2.0], GroupConfig(advantage="dr_grpo")) == [1.0, -1.0, 0.0]
    assert advantages([0.25, 0.75], GroupConfig(advantage="dr_grpo", epsilon=5.0)) == [-0.25, 0.25]


def test_epsilon_keeps_a_group_of_equal_rewards_at_zero():
    assert advantages([0.7, 0.7, 0.7], GroupConfig()) == [0.0, 0.0, 0.0]
    assert advantages([0.7, 0.7, 0.7], GroupConfig(epsilon=0.0)) == [0.0, 0.0, 0.0]  # not 0/0
    # the default epsilon is 1e-6: tiny spreads are divided by std + 1e-6, not by std alone
    assert advantages([1.0, 1.0 + 2e-6], GroupConfig())[1] == pytest.approx(1e-6 / (1e-6 + 1e-6))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"advantage": "ppo"}, "groups.advantage must be one of"),
        ({"epsilon": -1.0}, "groups.epsilon"),
        ({"max_member_retries": -1}, "groups.max_member_retries"),
        ({"tool_errors_fail": "yes"}, "groups.tool_errors_fail"),
    ],
)
def test_bad_group_settings_are_refused(change, message):
    with pytest.raises(ConfigError, match=message):
        GroupConfig(**change).validate()


# -- member failures ----------------------------------------------------------------------------------


def test_what_fails_a_member():
    (item,) = inputs("p", 1)
    config, strict = GroupConfig(), GroupConfig(tool_errors_fail=True)
    assert member_failure(finished(item, 1.0), config) is None
    assert member_failure(finished(item, None), config) is None  # not scored (no reward function): not a failure
    assert "rollout failed: EngineDeadError" in member_failure({**finished(item), "stop_reason": "error", "error": "EngineDeadError: x"}, config)
    assert "reward failed: TimeoutError" in member_failure(finished(item, None, reward_error="TimeoutError: 2 s"), config)
    bad_tool = finished(item, 1.0, messages=[*item["messages"], {"role": "tool", "content": "Error: tool 'x' timed out after 3s."}])
    assert tool_errors(bad_tool) == 1
    assert member_failure(bad_tool, config) is None and "1 tool call(s)" in member_failure(bad_tool, strict)


# -- the collector ------------------------------------------------------------------------------------


def test_a_group_is_released_once_complete_whatever_the_order():
    collector = GroupCollector(GroupConfig(advantage="dr_grpo"))
    planned = inputs("a", 3) + inputs("b", 2)
    collector.expect(planned)
    rewards = {"a/s0": 1.0, "a/s1": 0.0, "a/s2": 0.5, "b/s0": 0.0, "b/s1": 0.0}
    order = [planned[i] for i in (4, 1, 0, 3, 2)]
    released = []
    for item in order:
        out = collector.add(finished(item, rewards[item["trajectory_id"]]))
        assert not out.retries
        released.append([[m["trajectory_id"] for m in g] for g in out.groups])
    # b completes on the 4th arrival, a on the 5th; members come out in sample order
    assert released == [[], [], [], [["b/s0", "b/s1"]], [["a/s0", "a/s1", "a/s2"]]]
    assert collector.pending == 0 and collector.released == 2 and collector.failed == 0


def test_released_members_carry_group_keys_and_advantages():
    collector = GroupCollector(GroupConfig(epsilon=0.0))
    planned = inputs("q", 4)
    collector.expect(planned)
    shuffled = planned[:]
    random.Random(3).shuffle(shuffled)
    rewards = {"q/s0": 1.0, "q/s1": 0.0, "q/s2": 0.0, "q/s3": 1.0}
    (group,), retries = collect(collector, [finished(t, rewards[t["trajectory_id"]]) for t in shuffled])
    assert not retries
    assert [m["advantage"] for m in group] == [1.0, -1.0, -1.0, 1.0]
    for member in group:
        assert member["group_id"] == "q" and member["group_size"] == 4 and member["group_failed"] is False
        assert member["group_error"] is None and member["member_attempts"] == 1
        assert member["reward_components"] == {"exact": member["reward"]}


def test_singleton_groups_get_advantage_zero():
    collector = GroupCollector()
    collector.expect(inputs("x", 1))
    (group,), _ = collect(collector, [finished(inputs("x", 1)[0], 0.8)])
    assert group[0]["advantage"] == 0.0 and group[0]["group_size"] == 1


def test_an_unscored_group_is_released_without_advantages():
    collector = GroupCollector()
    planned = inputs("u", 2)
    collector.expect(planned)
    (group,), _ = collect(collector, [finished(t) for t in planned])
    assert [m["advantage"] for m in group] == [None, None] and not any(m["group_failed"] for m in group)


def test_a_failed_member_is_retried_fresh_and_the_group_completes_when_the_retry_succeeds():
    collector = GroupCollector(GroupConfig(advantage="dr_grpo"))
    planned = inputs("r", 3)
    collector.expect(planned)
    failed = {**finished(planned[1]), "stop_reason": "error", "error": "RolloutFarmError: gave up"}
    groups, retries = collect(collector, [finished(planned[0], 1.0), failed, finished(planned[2], 0.0)])
    assert not groups and len(retries) == 1
    (fresh,) = retries
    assert fresh == {**planned[1], "trajectory_id": retry_id("r/s1", 1)} == {**planned[1], "trajectory_id": "r/s1/retry1"}
    (group,), more = collect(collector, [finished(fresh, 0.5)])
    assert not more
    assert [m["trajectory_id"] for m in group] == ["r/s0", "r/s1", "r/s2"]  # written under the planned ids
    assert [m["member_attempts"] for m in group] == [1, 2, 1]
    assert [m["advantage"] for m in group] == [0.5, 0.0, -0.5] and collector.retried == 1 and collector.failed == 0


def test_a_member_failing_past_its_retries_fails_the_whole_group():
    collector = GroupCollector(GroupConfig(max_member_retries=2))
    planned = inputs("f", 3)
    collector.expect(planned)
    bad = {"reward": None, "reward_error": "ValueError: no answer"}
    groups, retries = collect(collector, [finished(planned[0], 1.0), finished(planned[1], **bad), finished(planned[2], 0.0)])
    assert not groups and [r["trajectory_id"] for r in retries] == ["f/s1/retry1"]
    groups, retries = collect(collector, [finished(retries[0], **bad)])
    assert not groups and [r["trajectory_id"] for r in retries] == ["f/s1/retry2"]
    (group,), retries = collect(collector, [finished(retries[0], **bad)])
    assert not retries
    assert [m["advantage"] for m in group] == [None, None, None] and all(m["group_failed"] for m in group)
    assert all(m["group_error"] == "member f/s1: reward failed: ValueError: no answer" for m in group)
    assert group[1]["member_attempts"] == 3 and group[0]["reward"] == 1.0  # the others keep their scores
    assert collector.failed == 1 and collector.retried == 2


def test_an_all_failed_group_is_failed_once_every_member_used_its_retries():
    collector = GroupCollector(GroupConfig(tool_errors_fail=True))
    planned = inputs("z", 2)
    collector.expect(planned)

    def broken(item: dict) -> dict:
        return {**finished(item, 1.0), "messages": [{"role": "tool", "content": "Error: unknown tool 'x'."}]}

    groups, retries = collect(collector, [broken(t) for t in planned])
    assert not groups and len(retries) == 2
    (group,), retries = collect(collector, [broken(t) for t in reversed(retries)])
    assert not retries and all(m["group_failed"] and m["advantage"] is None for m in group)
    assert group[0]["group_error"] == "member z/s0: 1 tool call(s) answered an error; member z/s1: 1 tool call(s) answered an error"
    assert collector.failed == 1 and collector.pending == 0


def test_no_retries_fails_the_group_at_once():
    collector = GroupCollector(GroupConfig(max_member_retries=0))
    planned = inputs("n", 2)
    collector.expect(planned)
    (group,), retries = collect(collector, [finished(planned[0], 1.0), {**finished(planned[1]), "stop_reason": "error"}])
    assert not retries and group[0]["group_failed"] and "no error recorded" in group[0]["group_error"]


def test_unexpected_and_badly_grouped_trajectories_are_refused():
    collector = GroupCollector()
    with pytest.raises(ValueError, match="group_id"):
        collector.expect([{"trajectory_id": "a"}])
    collector.expect(inputs("g", 2))
    with pytest.raises(ValueError, match="expected twice"):
        collector.expect(inputs("g", 2)[:1])
    with pytest.raises(ValueError, match="group_size 2 and 3"):
        collector.expect([{"trajectory_id": "g/x", "group_id": "g", "group_size": 3}])
    with pytest.raises(ValueError, match="more than its group_size"):
        collector.expect([{"trajectory_id": "g/s9", "group_id": "g", "group_size": 2}])
    with pytest.raises(ValueError, match="not expected"):
        collector.add(finished({"trajectory_id": "other"}))
    collector.add(finished(inputs("g", 2)[0], 1.0))
    with pytest.raises(ValueError, match="came back twice"):
        collector.add(finished(inputs("g", 2)[0], 1.0))


# -- roll_groups: a collector driving any run function -------------------------------------------------


class Batch:
    def __init__(self, trajectories: list[dict]):
        self.trajectories = trajectories


def test_roll_groups_resubmits_failed_members_in_a_further_run():
    runs: list[list[str]] = []

    def run(todo):
        runs.append([t["trajectory_id"] for t in todo])
        for t in reversed(todo):  # one trajectory per batch, last first
            failed = t["trajectory_id"] == "p/s0"  # fails on its first attempt only
            yield Batch([{**finished(t, float(t["sample_index"])), **({"stop_reason": "error"} if failed else {})}])

    events = list(roll_groups(run, inputs("p", 2) + inputs("q", 1), GroupCollector(GroupConfig(advantage="dr_grpo"))))
    assert runs == [["p/s0", "p/s1", "q/s0"], ["p/s0/retry1"]]
    released = [[m["trajectory_id"] for m in g] for _, groups in events for g in groups]
    assert released == [["q/s0"], ["p/s0", "p/s1"]]  # p completes in the second run
    assert [m["advantage"] for m in events[-1][1][0]] == [-0.5, 0.5]


def test_roll_groups_refuses_a_run_that_loses_trajectories():
    def lossy(todo):
        yield Batch([finished(todo[0], 1.0)])

    with pytest.raises(RuntimeError, match="1 group"):
        list(roll_groups(lossy, inputs("p", 2), GroupCollector()))
