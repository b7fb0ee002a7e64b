"""The GRPO learning bench's pure helpers: the first-3/last-3 summary of a run, issue 34's criterion,
and which runs it starts with which arguments."""

from __future__ import annotations

import json
import math

import pytest

from bench.grpo_learning import build_parser, criterion, read_metrics, runs_to_do, summarise


def lines(rewards: list[float], **extra) -> list[dict]:
    return [
        {"step": i, "mean_reward": r, "groups": 16, "failed_groups": 0, "rollout_s": 3.0, "train_s": 1.0,
         "update_s": 0.1, "mismatch_s": 0.0, "mismatch_mean_abs": 1e-7 * (i + 1), "mismatch_p99_abs": 1e-6, **extra}
        for i, r in enumerate(rewards)
    ]  # fmt: skip


def test_the_summary_compares_the_first_and_last_three_steps():
    summary = summarise(lines([0.4, 0.5, 0.6, 0.0, 1.0, 0.7, 0.8, 0.9]))
    assert summary["first3"] == pytest.approx(0.5)
    assert summary["last3"] == pytest.approx(0.8)
    assert summary["change"] == pytest.approx(0.3)
    assert summary["steps"] == 8 and summary["groups"] == 128
    assert summary["mismatch_mean_abs"] == pytest.approx(4.5e-7)  # the median over steps
    assert summary["rollout_s"] == pytest.approx(3.0)


def test_too_few_steps_or_an_unscored_step_is_refused():
    with pytest.raises(ValueError, match="at least 6"):
        summarise(lines([0.5] * 5))
    with pytest.raises(ValueError, match=r"NaN\): \[2\]"):
        summarise(lines([0.5, 0.5, math.nan, 0.5, 0.5, 0.5]))


def test_steps_are_read_in_order(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in reversed(lines([0.1, 0.2, 0.3]))) + "\n")
    assert [line["step"] for line in read_metrics(path)] == [0, 1, 2]


@pytest.mark.parametrize(
    ("update", "control", "passed"),
    [
        (0.20, 0.0, True),
        (0.09, -0.2, False),  # under 0.10 whatever the control did
        (0.20, 0.11, False),  # under twice the control's change
        (0.22, 0.11, True),
        (0.10, -0.02, True),
    ],
)
def test_the_criterion_needs_a_tenth_and_twice_the_controls_change(update, control, passed):
    verdict = criterion({"change": update}, {"change": control})
    assert verdict["passed"] is passed
    assert verdict["required"] == pytest.approx(max(0.10, 2 * control))


def test_the_runs_and_their_arguments():
    runs = runs_to_do(build_parser().parse_args(["--steps", "12", "--bf16-steps", "6", "--tis-cap", "2"]))
    assert list(runs) == ["update", "control", "bf16", "bf16_tis"]
    assert runs["control"] == ["--steps", "12", "--no-update"]
    assert runs["bf16_tis"] == ["--steps", "6", "--engine-dtype", "bfloat16", "--tis-cap", "2.0"]
    assert list(runs_to_do(build_parser().parse_args(["--tis-cap", "0"]))) == ["update", "control", "bf16"]
    assert list(runs_to_do(build_parser().parse_args(["--bf16-steps", "0"]))) == ["update", "control"]
