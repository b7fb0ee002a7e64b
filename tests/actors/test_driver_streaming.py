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


def test_a_live_feed_run_takes_trajectories_put_while_others_are_in_flight():
    from twinkle_agentic.rollout.feed import LiveFeed

    feed = LiveFeed(poll_s=1.0)  # virtual seconds: SimWorker batches take ~20
    feed.put(prompts(8))  # two batches of 4
    back: list[int] = []
    first_lot_left_at_put = None
    with SimRay().install():
        f = farm(engines=2, batch_size=4, inflight=2)
        for batch in f.run(feed):
            back += [t["trajectory_id"] for t in batch.trajectories]
            if back and first_lot_left_at_put is None:  # the first batch is back, the second in flight
                first_lot_left_at_put = 8 - len(back)
                feed.put({"trajectory_id": 100 + i, "messages": []} for i in range(6))
            if len(back) == 14:
                feed.close()
        f.shutdown()
    assert first_lot_left_at_put == 4  # put while a batch of the first lot was still in flight
    assert sorted(back) == [*range(8), *range(100, 106)]  # each once, in the one run


def test_a_live_feed_run_yields_an_empty_batch_when_woken_and_waits_for_input():
    import threading

    from twinkle_agentic.rollout.feed import LiveFeed

    feed = LiveFeed(poll_s=1.0)
    feed.wake()
    batches = []
    with SimRay().install():
        f = farm(engines=1, batch_size=4, inflight=1)
        run = f.run(feed)
        batches.append(next(run))  # nothing put yet: the wake-up comes back at once
        assert batches[0].trajectories == [] and batches[0].worker is None and batches[0].attempts == 0

        def later():  # another thread: the run waits for it without spinning
            feed.put(prompts(3))
            feed.close()

        threading.Timer(0.1, later).start()
        batches += list(run)
        f.shutdown()
    assert sorted(t["trajectory_id"] for b in batches for t in b.trajectories) == [0, 1, 2]
    assert len(batches) == 2  # a partial batch of 3, not held back for a fourth


def test_a_closed_empty_live_feed_starts_nothing_and_a_closed_feed_refuses_input():
    from twinkle_agentic.errors import ConfigError
    from twinkle_agentic.rollout.feed import LiveFeed

    feed = LiveFeed()
    feed.close()
    with SimRay().install():
        f = farm(engines=1)
        assert list(f.run(feed)) == []
        assert f.handles == [None]
    with pytest.raises(RuntimeError, match="the feed is closed"):
        feed.put(prompts(1))
    with pytest.raises(ConfigError, match="poll_s must be a number of seconds > 0"):
        LiveFeed(poll_s=0)
