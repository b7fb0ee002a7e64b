"""Model-stage actors never take every CPU: Ray Data starts an actor pool whole, before the tasks that
feed it, and actors holding all CPUs left those tasks waiting forever (one actor on a one-CPU cluster,
two on two: the run hung until killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml
from twinkle_agentic.jobs.preprocess.job import actor_cpus
from twinkle_agentic.jobs.preprocess.steps import Stage, StepSpec, build_step

from tests.support.job_data import read_outputs, reference_outputs
from tests.support.paths import REPO_ROOT
from twinkle_agentic.preprocessor import run_pipeline

SAMPLE = REPO_ROOT / "data" / "sample" / "chats.jsonl"


def actor_stage(actors: int | None) -> Stage:
    return Stage("actor", [1], actors=actors)


@pytest.mark.parametrize(
    ("cpus", "pools", "default", "expected"),
    [
        (64, [8], 1, 1.0),  # a big cluster: one CPU each, as Ray Data's default
        (2, [None], 1, 1.0),  # one actor on two CPUs leaves one free
        (2, [2], 1, 0.5),
        (2, [3, None], 2, 0.2),  # pools of 3 and of the default 2 share the one CPU left
        (1, [None], 1, 0.0),  # nothing to share on one CPU: Ray places zero-CPU actors anyway
        (4, [], 1, 1.0),  # no model stage
    ],
)
def test_actors_together_leave_one_cpu_free(cpus, pools, default, expected):
    stages = [Stage("map", [0])] + [actor_stage(p) for p in pools]
    assert actor_cpus(stages, default, cpus) == pytest.approx(expected)


@pytest.mark.integration
def test_a_model_step_on_a_one_cpu_cluster_runs_to_the_end(tmp_path):
    """The CLI on its own embedded one-CPU cluster: one input file (its records re-blocked by a read
    task asking for a whole CPU), then a model step in an actor pool of one."""
    loads = tmp_path / "loads"
    loads.mkdir()
    model = StepSpec("tests.support.job_steps:ModelStep", {"marker_dir": str(loads)})
    steps = [StepSpec("HardFilter", {"min_user_chars": 10}), model, StepSpec("DedupFilter")]
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"steps": [s.to_config() for s in steps]}))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", "--input", str(SAMPLE), "--output", str(out),
            "--config", str(config), "--num-cpus", "1", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the run hung: " + proc.communicate()[1][-3000:])
    assert proc.returncode == 0, (stdout + stderr)[-4000:]
    assert [p.name.split("-")[0] for p in loads.iterdir()] == ["warmup"]
    reference_steps = [steps[0], StepSpec(model.name, {"marker_dir": str(tmp_path)}), steps[2]]
    reference = reference_outputs(run_pipeline([str(SAMPLE)], [build_step(s) for s in reference_steps]))
    job = read_outputs(out)
    assert job["kept"] == reference["kept"] and job["dropped"] == reference["dropped"]
