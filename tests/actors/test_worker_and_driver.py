"""The worker's per-trajectory failure isolation, in-process, and the driver's failure handling on a
real local Ray cluster, with a scripted engine (``tests.support.farm_fakes.ScriptedMode``): processes that exit,
batches that hang, workers that cannot start. Everything but the engine is real."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from twinkle_agentic.actors import (
    EngineConfig,
    FarmOptions,
    RolloutFarm,
    RolloutSpec,
    RolloutWorker,
    ToolCatalog,
)
from twinkle_agentic.actors.driver import FarmStartError
from twinkle_agentic.actors.worker import WorkerUnhealthy

from twinkle_agentic.demo.tools import demo_tools

SCRIPTED = EngineConfig("scripted", mode="tests.support.farm_fakes:ScriptedMode", num_cpus=0.1)
CALC = {"function": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}


def trajectories(n: int, **special: dict) -> list[dict]:
    """``n`` trajectories ``t0..``; ``special`` maps an id to extra keys for it."""
    return [
        {"trajectory_id": f"t{i}", "messages": [{"role": "user", "content": str(i)}], **special.get(f"t{i}", {})}
        for i in range(n)
    ]


# -- worker, in-process ------------------------------------------------------------------------------


@pytest.fixture
def worker():
    return RolloutWorker(SCRIPTED, RolloutSpec(catalog=ToolCatalog({"demo": demo_tools()})))


def test_worker_isolates_failures_to_the_trajectories_that_fail(worker):
    batch = trajectories(4, t1={"explode": True}, t2={"toolsets": ["nope"]}, t3={"call": CALC})
    result = worker.run_batch(batch)
    by_id = {t["trajectory_id"]: t for t in result.trajectories}
    assert [t["trajectory_id"] for t in result.trajectories] == ["t0", "t1", "t2", "t3"]
    assert by_id["t0"]["stop_reason"] == "stop"
    assert by_id["t1"]["stop_reason"] == "error" and by_id["t1"]["error"] == "RuntimeError: cannot roll out t1"
    assert by_id["t2"]["stop_reason"] == "error" and by_id["t2"]["error"].startswith("ToolSetup SelectionError: unknown toolset")
    assert by_id["t3"]["messages"][-1]["content"] == "42"  # retried alone after the batch failed, tools reopened
    assert by_id["t1"]["truncated"] and by_id["t1"]["input_ids"] == [] and by_id["t1"]["messages"] == batch[1]["messages"]
    assert result.generated_tokens == 2 * 2
    calls = result.activity.tool_calls
    assert [c.tool for c in calls] == ["calculator"] and calls[0].ok
    assert result.activity.active_s > 0 and result.activity.engine_busy_s > 0
    assert worker.generate(trajectories(1))[0]["stop_reason"] == "stop"  # the worker lives on


def test_a_broken_engine_makes_the_worker_ask_for_replacement(worker):
    with pytest.raises(WorkerUnhealthy, match="EngineDeadError"):
        worker.run_batch(trajectories(2, t0={"kill_engine": True}))


def test_worker_ready_reports_the_engine_and_the_process(worker):
    info = worker.ready()
    assert info["mode"] == "tests.support.farm_fakes:ScriptedMode" and info["device"] == "none" and info["pid"] > 0


# -- driver, on Ray ----------------------------------------------------------------------------------


def run_all(farm: RolloutFarm, batch: list[dict]) -> list[dict]:
    return [t for finished in farm.run(batch) for t in finished.trajectories]


@pytest.mark.integration
def test_a_trajectory_that_crashes_workers_is_isolated_and_given_up_alone(ray_local):
    farm = RolloutFarm(
        SCRIPTED, RolloutSpec(), FarmOptions(engines=2, batch_size=2, max_batch_attempts=3, max_worker_restarts=3)
    )
    try:
        results = run_all(farm, trajectories(10, t1={"crash": True}))
    finally:
        farm.shutdown()
    assert Counter(t["trajectory_id"] for t in results) == Counter(f"t{i}" for i in range(10))
    failed = [t for t in results if t["stop_reason"] == "error"]
    assert [t["trajectory_id"] for t in failed] == ["t1"]  # the batch was halved until t1 stood alone
    assert failed[0]["error"].startswith("RolloutFarmError: gave up after 3 failures") and failed[0]["worker"] is None
    assert farm.given_up == 1 and farm.restarts >= 3  # bystanders of a death ran alone; only t1 was charged


@pytest.mark.integration
def test_when_every_worker_is_used_up_the_rest_comes_back_as_errors(ray_local):
    farm = RolloutFarm(SCRIPTED, RolloutSpec(), FarmOptions(engines=1, batch_size=2, max_worker_restarts=0))
    try:
        results = run_all(farm, trajectories(6, t0={"crash": True}))
    finally:
        farm.shutdown()
    assert Counter(t["trajectory_id"] for t in results) == Counter(f"t{i}" for i in range(6))
    assert all(t["stop_reason"] == "error" and "no rollout worker is left" in t["error"] for t in results if t["trajectory_id"] not in ("t0", "t1"))


@pytest.mark.integration
def test_a_hung_batch_is_cut_by_batch_timeout_and_the_worker_replaced(ray_local):
    farm = RolloutFarm(
        SCRIPTED, RolloutSpec(), FarmOptions(engines=1, batch_size=2, batch_timeout_s=1.5, max_batch_attempts=1, inflight_per_worker=1)
    )
    start = time.monotonic()
    try:
        results = run_all(farm, trajectories(4, t3={"hang_s": 120}))
    finally:
        farm.shutdown()
    assert time.monotonic() - start < 60
    by_id = {t["trajectory_id"]: t for t in results}
    assert len(results) == 4 and by_id["t0"]["stop_reason"] == "stop" and by_id["t1"]["stop_reason"] == "stop"
    assert by_id["t3"]["stop_reason"] == "error" and "batch_timeout_s=1.5" in by_id["t3"]["error"]
    assert farm.restarts == 1


@pytest.mark.integration
def test_a_worker_that_cannot_start_fails_the_start_with_its_reason(ray_local):
    broken = EngineConfig("no-such-model", mode="tests.support.farm_fakes:BrokenMode", num_cpus=0.1)
    farm = RolloutFarm(broken, RolloutSpec(), FarmOptions(engines=1, max_worker_restarts=1))
    try:
        with pytest.raises(FarmStartError, match="cannot load model 'no-such-model'"):
            farm.start()
    finally:
        farm.shutdown()
    assert farm.restarts == 1


def test_trajectory_ids_are_required_and_unique():
    farm = RolloutFarm(SCRIPTED, RolloutSpec())
    with pytest.raises(ValueError, match="no 'trajectory_id'"):
        list(farm.run([{"messages": []}]))
    with pytest.raises(ValueError, match="appears twice"):
        list(farm.run(trajectories(2) + trajectories(1)))


@pytest.mark.integration
def test_a_run_abandoned_by_its_caller_does_not_leak_into_the_next(ray_local):
    farm = RolloutFarm(SCRIPTED, RolloutSpec(), FarmOptions(engines=1, batch_size=2, inflight_per_worker=2))
    try:
        first = farm.run(trajectories(8, t2={"hang_s": 1}))
        next(first)
        first.close()  # e.g. the job's consumer failed: batches t2.. are still on the worker
        second = [{**t, "trajectory_id": f"again-{t['trajectory_id']}"} for t in trajectories(4)]
        results = run_all(farm, second)
    finally:
        farm.shutdown()
    assert sorted(t["trajectory_id"] for t in results) == sorted(t["trajectory_id"] for t in second)
    assert farm.restarts == 0  # the busy worker was started afresh, not counted as a failure
