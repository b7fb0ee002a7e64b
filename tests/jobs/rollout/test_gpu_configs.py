"""The GPU example configs (jobs/configs/gpu_*.yaml): their dry runs print each engine's placement on
this CPU-only machine (no GPU, no model), and the plan's demand counts a multi-GPU engine's whole
placement group."""

from __future__ import annotations

import subprocess
import sys

import pytest
from twinkle_agentic.actors.worker import RolloutWorker
from twinkle_agentic.jobs.rollout.capacity import Capacity, check_schedulable, plan_demand
from twinkle_agentic.jobs.rollout.config import ConfigError, build_parser, resolve_config

from tests.support.paths import REPO_ROOT

CONFIGS = REPO_ROOT / "jobs" / "configs"


def dry_run(tmp_path, name: str) -> str:
    command = [sys.executable, "-m", "twinkle_agentic.cli", "rollout", "--config", str(CONFIGS / name),
               "--output", str(tmp_path / "out"), "--dry-run"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    return done.stdout


def test_the_tp8_dry_run_prints_the_placement_group_of_each_engine(tmp_path):
    out = dry_run(tmp_path, "gpu_70b_tp8.yaml")
    shard = "{'GPU': 1.0, 'accelerator_type:H100': 0.001}"
    assert (
        f"# each engine: 8 shard(s), placement group STRICT_PACK: bundle 0 {{'CPU': 8.0}} (the worker), "
        f"bundles 1-8 {shard} (one per shard)"
    ) in out
    assert "# 2 engine(s), each a Ray actor with {'num_cpus': 8, 'num_gpus': 0.0," in out
    assert "tensor_parallel_size: 8" in out and "# 42 trajectories from" in out


def test_the_7b_dry_run_gives_each_engine_one_gpu_and_no_group(tmp_path):
    out = dry_run(tmp_path, "gpu_7b.yaml")
    assert "# each engine: 1 shard(s), no placement group; the actor reserves {'num_cpus': 4, 'num_gpus': 1}" in out
    assert "# 8 engine(s)" in out and "model: Qwen/Qwen2.5-7B-Instruct" in out


def test_the_demand_of_tp8_engines_is_their_bundles_and_needs_a_node_of_eight_gpus(tmp_path):
    argv = ["--config", str(CONFIGS / "gpu_70b_tp8.yaml"), "--output", str(tmp_path / "out")]
    cfg = resolve_config(build_parser().parse_args(argv))
    demand = plan_demand(cfg, RolloutWorker.ray_options(cfg.engine_config()))
    assert demand.total() == {"CPU": 18.0, "GPU": 16.0, "accelerator_type:H100": pytest.approx(0.016)}
    eight = {"CPU": 64.0, "GPU": 8.0, "accelerator_type:H100": 1.0}
    cluster = Capacity({k: 2 * v for k, v in eight.items()}, {k: 2 * v for k, v in eight.items()}, eight)
    check_schedulable(cfg, demand, cluster, embedded=True)  # two 8-GPU nodes hold it
    four = {"CPU": 64.0, "GPU": 4.0, "accelerator_type:H100": 1.0}
    with pytest.raises(ConfigError, match="needs 8 GPU"):
        check_schedulable(cfg, demand, Capacity({k: 4 * v for k, v in four.items()}, {}, four), embedded=True)
