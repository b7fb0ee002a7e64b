"""``ray job submit --working-dir . -- twinkle-agentic preprocess ...`` against a real head started here.

The head runs ``ray start --head --block`` on free ports in its own process group (cluster.LocalHead)
and is stopped by signalling that group; every process gets the same RAY_AUTH_MODE. The module's tests
share one head: a job that ran to the end, then one stopped by ``ray job stop``.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml
from twinkle_agentic.cluster import LocalHead

from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def head():
    with LocalHead(num_cpus=2, object_store_memory=300 * 1024 * 1024, auth_mode="token") as h:
        yield h


def test_ray_job_submit_runs_the_preprocess_job(head, chat_inputs, tmp_path):
    config = tmp_path / "pipeline.yaml"
    config.write_text("steps:\n  - DedupFilter\n  - HardFilter: {min_user_chars: 10}\ndedup_partitions: 2\n")
    out = tmp_path / "out"
    result = subprocess.run(
        ["ray", "job", "submit", "--address", head.dashboard_url, "--working-dir", str(REPO_ROOT), "--",
         "twinkle-agentic", "preprocess", "--config", str(config), "--input", str(chat_inputs),
         "--output", str(out), "--no-progress"],
        capture_output=True, text=True, env=head.env, timeout=300, cwd=REPO_ROOT,
    )  # fmt: skip
    logs = result.stdout + result.stderr
    assert result.returncode == 0, logs[-4000:]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["kept"] + stats["dropped"] == stats["rows_read"] > 0
    assert f"kept {stats['kept']:,}, dropped {stats['dropped']:,}" in logs  # the job's summary line
    assert "2 CPUs" in stats["cluster"] and "embedded" not in stats["cluster"]
    assert {"DedupFilter", "HardFilter"} <= {s["step"] for s in stats["steps"]}


def test_ray_job_stop_ends_the_run_with_its_interrupted_line(head, chat_inputs, tmp_path):
    """``ray job stop`` sends SIGTERM: the job's log ends with the line saying where it stopped."""
    markers = tmp_path / "markers"
    markers.mkdir()
    config = tmp_path / "pipeline.yaml"
    stall = {"tests.support.job_steps:StallsWhenRunning": {"marker_dir": str(markers)}}
    config.write_text(yaml.safe_dump({"steps": [stall]}))
    out = tmp_path / "out"

    def ray_job(*args: str) -> subprocess.CompletedProcess:
        command = ["ray", "job", *args[:1], "--address", head.dashboard_url, *args[1:]]
        return subprocess.run(command, capture_output=True, text=True, env=head.env, timeout=300)

    # the driver and its workers import tests.support.job_steps from the uploaded working directory
    submitted = ray_job(
        "submit", "--no-wait", "--submission-id", "stopped-run", "--working-dir", str(REPO_ROOT),
        "--", "twinkle-agentic", "preprocess", "--config", str(config),
        "--input", str(chat_inputs), "--output", str(out), "--no-progress",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-4000:]
    deadline = time.monotonic() + 180
    while not any(markers.iterdir()):
        assert time.monotonic() < deadline, ray_job("logs", "stopped-run").stdout[-4000:]
        time.sleep(0.2)
    stopped = ray_job("stop", "stopped-run")
    assert stopped.returncode == 0, stopped.stderr[-4000:]
    logs = ray_job("logs", "stopped-run").stdout
    assert logs.strip().splitlines()[-1].startswith("preprocess: interrupted after "), logs[-4000:]
    assert not (out / "stats.json").exists()
