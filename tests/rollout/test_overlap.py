"""Overlapped rollout (``twinkle_agentic.rollout.overlap``) on a fake farm in the same process: step
order, the gate and the staleness bound (a stale group is never handed over; counted; regenerated or
dropped), the one-slot weight mailbox, errors raised in the trainer's thread, shutdown. No cluster."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from twinkle_agentic.errors import ConfigError
from twinkle_agentic.rollout.groups import GroupConfig
from twinkle_agentic.rollout.overlap import OverlappedRollout, group_version, oldest_version, snapshot

GROUPS, SIZE = 3, 2


def make_items(step: int) -> list[dict]:
    return [
        {"trajectory_id": f"{step}-{g}/s{k}", "group_id": f"{step}-{g}", "group_size": SIZE, "sample": k}
        for g in range(GROUPS)
        for k in range(SIZE)
    ]


class FakeFarm:
    """A farm in one process: ``run`` reads a ``LiveFeed`` as ``RolloutFarm.run`` does (what has been
    put, an empty batch after a wake-up, the end once the feed is closed) and yields batches of up to
    ``batch_size`` (``delay`` seconds each), each trajectory stamped with the version it ran under;
    ``stamp`` overrides that version per trajectory on its first run (a worker that served old
    weights); ``stuck`` stamps version 0 always; ``fail`` names trajectory ids that come back failed
    with no tokens. ``hold`` stops the whole farm on a group until released; ``park`` keeps only that
    group's batch in flight while the farm goes on with others. Records the threads that touched it,
    its runs, ``(step, version)`` whenever a step's items were taken from the feed, and the events
    ``("take" | "back", group id)``."""

    def __init__(self, batch_size: int = 2, delay: float = 0.0, stamp: dict | None = None, stuck: bool = False,
                 fail: set | None = None):  # fmt: skip
        self.policy_version = 0
        self.batch_size, self.delay, self.stuck = batch_size, delay, stuck
        self.stamp = dict(stamp or {})
        self.fail = set(fail or ())
        self.updates: list[tuple[int, object]] = []
        self.on_update: list[str | None] = []
        self.ran: list[str] = []
        self.threads: set[int] = set()
        self.hold: dict[str, threading.Event] = {}  # group id -> released when set (the run waits)
        self.holding = threading.Event()  # set when a run waits on a hold
        self.park: dict[str, threading.Event] = {}  # group id -> its batch comes back once set
        self.runs = 0
        self.taken: list[tuple[int, int]] = []  # (step, the farm's version) as items were taken
        self.events: list[tuple[str, str]] = []

    def run(self, feed):
        self.threads.add(threading.get_ident())
        self.runs += 1
        parked: list[tuple[threading.Event, list]] = []
        backlog: list[dict] = []
        while True:
            for entry in [entry for entry in parked if entry[0].is_set()]:
                parked.remove(entry)
                yield self._back(entry[1])
            if feed.take_wake():
                yield SimpleNamespace(trajectories=[])
            new = feed.take(1 << 20)  # everything put so far, as the driver's queue takes it
            for step in dict.fromkeys(int(item["group_id"].split("-")[0]) for item in new):
                self.taken.append((step, self.policy_version))
            self.events += [("take", item["group_id"]) for item in new]
            backlog += new
            batch, backlog = backlog[: self.batch_size], backlog[self.batch_size :]
            if not batch:
                if feed.exhausted and not parked:
                    return
                feed.wait(0.01)
                continue
            park = next((self.park[i["group_id"]] for i in batch if i["group_id"] in self.park), None)
            if park is not None:
                parked.append((park, [self._finish(item) for item in batch]))  # stamped as it starts
                continue
            for item in batch:
                event = self.hold.get(item["group_id"])
                if event is not None:
                    self.holding.set()
                    assert event.wait(5), "held too long"
            time.sleep(self.delay)
            yield self._back([self._finish(item) for item in batch])

    def _back(self, trajectories: list) -> SimpleNamespace:
        self.events += [("back", t["group_id"]) for t in trajectories]
        return SimpleNamespace(trajectories=trajectories)

    def steps_taken(self) -> list[int]:
        """Each step once, in the order the farm first took it."""
        return list(dict.fromkeys(step for step, _ in self.taken))

    def _finish(self, item: dict) -> dict:
        self.ran.append(item["trajectory_id"])
        if item["trajectory_id"] in self.fail:
            return {**item, "stop_reason": "error", "error": "engine died", "policy_version": None,
                    "policy_versions": [], "reward": None}  # fmt: skip
        version = 0 if self.stuck else self.stamp.pop(item["trajectory_id"], self.policy_version)
        return {**item, "stop_reason": "stop", "reward": float(item["sample"]), "policy_version": version,
                "policy_versions": [{"version": version, "start": 1, "end": 2}]}  # fmt: skip

    def update_weights(self, weights, *, version=None, on_update=None):
        self.threads.add(threading.get_ident())
        self.on_update.append(on_update)
        self.policy_version = version if version is not None else self.policy_version + 1
        self.updates.append((self.policy_version, weights))
        return self.policy_version


def ids(step) -> list[str]:
    return [group[0]["group_id"] for group in step.groups]


def train(rollout: OverlappedRollout, steps: int, train_s: float = 0.0) -> list:
    out = []
    for k in range(steps):
        step = rollout.next_step()
        out.append(step)
        time.sleep(train_s)
        rollout.finish_step({"w": k + 1})
    return out


def test_synchronous_at_staleness_zero_in_step_order_on_one_thread():
    farm = FakeFarm()
    with OverlappedRollout(farm, make_items, max_staleness=0, steps=4) as rollout:
        steps = train(rollout, 4)
    assert [s.step for s in steps] == [0, 1, 2, 3]
    for k, step in enumerate(steps):
        assert sorted(ids(step)) == [f"{k}-{g}" for g in range(GROUPS)]
        assert step.trainer_version == k and step.oldest_version == k and step.staleness == 0
        assert all(m["advantage"] is not None for g in step.groups for m in g)
    assert [v for v, _ in farm.updates] == [1, 2, 3, 4]  # the last weights applied at close
    assert farm.policy_version == rollout.policy_version == 4
    assert rollout.stale_groups == 0
    assert len(farm.threads) == 1 and threading.get_ident() not in farm.threads


def test_one_step_ahead_at_staleness_one_and_never_further():
    started: dict[int, int] = {}
    finished = [0]  # trainer steps ended, counted just before finish_step

    def items(step):
        started[step] = finished[0]
        return make_items(step)

    farm = FakeFarm(delay=0.01)
    with OverlappedRollout(farm, items, max_staleness=1, steps=5) as rollout:
        out = []
        for k in range(5):
            out.append(rollout.next_step())
            deadline = time.monotonic() + 2
            while k + 1 < 5 and k + 1 not in started and time.monotonic() < deadline:
                time.sleep(0.005)
            assert k + 1 == 5 or k + 1 in started  # the next step started while this one trains
            finished[0] += 1
            rollout.finish_step({"w": k + 1})
    assert all(started[j] >= j - 1 for j in started)  # the gate: never two steps ahead
    assert all(step.staleness <= 1 for step in out)
    assert max(step.staleness for step in out) == 1
    assert [s.step for s in out] == list(range(5))
    assert all(len(s.groups) == GROUPS for s in out)


def test_overlap_beats_synchronous_wall_time():
    def timed(staleness):
        start = time.perf_counter()
        with OverlappedRollout(
            FakeFarm(batch_size=6, delay=0.05), make_items, max_staleness=staleness, steps=4
        ) as r:
            train(r, 4, train_s=0.05)
        return time.perf_counter() - start

    assert timed(1) < 0.8 * timed(0)


def test_one_farm_run_takes_each_step_as_the_gate_lets_it_start():
    farm = FakeFarm(delay=0.01)
    with OverlappedRollout(farm, make_items, max_staleness=2, steps=5) as rollout:
        assert rollout.next_step().step == 0
        time.sleep(0.2)  # the farm is idle, waiting on the gate: step 3 needs step 0 finished
        assert farm.steps_taken() == [0, 1, 2]  # steps 0-2 were all allowed at the start
        rollout.finish_step({"w": 1})
        out = train(rollout, 4)
    assert farm.runs == 1  # one run for the whole training
    assert farm.steps_taken() == [0, 1, 2, 3, 4]
    assert [s.step for s in out] == [1, 2, 3, 4]
    assert all(sorted(ids(s)) == [f"{s.step}-{g}" for g in range(GROUPS)] for s in out)
    assert all(s.staleness <= 2 for s in out)


def test_a_step_is_handed_over_while_the_run_still_rolls_out_a_later_step():
    farm = FakeFarm()
    farm.hold["1-2"] = threading.Event()  # step 1's last group waits until released
    with OverlappedRollout(farm, make_items, max_staleness=1, steps=2) as rollout:
        assert farm.holding.wait(2)
        first = rollout.next_step()  # does not wait for step 1
        assert farm.steps_taken() == [0, 1] and sorted(ids(first)) == ["0-0", "0-1", "0-2"]
        rollout.finish_step({"w": 1})
        farm.hold["1-2"].set()
        second = rollout.next_step()
        rollout.finish_step({"w": 2})
    assert sorted(ids(second)) == ["1-0", "1-1", "1-2"]


def test_the_next_step_starts_on_the_new_weights_while_the_slow_tail_of_the_last_is_in_flight():
    farm = FakeFarm()
    farm.park["1-2"] = threading.Event()  # step 1's last group is slow; the farm works on meanwhile
    with OverlappedRollout(farm, make_items, max_staleness=1, steps=3, on_update="abort_and_resume") as rollout:
        first = rollout.next_step()
        rollout.finish_step({"w": 1})  # the gate opens step 2 while 1-2 is in flight
        deadline = time.monotonic() + 2
        while ("back", "2-2") not in farm.events and time.monotonic() < deadline:
            time.sleep(0.005)
        assert ("back", "2-2") in farm.events and ("back", "1-2") not in farm.events
        time.sleep(0.2)
        farm.park["1-2"].set()
        out = [first, *train(rollout, 2)]
    assert farm.runs == 1 and farm.steps_taken() == [0, 1, 2]
    assert (2, 1) in farm.taken  # step 2 was taken after the weights of version 1 were loaded
    assert farm.on_update == ["abort_and_resume"] * 3
    assert out[2].queued_s < 0.1  # put into the run at once, not after 1-2 came back
    assert out[1].rollout_s >= 0.2 and out[2].rollout_s < 0.2
    assert [s.staleness for s in out] == [0, 1, 1]


def test_run_steps_puts_steps_into_the_run_k_at_a_time():
    farm = FakeFarm(delay=0.01)
    with OverlappedRollout(farm, make_items, max_staleness=1, steps=5, run_steps=2) as rollout:
        out = train(rollout, 5, train_s=0.02)
    assert farm.runs == 1
    assert farm.taken == [(0, 0), (1, 0), (2, 2), (3, 2), (4, 3)]  # put in pairs; step 4 alone as soon as allowed
    assert [s.oldest_version for s in out][::2] == [0, 2, 3] and all(s.staleness <= 1 for s in out)
    with pytest.raises(ConfigError, match="run_steps must be an integer from 1 to max_staleness"):
        OverlappedRollout(FakeFarm(), make_items, max_staleness=1, run_steps=3)


def test_queued_s_is_how_long_an_open_step_waited_to_be_put_into_the_run():
    farm = FakeFarm()
    farm.hold["1-2"] = threading.Event()  # the whole farm stops on step 1's last group
    with OverlappedRollout(farm, make_items, max_staleness=1, steps=3) as rollout:
        first = rollout.next_step()
        assert farm.holding.wait(2)
        rollout.finish_step({"w": 1})  # the gate opens step 2; the thread is stuck in the farm
        time.sleep(0.3)
        farm.hold["1-2"].set()
        out = [first, *train(rollout, 2)]
    assert out[0].queued_s < 0.1 and out[1].queued_s < 0.1
    assert out[2].queued_s >= 0.3


def test_group_ids_shared_by_two_steps_are_refused():
    def items(step):
        return make_items(0)  # every step reuses step 0's group ids

    rollout = OverlappedRollout(FakeFarm(), items, max_staleness=1, steps=2)
    with pytest.raises(ValueError, match="group id '0-0' is used by steps 0 and 1"):
        rollout.next_step()
    rollout.close()


def test_retried_members_are_counted_on_their_step():
    farm = FakeFarm(fail={"1-0/s1"})  # fails once: its retry runs under another id, in the same run
    with OverlappedRollout(farm, make_items, max_staleness=1, steps=2) as rollout:
        out = train(rollout, 2)
    assert farm.runs == 1 and farm.ran.count("1-0/s1/retry1") == 1
    assert (out[0].retried_members, out[1].retried_members) == (0, 1)
    assert out[1].failed_groups == 0


def test_a_stale_group_is_regenerated_and_handed_over_fresh():
    farm = FakeFarm(stamp={"2-1/s1": 0})  # a worker served version 0 for one member of group 2-1
    with OverlappedRollout(farm, make_items, max_staleness=0, steps=3) as rollout:
        steps = train(rollout, 3)
    step = steps[2]
    assert sorted(ids(step)) == ["2-0", "2-1", "2-2"]
    assert step.stale_groups == 1 and step.regenerated_groups == 1 and step.dropped_groups == 0
    assert group_version(next(g for g in step.groups if g[0]["group_id"] == "2-1")) == 2
    assert farm.ran.count("2-1/s0") == 2 and farm.ran.count("2-1/s1") == 2
    assert (rollout.stale_groups, rollout.regenerated_groups, rollout.dropped_groups) == (1, 1, 0)


def test_a_stale_group_is_dropped_and_counted():
    farm = FakeFarm(stamp={"1-0/s0": 0})
    with OverlappedRollout(farm, make_items, max_staleness=0, on_stale="drop", steps=2) as rollout:
        steps = train(rollout, 2)
    assert sorted(ids(steps[1])) == ["1-1", "1-2"]
    assert steps[1].stale_groups == steps[1].dropped_groups == 1
    assert len(steps[1].groups) + steps[1].dropped_groups == GROUPS
    assert farm.ran.count("1-0/s0") == 1
    assert (rollout.stale_groups, rollout.dropped_groups) == (1, 1)


def test_staleness_counts_the_oldest_token_of_any_member():
    farm = FakeFarm(stamp={"2-2/s0": 1})  # 2 - 1 = 1: within max_staleness=1, beyond 0
    with OverlappedRollout(farm, make_items, max_staleness=1, steps=3) as rollout:
        steps = train(rollout, 3)
    assert steps[2].stale_groups == 0 and "2-2" in ids(steps[2])


def test_a_farm_that_never_serves_the_posted_weights():
    with OverlappedRollout(
        FakeFarm(stuck=True), make_items, max_staleness=0, on_stale="drop", steps=2
    ) as rollout:
        steps = train(rollout, 2)
    assert steps[1].groups == [] and steps[1].dropped_groups == GROUPS
    rollout = OverlappedRollout(FakeFarm(stuck=True), make_items, max_staleness=0, steps=2)
    rollout.next_step()
    rollout.finish_step({"w": 1})
    with pytest.raises(RuntimeError, match="does not serve the posted weights"):
        rollout.next_step()
    rollout.close()  # the error was raised already: close does not raise it again


def test_the_mailbox_keeps_only_the_newest_weights():
    farm = FakeFarm()
    farm.hold["3-0"] = threading.Event()  # step 3's first batch waits until released
    with OverlappedRollout(farm, make_items, max_staleness=3, steps=4) as rollout:
        assert farm.holding.wait(2)  # steps 0-2 rolled out, step 3 waits
        for k in range(3):
            rollout.next_step()
            rollout.finish_step({"w": k + 1})
        farm.hold["3-0"].set()
        last = rollout.next_step()
    assert farm.updates == [(3, {"w": 3})]  # posts 1 and 2 were replaced before the farm could load them
    assert last.oldest_version == 0 and last.staleness == 3


def test_posted_tensors_are_copied():
    torch = pytest.importorskip("torch")
    weight = torch.zeros(2)
    farm = FakeFarm()
    with OverlappedRollout(farm, make_items, max_staleness=0, steps=1) as rollout:
        rollout.next_step()
        rollout.finish_step({"w": weight})
        weight += 1  # the next optimizer step changes the parameter in place
    assert farm.updates[0][1]["w"].tolist() == [0.0, 0.0]
    assert snapshot("ckpt/dir") == "ckpt/dir" and snapshot([("w", 1)]) == [("w", 1)]


def test_errors_of_the_background_thread_are_raised_in_the_trainer():
    def items(step):
        if step == 1:
            raise ValueError("no prompts for step 1")
        return make_items(step)

    rollout = OverlappedRollout(FakeFarm(), items, max_staleness=1, steps=3)
    rollout.next_step()
    with pytest.raises(ValueError, match="no prompts for step 1"):  # by whichever call comes first
        rollout.finish_step()
        rollout.next_step()
    with pytest.raises(RuntimeError, match="stopped on an error"):
        rollout.next_step()
    rollout.close()

    class BadWeights(FakeFarm):
        def update_weights(self, weights, *, version=None):
            raise KeyError("lm_head.weight missing")

    rollout = OverlappedRollout(BadWeights(), make_items, max_staleness=0, steps=1)
    rollout.next_step()
    rollout.finish_step({"w": 1})  # the last step: the error shows at close
    with pytest.raises(KeyError, match="lm_head"):
        rollout.close()


def test_close_stops_after_the_current_batch_and_applies_the_last_weights():
    farm = FakeFarm(batch_size=1, delay=0.05)
    rollout = OverlappedRollout(farm, make_items, max_staleness=2)  # no step limit
    rollout.next_step()
    rollout.finish_step({"w": 1})
    start = time.perf_counter()
    rollout.close()
    assert time.perf_counter() - start < 0.5
    assert not rollout._thread.is_alive()
    assert farm.policy_version == 1
    with pytest.raises(RuntimeError, match="closed"):
        rollout.next_step()


def test_failed_groups_are_handed_over_without_versions():
    farm = FakeFarm(fail={"0-1/s0", "0-1/s1"})
    with OverlappedRollout(
        farm, make_items, max_staleness=0, steps=1, groups=GroupConfig(max_member_retries=0)
    ) as r:
        step = r.next_step()
        r.finish_step()
    assert step.failed_groups == 1 and len(step.groups) == GROUPS
    assert step.oldest_version == 0 and step.stale_groups == 0


def test_a_group_without_versions_is_refused():
    class NoVersions(FakeFarm):
        def _finish(self, item):
            return {**super()._finish(item), "policy_version": None, "policy_versions": None}

    rollout = OverlappedRollout(NoVersions(), make_items, max_staleness=0, steps=1)
    with pytest.raises(RuntimeError, match="carries no policy_version"):
        rollout.next_step()
    rollout.close()


def test_protocol_and_config_errors():
    for kwargs, match in [({"max_staleness": -1}, "max_staleness"), ({"on_stale": "keep"}, "on_stale"),
                          ({"steps": 0}, "steps"), ({"on_update": "later"}, "on_update must be one of")]:  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            OverlappedRollout(FakeFarm(), make_items, **kwargs)
    with OverlappedRollout(FakeFarm(), make_items, max_staleness=0, steps=1) as rollout:
        with pytest.raises(RuntimeError, match="none is open"):
            rollout.finish_step()
        rollout.next_step()
        with pytest.raises(RuntimeError, match="finish_step"):
            rollout.next_step()
        rollout.finish_step()
        with pytest.raises(RuntimeError, match="all 1 steps"):
            rollout.next_step()


def test_oldest_version():
    assert oldest_version({"policy_version": 3, "policy_versions": [{"version": 2}, {"version": 3}]}) == 2
    assert oldest_version({"policy_version": 3, "policy_versions": []}) == 3
    assert oldest_version({"policy_version": None}) is None
    assert group_version([{"policy_version": None}, {"policy_version": 4}]) == 4
    assert group_version([{"policy_version": None}]) is None


def test_on_a_farm_of_ray_workers_no_group_is_handed_over_staler_than_the_bound(ray_local, tiny_model_path):
    """A real ``RolloutFarm`` (Ray actors, the scripted engine of ``tests.support.farm_fakes``, which
    stamps the version each trajectory ended under): the tiny model's weights posted every step are
    loaded by the background thread; every group handed over is within one version."""
    from safetensors.torch import load_file
    from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec

    state = load_file(f"{tiny_model_path}/model.safetensors")
    engine = EngineConfig(tiny_model_path, mode="tests.support.farm_fakes:ScriptedMode", num_cpus=0.1)
    farm = RolloutFarm(engine, RolloutSpec(), FarmOptions(engines=2, batch_size=2))

    def items(step):
        return [{**item, "messages": [{"role": "user", "content": item["trajectory_id"]}], "hang_s": 0.05}
                for item in make_items(step)]  # fmt: skip

    try:
        farm.start()
        with OverlappedRollout(farm, items, max_staleness=1, steps=4) as rollout:
            steps = []
            for _ in range(4):
                steps.append(rollout.next_step())
                rollout.finish_step(state)
        assert farm.policy_version == rollout.policy_version == 4
    finally:
        farm.shutdown()
    assert [len(step.groups) for step in steps] == [GROUPS] * 4
    assert all(0 <= step.staleness <= 1 and step.trainer_version == k for k, step in enumerate(steps))
    assert rollout.stale_groups == 0
