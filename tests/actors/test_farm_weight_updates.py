"""``RolloutFarm.update_weights`` on a real local Ray cluster with the scripted engine
(``tests.support.farm_fakes.ScriptedMode``): one call per worker, the latest weights loaded by every
worker started later, ``on_update`` for running trajectories, workers that die during an update.
Loading into real engines is tested in ``test_farm_weight_updates_vllm.py``.

The scripted engine stamps each trajectory with the version it started under (``started_version``)
and the one it ended under (``policy_version``).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec

from tests.actors.test_worker_and_driver import run_all, trajectories
from tests.support.farm_fakes import CRASH_ON_UPDATE, CrashOnUpdateWorker

pytestmark = pytest.mark.integration

SCRIPTED_MODE = "tests.support.farm_fakes:ScriptedMode"


def scripted(model: str, **env: str) -> EngineConfig:
    """The scripted engine, with the tiny model's checkpoint as the one updates are checked against."""
    return EngineConfig(model, mode=SCRIPTED_MODE, num_cpus=0.1, env_vars=env)


@pytest.fixture(scope="module")
def tiny_state(tiny_model_path):
    from safetensors.torch import load_file

    return load_file(f"{tiny_model_path}/model.safetensors")


def renamed(items: list[dict], prefix: str) -> list[dict]:
    return [{**t, "trajectory_id": f"{prefix}-{t['trajectory_id']}"} for t in items]


def test_an_update_reaches_every_worker_with_one_call_each_and_later_runs_use_it(
    ray_local, tiny_model_path, tiny_state
):
    farm = RolloutFarm(scripted(tiny_model_path), RolloutSpec(), FarmOptions(engines=2, batch_size=2))
    try:
        assert [info["policy_version"] for info in farm.start()] == [0, 0]
        assert {t["policy_version"] for t in run_all(farm, trajectories(4))} == {0}

        assert farm.update_weights(tiny_state) == 1
        report = farm.last_update
        assert report.ray_calls == 3 and sorted(report.workers) == [0, 1] and not report.failed
        assert report.tensors == len(tiny_state) and report.payload_bytes > 0
        assert all(w["transfer_s"] >= 0 and w["rpc_calls"] >= 3 for w in report.workers.values())
        assert {t["policy_version"] for t in run_all(farm, renamed(trajectories(4), "a"))} == {1}

        assert farm.update_weights(tiny_model_path, version=7) == 7  # a checkpoint directory, version set
        assert farm.last_update.ray_calls == 3 and farm.policy_version == 7
        assert {t["policy_version"] for t in run_all(farm, renamed(trajectories(4), "b"))} == {7}
    finally:
        farm.shutdown()


def test_a_bad_payload_is_refused_before_anything_is_sent(tiny_model_path, tiny_state):
    from twinkle_agentic.sampler.weights import WeightUpdateError

    farm = RolloutFarm(scripted(tiny_model_path), RolloutSpec())
    bad = dict(tiny_state)
    bad.pop("model.norm.weight")
    with pytest.raises(WeightUpdateError, match=r"missing tensor\(s\): model\.norm\.weight"):
        farm.update_weights(bad)
    with pytest.raises(WeightUpdateError, match="not greater"):
        farm.update_weights(tiny_state, version=0)
    assert farm.policy_version == 0 and farm.last_update is None and farm.handles == [None]


def run_with_update_after_first(farm: RolloutFarm, items: list[dict], weights) -> tuple[list[dict], float]:
    """Read ``farm.run(items)``; after the first batch comes back, update the weights (from the reading
    loop, as an asynchronous trainer would). Returns every trajectory and the update's wall time."""
    out, wall = [], None
    for finished in farm.run(items):
        out += finished.trajectories
        if wall is None:
            time.sleep(0.5)  # the next trajectory is running by now (it runs for seconds)
            start = time.monotonic()
            farm.update_weights(weights)
            wall = time.monotonic() - start
    return out, wall


UPDATE_DURING_T1 = trajectories(4, t1={"hang_s": 2.5})


def update_during_t1(model: str, weights, **options) -> tuple[RolloutFarm, dict[str, dict], float]:
    """One worker, one trajectory per batch, two batches held: the update lands while t1 runs and t2
    waits in the worker. Returns the (shut down) farm, the trajectories by id and the update's wall time."""
    farm = RolloutFarm(
        scripted(model), RolloutSpec(), FarmOptions(engines=1, batch_size=1, inflight_per_worker=2, **options)
    )
    try:
        results, wall = run_with_update_after_first(farm, UPDATE_DURING_T1, weights)
    finally:
        farm.shutdown()
    assert Counter(t["trajectory_id"] for t in results) == Counter(f"t{i}" for i in range(4))
    return farm, {t["trajectory_id"]: t for t in results}, wall


def test_on_update_finish_waits_for_the_running_trajectory_and_holds_the_queued_one(
    ray_local, tiny_model_path, tiny_state
):
    farm, by_id, wall = update_during_t1(tiny_model_path, tiny_state, on_update="finish")
    assert (by_id["t1"]["started_version"], by_id["t1"]["policy_version"]) == (0, 0)  # finished on the old weights
    assert by_id["t2"]["started_version"] == by_id["t3"]["started_version"] == 1  # held until the update
    assert farm.last_update.workers[0]["wait_s"] > 1.0 and wall > 1.0


def test_on_update_abort_and_resume_loads_at_once_and_the_running_trajectory_continues(
    ray_local, tiny_model_path, tiny_state
):
    farm, by_id, wall = update_during_t1(tiny_model_path, tiny_state, on_update="abort_and_resume")
    assert (by_id["t1"]["started_version"], by_id["t1"]["policy_version"]) == (0, 1)
    assert farm.last_update.workers[0]["wait_s"] == 0.0 and wall < 2.0


def test_finish_timeout_bounds_the_wait_then_the_rest_continues_on_the_new_weights(
    ray_local, tiny_model_path, tiny_state
):
    farm, by_id, wall = update_during_t1(tiny_model_path, tiny_state, on_update="finish", finish_timeout_s=0.5)
    assert (by_id["t1"]["started_version"], by_id["t1"]["policy_version"]) == (0, 1)
    assert 0.4 < farm.last_update.workers[0]["wait_s"] < 2.0 and wall < 2.5


def test_a_worker_that_dies_during_an_update_is_replaced_by_one_serving_the_new_version(
    ray_local, tiny_model_path, tiny_state, tmp_path
):
    marker = tmp_path / "crash-on-update"
    farm = RolloutFarm(
        scripted(tiny_model_path, **{CRASH_ON_UPDATE: str(marker)}),
        RolloutSpec(),
        FarmOptions(engines=1, batch_size=1, inflight_per_worker=2),
        worker_cls=CrashOnUpdateWorker,
    )
    try:
        farm.start()
        marker.touch()
        assert farm.update_weights(tiny_state) == 1  # between runs
        assert list(farm.last_update.failed) == [0] and farm.restarts == 1
        assert {t["policy_version"] for t in run_all(farm, trajectories(3))} == {1}

        marker.touch()
        items = renamed(UPDATE_DURING_T1, "mid")  # during a run: the run requeues what the dead worker held
        results, _ = run_with_update_after_first(farm, items, tiny_state)
        assert Counter(t["trajectory_id"] for t in results) == Counter(t["trajectory_id"] for t in items)
        assert all(t["stop_reason"] == "stop" for t in results) and farm.restarts == 2
        versions = {t["trajectory_id"]: t["policy_version"] for t in results}
        assert versions == {"mid-t0": 1, "mid-t1": 2, "mid-t2": 2, "mid-t3": 2}  # t1 died with it and ran again
        assert [slot.info["policy_version"] for slot in farm.slots] == [2]
    finally:
        farm.shutdown()
