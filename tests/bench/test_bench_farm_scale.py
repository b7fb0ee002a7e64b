"""The scale benchmark's harness (``bench/sim_ray.py``, ``bench/farm_scale.py``) at small scale: the real
``RolloutFarm`` on the simulated Ray gets every trajectory back exactly once, also when a worker is
killed mid-run, and the simulated calls behave as the driver relies on."""

from __future__ import annotations

from collections import Counter

import pytest
from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec

from bench.farm_scale import SimWorker, prompts, simulate
from bench.sim_ray import RayActorError, RayTaskError, SimRay


def test_ten_engines_return_two_thousand_trajectories_exactly_once():
    row = simulate(2000, engines=10, batch_size=8, inflight=2)
    assert row["trajectories"] == 2000 and row["batches"] == 250
    assert row["max_refs_per_wait"] <= 10 * 2 + 10  # batches in flight plus workers starting
    assert row["driver_cpu_s"] > 0 and row["virtual_s"] > 20
    assert row["ray_calls_per_trajectory"]["remote"] == pytest.approx((250 + 10 + 10) / 2000)  # batches, ready and shutdown calls


def test_concurrent_workers_hold_many_single_trajectory_batches():
    row = simulate(3000, engines=5, batch_size=1, inflight=16, concurrency=16, latency_s=5.0)
    assert row["batches"] == 3000 and row["max_refs_per_wait"] <= 5 * 16 + 5


def test_a_killed_worker_is_replaced_and_every_trajectory_still_comes_back_once():
    sim = SimRay()
    with sim.install():
        farm = RolloutFarm(
            EngineConfig("simulated"), RolloutSpec(), FarmOptions(engines=4, batch_size=4, inflight_per_worker=2),
            worker_cls=SimWorker,
        )  # fmt: skip
        farm.start()
        seen: Counter = Counter()
        attempts = []
        for finished in farm.run(prompts(400)):
            seen.update(t["trajectory_id"] for t in finished.trajectories)
            attempts += [t["attempts"] for t in finished.trajectories]
            if farm.restarts == 0 and sum(seen.values()) >= 40:
                sim.kill(farm.handles[1])
        farm.shutdown()
    assert seen == Counter(range(400))
    assert farm.restarts == 1 and farm.given_up == 0 and max(attempts) == 2


def test_the_simulated_calls():
    sim = SimRay()

    class Echo:
        def latency(self, method, args):
            return args[0]

        def after(self, seconds, value):
            if value == "boom":
                raise ValueError("boom")
            return value

    with sim.install():
        import ray

        actor = ray.remote(Echo).options(num_cpus=1).remote()
        slow, fast = actor.after.remote(5.0, "slow"), actor.after.remote(1.0, "fast")  # one at a time: 5 s, then 6 s
        done, pending = ray.wait([fast, slow], num_returns=2, timeout=0)
        assert done == [] and pending == [fast, slow]
        done, _ = ray.wait([fast, slow], num_returns=1)
        assert done == [slow] and 5.0 <= sim.now < 6.0
        assert ray.get(fast) == "fast" and sim.now >= 6.0
        with pytest.raises(RayTaskError) as info:
            ray.get(actor.after.remote(0.5, "boom"))
        assert isinstance(info.value.cause, ValueError)
        hung = actor.after.remote(100.0, "late")
        with pytest.raises(TimeoutError):
            ray.get(hung, timeout=1.0)
        ray.kill(actor, no_restart=True)
        with pytest.raises(RayActorError):
            ray.get(hung)
        assert ray.get(ray.put(7)) == 7
    import sys

    assert "ray" not in sys.modules or sys.modules["ray"] is not ray  # the real module (if any) is back
