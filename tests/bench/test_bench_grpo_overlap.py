"""The GRPO overlap bench's pure helpers: steps per hour (the first step left out), the per-run
summary, the medians over paired rounds and the goal, and the two runs of a round."""

from __future__ import annotations

import pytest

from bench.grpo_overlap import (
    build_parser,
    curves,
    equal_delay_ratio,
    runs_of_round,
    steps_per_hour,
    summarise,
    verdict,
)


def lines(rewards: list[float], rollout_s: float, train_s: float = 1.0, **extra) -> list[dict]:
    return [
        {"step": i, "mean_reward": r, "groups": 16, "failed_groups": 0, "rollout_s": rollout_s,
         "train_s": train_s, "update_s": 0.0, "mismatch_s": 0.0, **extra}
        for i, r in enumerate(rewards)
    ]  # fmt: skip


def test_steps_per_hour_leaves_out_the_first_two_steps():
    run = lines([0.5] * 5, rollout_s=3.0)
    run[0]["rollout_s"] = 100.0  # the first rollout: never overlapped, left out
    run[1]["rollout_s"] = 0.0  # rolled out with step 0 in the overlap's first run: left out
    assert steps_per_hour(run) == pytest.approx(3600 * 3 / 12.0)
    with pytest.raises(ValueError, match="more than 2 steps"):
        steps_per_hour(run[:2])


def test_summary_and_verdict_over_paired_rounds():
    rewards = [0.4, 0.5, 0.6, 0.6, 0.7, 0.8]
    sync = summarise(lines(rewards, rollout_s=3.0))
    assert sync["change"] == pytest.approx(0.2) and sync["steps_per_hour"] == pytest.approx(900.0)
    assert sync["timed_steps"] == 4
    fast = summarise(lines(rewards, rollout_s=1.0, staleness=1))
    slow = summarise(lines([0.4, 0.5, 0.6, 0.5, 0.5, 0.5], rollout_s=1.4, staleness=1))
    assert fast["max_staleness_seen"] == 1
    rounds = [{"sync": sync, "overlap": fast}, {"sync": sync, "overlap": fast}, {"sync": sync, "overlap": slow}]
    result = verdict(rounds, max_staleness=1, noise=0.065)
    assert result["ratio"] == pytest.approx(2.0)  # the median of 2.0, 2.0 and 1.67
    assert result["pooled_ratio"] == pytest.approx(3 * 16 / (2 * 8 + 9.6))  # 12 steps in 48 s vs 25.6 s
    assert result["learning_not_worse"] and result["goal_met"]
    assert not verdict(rounds, max_staleness=2, noise=0.065)["goal_met"]  # the goal is at staleness <= 1
    assert curves(rounds[:2]).splitlines()[1:] == [
        "    sync 0.400 0.500 0.600 0.600 0.700 0.800",
        " overlap 0.400 0.500 0.600 0.600 0.700 0.800",
    ]
    worse = verdict([{"sync": sync, "overlap": slow}], max_staleness=1, noise=0.065)
    assert not worse["learning_not_worse"] and not worse["goal_met"]
    with pytest.raises(ValueError, match="at least 6"):
        summarise(lines(rewards[:5], rollout_s=1.0))


def test_the_equal_delay_ratio_moves_each_step_by_its_share_of_the_tool_gap():
    """Synchronous steps of 4 s drawing a 3 s slowest call against overlapped ones of 2 s drawing 2 s:
    at the common 2.5 s the synchronous step is 3.5 s and the overlapped one 2.25 s at staleness 1
    (two steps share a wait), 2.5 s at staleness 0; with equal draws it is the pooled ratio."""
    rewards = [0.4, 0.5, 0.6, 0.6, 0.7, 0.8]
    sync = summarise(lines(rewards, rollout_s=3.0, tool_wait_max_s=3.0))
    overlap = summarise(lines(rewards, rollout_s=1.0, tool_wait_max_s=2.0))
    rounds = [{"sync": sync, "overlap": overlap}]
    assert equal_delay_ratio(rounds, max_staleness=1) == pytest.approx(3.5 / 2.25)
    assert equal_delay_ratio(rounds, max_staleness=0) == pytest.approx(3.5 / 2.5)
    same = [{"sync": sync, "overlap": summarise(lines(rewards, rollout_s=1.0, tool_wait_max_s=3.0))}]
    assert equal_delay_ratio(same, max_staleness=1) == pytest.approx(verdict(same, 1, 0.065)["pooled_ratio"])


def test_a_round_runs_sync_and_overlap_with_the_same_seed_and_latency_in_alternating_order():
    args = build_parser().parse_args(["--steps", "8", "--tool-latency", "fixed:seconds=0.1", "--run-steps", "2"])
    first, second = runs_of_round(0, args), runs_of_round(1, args)
    assert [name for name, _ in first] == ["sync", "overlap"] and [name for name, _ in second] == ["overlap", "sync"]
    sync, overlap = dict(first)["sync"], dict(first)["overlap"]
    assert overlap[: len(sync)] == sync and "fixed:seconds=0.1" in sync
    assert overlap[len(sync) :] == [
        "--overlap", "--max-staleness", "1", "--run-steps", "2", "--on-update", "abort_and_resume",
    ]  # fmt: skip
    waits = build_parser().parse_args(["--sync-omp-wait", "passive", "--overlap-omp-wait", "active"])
    sync, overlap = dict(runs_of_round(0, waits))["sync"], dict(runs_of_round(0, waits))["overlap"]
    assert sync[-2:] == ["--trainer-omp-wait", "passive"] and overlap[-2:] == ["--trainer-omp-wait", "active"]
    niced = dict(runs_of_round(0, build_parser().parse_args(["--overlap-nice", "0"])))["overlap"]
    assert niced[-2:] == ["--trainer-nice", "0"]
