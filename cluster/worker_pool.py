"""How the Ray clusters this project starts keep their worker processes.

Ray starts a worker process ahead of need whenever a task lease arrives with a backlog and no worker
is idle ("lease backlog" prestart, up to ``num_workers_soft_limit`` workers), and ends idle workers
above that limit after one second. A Ray Data job on a small cluster trips the first rule at every
shuffle and stage boundary: each run of the preprocess job on a 2-CPU cluster started two to four
processes that booted (~0.5 CPU s each), ran nothing and were ended again; the tasks ran on the
workers already there (raylet debug log; figures in docs/bench/preprocess_job.md).

So our clusters set the soft limit to 0, which turns that prestart off (Ray starts at most
``min(soft limit, backlog)`` workers for a backlog), and keep an idle worker for
IDLE_WORKER_KEEP_MS instead of one second, so the workers a job did start stay for its next
stage and its next run. A worker whose job ends is still ended at once, whatever these say.

A command that knows what its tasks import can also name modules for every worker to import before
it accepts work (Ray's ``preload_python_modules``). Ray prestarts one worker per CPU when the first
driver connects, and Ray Data's own actors take those workers when a run starts; preloaded, they
import Ray Data while the driver plans instead of inside the run (figures in
docs/bench/preprocess_job.md). Workers started later import the modules when they boot instead of
on their first task: the same work, earlier.

Measured (docs/bench/preprocess_job.md): with these settings three jobs on one cluster started 4 / 4
/ 4 worker processes against 6 / 8 / 8 with Ray's defaults, and a first job on a 160-row corpus took
2.8-4.0 s and 6.9-7.6 CPU s against 4.0-4.1 s and 8.2-8.3 CPU s; the preload took a first 200k-row
job on 2 CPUs from 10.1 to 9.65 s on average. All are Ray system settings passed through
``ray.init(_system_config=...)``, no private module.

Any setting given as ``RAY_<name>`` in the environment wins: Ray reads it itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

IDLE_WORKER_KEEP_MS = 10 * 60 * 1000


def worker_pool_config(preload_modules: Sequence[str] = ()) -> dict[str, Any]:
    """Ray system settings for the worker pool of a cluster started here (embedded or head), whose
    workers import ``preload_modules`` before they accept work."""
    wanted: dict[str, Any] = {
        "num_workers_soft_limit": 0,
        "idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS,
    }
    if preload_modules:
        wanted["preload_python_modules"] = list(preload_modules)
    return {name: value for name, value in wanted.items() if f"RAY_{name}" not in os.environ}

