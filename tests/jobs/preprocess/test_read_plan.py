"""How the job's read is planned from the cluster's facts (CPUs now, the autoscaler's bound, the
user's cap), and that the plan is what reaches Ray Data's read (no cluster started)."""

from __future__ import annotations

import sys

import pytest
from twinkle_agentic.jobs.preprocess import job, read_plan
from twinkle_agentic.jobs.preprocess.config import PreprocessConfig
from twinkle_agentic.jobs.preprocess.read_plan import BYTES_PER_READ_CPU, ReadPlan, plan_read
from twinkle_agentic.jobs.preprocess.steps import StepSpec, build_step, plan_stages

from twinkle_agentic.io import Source


def shards(n: int, size: int | None = 100 << 20) -> list[Source]:
    return [Source(i, f"f{i}.jsonl", "jsonl", size) for i in range(n)]


@pytest.mark.parametrize(
    "files, now, largest, cap, plan",
    [
        # a fixed cluster (local, hand-started, no autoscaler): the CPUs present, one task each at once
        (16, 2, None, None, ReadPlan(2, 4, 2)),
        (16, 8, 8, None, ReadPlan(8, 16, 8)),  # an autoscaler whose bound is the size already reached
        (3, 2, None, None, ReadPlan(2, 3, 2)),  # never more tasks than files
        # an autoscaling cluster that starts at 2 CPUs and may grow to 64: planned for 64
        (200, 2, 64, None, ReadPlan(64, 128, 64)),
        (16, 2, 64, None, ReadPlan(64, 16, 64)),
        # no upper bound: one CPU per 256 MiB of input (100 MiB files), never below the CPUs present
        (200, 2, sys.maxsize, None, ReadPlan(79, 158, None)),
        (4, 8, sys.maxsize, None, ReadPlan(8, 4, None)),
        # --read-concurrency is the user's cap, whatever the cluster says
        (200, 2, 64, 8, ReadPlan(8, 16, 8)),
        (200, 2, sys.maxsize, 3, ReadPlan(3, 6, 3)),
        (16, 4, None, 32, ReadPlan(32, 16, 32)),
    ],
)
def test_the_read_follows_the_cluster_at_its_largest(files, now, largest, cap, plan):
    assert plan_read(shards(files), now, largest, cap) == plan


def test_unbounded_cluster_with_unknown_file_sizes_uses_the_estimate():
    # sizes unknown count as 64 MiB each: 40 files -> 2,560 MiB -> 10 CPUs
    plan = plan_read(shards(40, None), 2, sys.maxsize, None)
    assert plan == ReadPlan(10, 20, None)
    assert -(-40 * (64 << 20) // BYTES_PER_READ_CPU) == 10


def test_the_autoscalers_bound_is_read_from_its_cluster_config(monkeypatch):
    from ray._private import state

    # the call Ray Data's own hash shuffle makes; a Ray upgrade that renames it must fail here
    assert callable(state.state.get_max_resources_from_cluster_config)
    answers = iter([None, {"CPU": 96, "GPU": 8}, {"GPU": 8}, {"CPU": sys.maxsize}])
    monkeypatch.setattr(state.state, "get_max_resources_from_cluster_config", lambda: next(answers))
    assert read_plan.autoscaler_max_cpus() is None  # no autoscaler reported a config
    assert read_plan.autoscaler_max_cpus() == 96
    assert read_plan.autoscaler_max_cpus() is None  # node types with GPUs only: no CPU bound
    assert read_plan.autoscaler_max_cpus() == sys.maxsize


@pytest.mark.parametrize(
    "plan, cap, tasks, concurrency",
    [
        (None, None, 4, 2),  # no plan given: planned for the CPUs present, as a fixed cluster
        (None, 3, 6, 3),
        (ReadPlan(64, 16, 64), None, 16, 64),
        (ReadPlan(79, 158, None), None, 158, None),
    ],
)
def test_build_hands_the_plan_to_ray_datas_read(monkeypatch, plan, cap, tasks, concurrency):
    import ray.data

    calls = []
    monkeypatch.setattr(ray.data, "read_datasource", lambda source, **kwargs: calls.append(kwargs) or "dataset")
    steps = [build_step(StepSpec("HardFilter"))]
    stages = plan_stages(steps)
    cfg = PreprocessConfig(read_concurrency=cap)
    ds = job.build(shards(16), steps, ["HardFilter"], stages, cfg, 4, False, 2, read=plan)
    assert ds == "dataset"  # the one stage ran inside the read: nothing added on top
    assert calls == [{"override_num_blocks": tasks, "concurrency": concurrency, "num_cpus": job.READ_TASK_CPUS}]
