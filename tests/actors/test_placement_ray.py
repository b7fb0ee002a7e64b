"""The farm's placement groups on a real local Ray cluster: a scripted worker (``farm_fakes.ScriptedMode``)
whose options ask for a group of CPU bundles (the GPU bundles' stand-in on this machine) runs in
bundle 0 of its own group, a task it starts lands in the group too (vLLM's shard processes rely on
that), and the group is removed when the worker is replaced and when the farm shuts down."""

from __future__ import annotations

import time
from typing import Any

from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec
from twinkle_agentic.actors.worker import RolloutWorker

SCRIPTED = EngineConfig("scripted", mode="tests.support.farm_fakes:ScriptedMode", num_cpus=0.1)
GROUP = {"bundles": [{"CPU": 0.1}, {"CPU": 0.2}, {"CPU": 0.2}], "strategy": "STRICT_PACK"}


def _group_of_here() -> str | None:
    from ray.util import get_current_placement_group

    group = get_current_placement_group()
    return group.id.hex() if group else None


class GroupedWorker(RolloutWorker):
    """A real worker whose options carry a placement group of CPU bundles, as a multi-GPU engine's do."""

    @staticmethod
    def ray_options(cfg: EngineConfig) -> dict[str, Any]:
        return {**RolloutWorker.ray_options(cfg), "placement_group": GROUP}

    def ready(self) -> dict[str, Any]:
        import ray

        child = ray.remote(num_cpus=0.1)(_group_of_here).remote()  # no strategy: captured by the group
        return {**super().ready(), "group": _group_of_here(), "child_group": ray.get(child)}


def _states() -> dict[str, str]:
    from ray.util import placement_group_table

    return {group_id: entry["state"] for group_id, entry in placement_group_table().items()}


def _wait_removed(group_ids: list[str], timeout_s: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = _states()
        if all(states.get(g) == "REMOVED" for g in group_ids):
            break
        time.sleep(0.2)
    return {g: _states().get(g, "absent") for g in group_ids}


def test_each_worker_runs_in_its_own_group_which_is_removed_on_replace_and_shutdown(ray_local):
    farm = RolloutFarm(SCRIPTED, RolloutSpec(), FarmOptions(engines=2, batch_size=2), worker_cls=GroupedWorker)
    try:
        infos = farm.start()
        groups = [slot.group.id.hex() for slot in farm.slots]
        assert len(set(groups)) == 2 and sorted(info["group"] for info in infos) == sorted(groups)
        assert all(info["child_group"] == info["group"] for info in infos)
        table = ray_local.util.placement_group_table()
        for group_id in groups:
            assert table[group_id]["state"] == "CREATED" and table[group_id]["strategy"] == "STRICT_PACK"
            assert [b.get("CPU") for b in table[group_id]["bundles"].values()] == [0.1, 0.2, 0.2]

        slot = farm.slots[0]
        farm._replace(slot, "test: replace the worker")  # kills the actor, removes its group, makes a new one
        assert _wait_removed([groups[0]]) == {groups[0]: "REMOVED"}
        new_group = slot.group.id.hex()
        assert new_group not in groups
        prompts = [{"trajectory_id": f"t{i}", "messages": [{"role": "user", "content": "hi"}]} for i in range(6)]
        out = [t for batch in farm.run(prompts) for t in batch.trajectories]
        assert sorted(t["trajectory_id"] for t in out) == [f"t{i}" for i in range(6)]
        assert all(t["stop_reason"] == "stop" for t in out)
    finally:
        farm.shutdown()
    assert all(slot.group is None for slot in farm.slots)
    assert _wait_removed([new_group, groups[1]]) == {new_group: "REMOVED", groups[1]: "REMOVED"}
