"""Model-stage actor pools that follow the cluster: ``actors`` (the pool's start) and ``max_actors``
(how far Ray Data may grow it while batches wait), per step or for the whole job."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from twinkle_agentic.jobs.preprocess.config import PreprocessConfig
from twinkle_agentic.jobs.preprocess.job import actor_pool, plan
from twinkle_agentic.jobs.preprocess.steps import (
    ConfigError,
    Stage,
    StepSpec,
    build_step,
    parse_step,
    pool_size,
)

from tests.support.job_data import read_outputs, reference_outputs
from tests.support.paths import REPO_ROOT
from twinkle_agentic.preprocessor import run_pipeline

SAMPLE = REPO_ROOT / "data" / "sample" / "chats.jsonl"
MODEL = "tests.support.job_steps:ModelStep"


@pytest.mark.parametrize(
    ("stage", "job", "expected"),
    [
        ((None, None), (1, None), (1, 1)),  # fixed pool of the job's size
        ((2, None), (1, None), (2, 2)),
        ((None, None), (2, 6), (2, 6)),  # the job's bounds
        ((1, 4), (2, 6), (1, 4)),  # the step's own bounds win
        ((3, None), (1, 8), (3, 8)),
    ],
)
def test_pool_bounds_come_from_the_step_then_the_job(stage, job, expected):
    assert pool_size(Stage("actor", [0], actors=stage[0], max_actors=stage[1]), *job) == expected


def test_a_maximum_below_the_minimum_is_refused_before_the_run(tmp_path):
    spec = parse_step({MODEL: {"marker_dir": str(tmp_path)}, "actors": 3, "max_actors": 2}, 0)
    assert (spec.actors, spec.max_actors) == (3, 2)
    cfg = PreprocessConfig(inputs=[str(SAMPLE)], output=str(tmp_path / "out"), steps=[spec]).validate()
    with pytest.raises(ConfigError, match="max_actors=2 is below actors=3"):
        plan(cfg)


def test_the_strategy_is_fixed_or_autoscaling():
    pytest.importorskip("ray")
    cfg = PreprocessConfig(inputs=["x"], output="y", actors=2)
    fixed = actor_pool(Stage("actor", [0]), cfg)
    assert (fixed.min_size, fixed.max_size) == (2, 2)
    growing = actor_pool(Stage("actor", [0], max_actors=5), cfg)
    assert (growing.min_size, growing.max_size) == (2, 5)


@pytest.mark.integration
def test_an_autoscaling_pool_runs_the_job_to_the_same_output(tmp_path):
    """The CLI with a model step whose pool starts at one actor and may grow to two: the dry run says
    so, and the run keeps exactly the rows the one-process pipeline keeps."""
    loads = tmp_path / "loads"
    loads.mkdir()
    steps = [StepSpec("HardFilter", {"min_user_chars": 10}), StepSpec(MODEL, {"marker_dir": str(loads)}, 1, 2)]
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"steps": [s.to_config() for s in steps]}))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", "--input", str(SAMPLE), "--output", str(out),
            "--config", str(config), "--num-cpus", "2", "--no-progress"]  # fmt: skip
    dry = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "(1-2 actors)" in dry.stdout
    run = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert 1 <= len([p for p in loads.iterdir() if p.name.startswith("warmup")]) <= 2
    reference = reference_outputs(
        run_pipeline([str(SAMPLE)], [build_step(steps[0]), build_step(StepSpec(MODEL, {"marker_dir": str(tmp_path)}))])
    )
    job = read_outputs(out)
    assert job["kept"] == reference["kept"] and job["dropped"] == reference["dropped"]
    assert json.loads((out / "stats.json").read_text())["kept"] == len(reference["kept"])
