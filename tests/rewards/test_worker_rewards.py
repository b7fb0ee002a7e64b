"""A rollout worker scores each batch it rolls out (in-process, the scripted engine of
``tests.support.farm_fakes``): fields on every trajectory, failures confined to their trajectory."""

from __future__ import annotations

import pytest
from twinkle_agentic.actors import EngineConfig, RolloutSpec, RolloutWorker, ToolCatalog
from twinkle_agentic.actors.config import FarmConfigError

from tests.support import reward_functions
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.rewards import RewardSpec

SCRIPTED = EngineConfig("scripted", mode="tests.support.farm_fakes:ScriptedMode", num_cpus=0.1)
CONTAINS = "twinkle_agentic.rewards.builtin:contains_ground_truth"


@pytest.fixture
def worker():
    reward_functions.RELEASE.clear()
    rewards = [RewardSpec(CONTAINS, weight=2.0), RewardSpec("tests.support.reward_functions:hang_when_asked", timeout_s=0.3)]
    worker = RolloutWorker(SCRIPTED, RolloutSpec(catalog=ToolCatalog({"demo": demo_tools()}), rewards=rewards))
    yield worker
    reward_functions.RELEASE.set()
    worker.shutdown()


def row(i: int, **extra) -> dict:
    return {"trajectory_id": f"t{i}", "messages": [{"role": "user", "content": str(i)}], **extra}


def test_the_worker_scores_every_trajectory_of_a_batch(worker):
    batch = [
        row(0, ground_truth="OK"),
        row(1, ground_truth=["ok", "fine"]),
        row(2, ground_truth="ok", explode=True),
        row(3, ground_truth="ok", toolsets=["nope"]),
        row(4, ground_truth="ok", hang=True),
    ]
    out = {t["trajectory_id"]: t for t in worker.run_batch(batch).trajectories}
    assert out["t0"]["reward"] == 2.0 and out["t0"]["reward_components"] == {"contains_ground_truth": 1.0, "hang_when_asked": 0.0}
    assert out["t1"]["reward"] == 1.0 and out["t1"]["reward_error"] is None
    for failed in ("t2", "t3"):
        assert out[failed]["stop_reason"] == "error" and out[failed]["reward"] is None
        assert out[failed]["reward_error"] == "not scored: the rollout ended with stop_reason 'error'"
    assert out["t4"]["reward"] is None and out["t4"]["reward_error"] == "hang_when_asked: timed out after 0.3 s"
    assert out["t4"]["reward_components"] == {"contains_ground_truth": 1.0}


def test_a_bad_reward_function_stops_the_worker_before_its_engine_starts():
    with pytest.raises(FarmConfigError, match=r"rewards\[0\]\.function 'my_graders:exact': cannot import module"):
        RolloutWorker(EngineConfig("scripted", mode="tests.support.farm_fakes:BrokenMode"), RolloutSpec(rewards=["my_graders:exact"]))


def penalty_for_ids(trajectory: dict) -> float:
    """A reward named by this test module's path: the worker actor imports it like user code."""
    return -1.0 if trajectory["trajectory_id"].endswith("3") else 0.0


@pytest.mark.integration
def test_workers_on_ray_score_what_they_roll_out(ray_local):
    from twinkle_agentic.actors import FarmOptions, RolloutFarm

    rewards = [CONTAINS, {"function": "tests.rewards.test_worker_rewards:penalty_for_ids", "weight": 0.5}]
    farm = RolloutFarm(SCRIPTED, RolloutSpec(rewards=rewards), FarmOptions(engines=1, batch_size=2))
    try:
        farm.start()
        out = [t for done in farm.run([row(i, ground_truth="ok") for i in range(5)]) for t in done.trajectories]
    finally:
        farm.shutdown()
    assert {t["trajectory_id"]: t["reward"] for t in out} == {"t0": 1.0, "t1": 1.0, "t2": 1.0, "t3": 0.5, "t4": 1.0}
    assert all(t["reward_components"]["contains_ground_truth"] == 1.0 and t["reward_error"] is None for t in out)
