"""The rollout-job scale bench end to end at a small size, in its own processes (it replaces the
job's cluster, services and farm with stand-ins, which must not leak into other tests): every
planned trajectory ends in the output, a tenth of them resumed from the journal it prepared."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO_ROOT


def test_the_bench_runs_the_job_over_a_resumed_journal(tmp_path):
    command = [sys.executable, str(REPO_ROOT / "bench" / "rollout_job_scale.py"), "--sizes", "500",
               "--samples", "2", "--data", str(tmp_path), "--json-out", str(tmp_path / "out.jsonl")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    (row,) = record["rows"]
    assert record["bench"] == "rollout_job_scale" and record["code"] == "this checkout"
    assert row["trajectories"] == 1000 and row["resumed"] == 100 and row["run"] == 900
    assert row["driver_cpu_us_per_trajectory"] > 0 and row["tracemalloc_peak_mb"] > 0
