"""The rollout plan's resource demand against the cluster: refused in seconds on an embedded cluster
that can never hold it, a warning on a cluster that may grow, an embedded cluster sized to the plan."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest
import yaml
from twinkle_agentic.jobs.rollout.capacity import (
    Capacity,
    Demand,
    Request,
    check_schedulable,
    plan_demand,
    replicas_at_start,
)
from twinkle_agentic.jobs.rollout.config import ConfigError, build_parser, resolve_config

from tests.support.paths import REPO_ROOT

DEMO_CONFIG = REPO_ROOT / "jobs" / "configs" / "demo_rollout.yaml"
ENGINE_OPTIONS = {"num_cpus": 1.0, "num_gpus": 0.0, "runtime_env": {}, "max_restarts": 0}


def demo_config(tmp_path, *flags: str):
    argv = ["--config", str(DEMO_CONFIG), "--output", str(tmp_path / "out"), *flags]
    return resolve_config(build_parser().parse_args(argv))


def capacity(cpus: float, gpus: float = 0.0, free: float | None = None) -> Capacity:
    total = {"CPU": cpus, "GPU": gpus}
    available = {"CPU": cpus if free is None else free, "GPU": gpus}
    return Capacity(total, available, dict(total))


def test_the_demo_plan_needs_two_engines_and_two_quarter_cpu_replicas(tmp_path):
    demand = plan_demand(demo_config(tmp_path), ENGINE_OPTIONS)
    assert demand.total() == {"CPU": 2.5}
    assert demand.cpus() == 3
    assert demand.breakdown("CPU") == "engines 2 x 1, demo_tools replicas 1 x 0.25, guess_number replicas 1 x 0.25"


def test_on_two_cpus_an_embedded_cluster_refuses_the_plan_with_the_fix(tmp_path):
    cfg = demo_config(tmp_path, "--num-cpus", "2")
    demand = plan_demand(cfg, ENGINE_OPTIONS)
    with pytest.raises(ConfigError) as refused:
        check_schedulable(cfg, demand, capacity(2), embedded=True)
    message = str(refused.value)
    assert "needs 2.5 CPU" in message and "the cluster has 2 CPU" in message
    assert "--num-cpus 3" in message and "--engines 1" in message
    check_schedulable(cfg, demand, capacity(3), embedded=True)  # fits: nothing raised


def test_a_cluster_given_by_address_may_grow_so_a_shortfall_is_a_warning(tmp_path, caplog):
    cfg = demo_config(tmp_path)
    demand = plan_demand(cfg, ENGINE_OPTIONS)
    with caplog.at_level(logging.WARNING, logger="twinkle_agentic.jobs.rollout.capacity"):
        check_schedulable(cfg, demand, capacity(2), embedded=False)
        check_schedulable(cfg, demand, capacity(8, free=1), embedded=False)
    assert "waits for the autoscaler" in caplog.text and "other work on the cluster holds" in caplog.text


def test_gpu_engines_on_a_cpu_only_embedded_cluster_name_the_cpu_setting(tmp_path):
    cfg = demo_config(tmp_path)
    demand = plan_demand(cfg, {**ENGINE_OPTIONS, "num_gpus": 1.0})
    with pytest.raises(ConfigError, match=r"needs 2 GPU .*engine\.num_gpus: 0"):
        check_schedulable(cfg, demand, capacity(8), embedded=True)


def test_one_actor_larger_than_every_node_is_refused_on_an_embedded_cluster(tmp_path):
    cfg = demo_config(tmp_path)
    demand = Demand((Request("engines", 1, {"CPU": 4.0}),))
    nodes = Capacity({"CPU": 6.0}, {"CPU": 6.0}, {"CPU": 3.0})
    with pytest.raises(ConfigError, match="more than any node has"):
        check_schedulable(cfg, demand, nodes, embedded=True)


@pytest.mark.parametrize(
    "deployment, replicas",
    [
        ({}, 1),
        ({"num_replicas": 3}, 3),
        ({"num_replicas": "auto"}, 1),
        ({"autoscaling_config": {"min_replicas": 2, "max_replicas": 8}}, 2),
        ({"autoscaling_config": {"min_replicas": 0, "initial_replicas": 4}}, 4),
    ],
)
def test_replicas_serve_starts_with(deployment, replicas):
    assert replicas_at_start(deployment) == replicas


def test_serve_replicas_without_num_cpus_reserve_one_cpu_and_running_servers_none(tmp_path):
    data = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    data["prompts"] = str((DEMO_CONFIG.parent / data["prompts"]).resolve())
    data["tools"][0]["deployment"] = {"num_replicas": 2}
    data["envs"][0] = {"name": "guess_number", "url": "http://127.0.0.1:9/guess_number"}
    config = tmp_path / "rollout.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    cfg = resolve_config(build_parser().parse_args(["--config", str(config), "--output", str(tmp_path / "o")]))
    assert plan_demand(cfg, ENGINE_OPTIONS).total() == {"CPU": 4.0}  # 2 engines + 2 replicas x 1


@pytest.mark.integration
def test_the_readme_rollout_command_on_a_too_small_embedded_cluster_fails_in_seconds(tmp_path):
    """Before the check, the engines took both CPUs and the command waited minutes for Serve."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    argv = [sys.executable, "-m", "twinkle_agentic.cli", "rollout", "--config", str(DEMO_CONFIG)]
    argv += ["--output", str(tmp_path / "rollout"), "--num-cpus", "2", "--no-progress"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    seconds = time.monotonic() - start
    assert done.returncode == 2, done.stderr[-3000:]
    assert "cannot be scheduled" in done.stderr and "--num-cpus 3" in done.stderr, done.stderr[-3000:]
    assert seconds < 90, seconds  # Ray's start on a busy 2-core machine; no engine or replica is started
