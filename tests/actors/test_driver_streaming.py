"""``RolloutFarm.run`` streams: it reads its input only as far as the workers need and checks ids within
the trajectories it holds. The real driver runs on the simulated Ray of ``bench/sim_ray.py`` (no
cluster); its failure handling on real Ray is tested in ``test_worker_and_driver.py``."""

from __future__ import annotations

import pytest
from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec
from twinkle_agentic.actors.config import FarmConfigError

from bench.farm_scale import SimWorker, prompts
from bench.sim_ray import SimRay


def farm(engines: int = 4, batch_size: int = 4, inflight: int = 2) -> RolloutFarm:
    options = FarmOptions(engines=engines, batch_size=batch_size, inflight_per_worker=inflight)
    return RolloutFarm(EngineConfig("simulated"), RolloutSpec(), options, worker_cls=SimWorker)


def test_the_input_is_read_only_as_far_as_the_workers_need():
    read = 0

    def counted(n):
        nonlocal read
        for trajectory in prompts(n):
            read += 1
            yield trajectory

    with SimRay().install():
        f = farm()
        window = (4 * 2 + 1) * 4  # every worker's inflight batches and one spare, of 4 trajectories
        most_ahead = 0
        back = 0
        for finished in f.run(counted(10_000)):
            back += len(finished.trajectories)
            most_ahead = max(most_ahead, read - back)
        f.shutdown()
    assert back == read == 10_000
    assert most_ahead <= window


def test_an_id_repeated_within_the_window_is_refused_and_one_reused_later_is_not():
    with SimRay().install():
        f = farm(engines=1, batch_size=2, inflight=1)
        early = [{"trajectory_id": i % 3, "messages": []} for i in range(4)]  # 0 1 2 0: held together
        with pytest.raises(FarmConfigError, match="appears twice among the trajectories the farm holds"):
            list(f.run(early))
        assert f.handles == [None]  # refused before any worker started
        late = [{"trajectory_id": i % 50, "messages": []} for i in range(100)]  # 0..49 are back before 0 comes again
        assert sum(len(b.trajectories) for b in f.run(late)) == 100
        f.shutdown()


def test_a_bad_trajectory_past_the_first_window_raises_from_the_loop_reading_run():
    def items():
        yield from prompts(200)
        yield ["not", "a", "dict"]

    with SimRay().install():
        f = farm()
        got = 0
        with pytest.raises(TypeError, match="trajectory 200 must be a dict"):
            for finished in f.run(items()):
                got += len(finished.trajectories)
        assert 0 < got < 200
        f.shutdown()
