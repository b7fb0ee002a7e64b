"""``ray job submit --working-dir . -- twinkle-agentic preprocess ...`` against a real head started here.

The head runs ``ray start --head --block`` on free ports in its own process group (cluster.LocalHead)
and is stopped by signalling that group; every process gets the same RAY_AUTH_MODE.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cluster import LocalHead

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_ray_job_submit_runs_the_preprocess_job(chat_inputs, tmp_path):
    config = tmp_path / "pipeline.yaml"
    config.write_text("steps:\n  - DedupFilter\n  - HardFilter: {min_user_chars: 10}\ndedup_partitions: 2\n")
    out = tmp_path / "out"
    with LocalHead(num_cpus=2, object_store_memory=300 * 1024 * 1024, auth_mode="token") as head:
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
