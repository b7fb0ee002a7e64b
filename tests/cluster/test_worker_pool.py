"""An embedded cluster starts the worker processes a job runs on, and no others, and they have the
job's modules imported before they take work (cluster.worker_pool). The bench's count of the
raylet's worker starts measures it.

With Ray's defaults every run of the preprocess job on a 2-CPU cluster started two to four worker
processes that booted, ran nothing and were ended a second later. The raylet logs each start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration


RUNS = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path

    from twinkle_agentic.cluster import connect
    from bench.preprocess_job import worker_processes_started
    from twinkle_agentic.jobs.preprocess.config import build_parser, resolve_config
    from twinkle_agentic.jobs.preprocess.job import run

    inputs, output = sys.argv[1], Path(sys.argv[2])
    connect(None, num_cpus=2, include_dashboard=False)

    def started() -> int:
        # the raylet writes its log lines as they happen; wait until the count holds still
        counts = []
        while len(counts) < 3 or len(set(counts[-3:])) > 1:
            time.sleep(0.2)
            counts.append(worker_processes_started())
        return counts[-1]

    counts = []
    for i in range(3):
        argv = ["--input", inputs, "--output", str(output / str(i)), "--num-cpus", "2", "--no-progress"]
        summary = run(resolve_config(build_parser().parse_args(argv)))
        counts.append({"started": started(), "kept": summary.kept})
    print("RUNS " + json.dumps(counts))
    """
)


# Ray's own settings, when the environment gives them, would replace the ones under test
RAY_OVERRIDES = (
    "RAY_ADDRESS",
    "RAY_num_workers_soft_limit",
    "RAY_idle_worker_killing_time_threshold_ms",
    "RAY_preload_python_modules",
)


def run_on_fresh_cluster(script: str, prefix: str, *args: str, timeout: int) -> tuple[Any, str]:
    """Run ``script`` in a new process (its own embedded cluster): the JSON it printed after
    ``prefix``, and everything it wrote."""
    env = {k: v for k, v in os.environ.items() if k not in RAY_OVERRIDES}
    env.update(PYTHONPATH=str(REPO_ROOT), RAY_USAGE_STATS_ENABLED="0")
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith(prefix + " ")]
    return json.loads(line[len(prefix) + 1 :]), result.stdout + result.stderr


def test_repeated_jobs_start_no_worker_processes_after_the_first(chat_inputs, tmp_path):
    runs, _ = run_on_fresh_cluster(RUNS, "RUNS", str(chat_inputs), str(tmp_path / "out"), timeout=300)
    assert len({r["kept"] for r in runs}) == 1 and runs[0]["kept"] > 0
    # the first run starts Ray Data's two actors and the task workers; later runs reuse them all
    assert runs[0]["started"] >= 3
    assert [r["started"] for r in runs[1:]] == [runs[0]["started"]] * 2, runs


PRELOADED = textwrap.dedent(
    """
    import json, sys

    import ray

    from twinkle_agentic.jobs.preprocess.job import WORKER_MODULES, connect

    connect(None, num_cpus=1)

    @ray.remote
    def imported() -> list:
        return [m for m in WORKER_MODULES if m in sys.modules]

    # a plain task imports none of them itself: whatever its worker has, the worker had before
    print("WORKER " + json.dumps(ray.get(imported.remote())))
    """
)


def test_the_preprocess_jobs_cluster_workers_import_its_modules_before_they_take_work():
    from twinkle_agentic.jobs.preprocess.job import WORKER_MODULES

    modules, output = run_on_fresh_cluster(PRELOADED, "WORKER", timeout=120)
    assert modules == list(WORKER_MODULES)
    assert "Failed to preload" not in output  # Ray logs a module it cannot import
