"""The preprocess job's read on a cluster that grows while it runs: planned for the cluster's largest
size as its autoscaler reports it, so a node that joins after the job started takes reads.

The head (1 CPU) gets the cluster config an autoscaler v2 reports (a head of 1 CPU and one worker of
2 CPUs at most), written into the GCS as the autoscaler does; the second node is started by hand once
the job has logged its read plan. A step stamps every row with the node that read it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from twinkle_agentic.cluster import LocalHead
from twinkle_agentic.jobs.preprocess.steps import StepSpec

from tests.jobs.preprocess.test_multi_node import worker_node
from tests.support.job_data import read_outputs
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration

FILES, ROWS_PER_FILE, DELAY_S = 12, 25, 0.1  # 2.5 s per file; 6 read tasks of two files, 3 at once
PLAN_TIMEOUT_S = 120

REPORT_CLUSTER_CONFIG = """
import sys, ray
from ray.core.generated import autoscaler_pb2
from ray.experimental.internal_kv import _internal_kv_put
ray.init(address=sys.argv[1], log_to_driver=False)
config = autoscaler_pb2.ClusterConfig()
for name, cpus in (("head", 1), ("cpu_worker", 2)):
    group = config.node_group_configs.add()
    group.name, group.max_count = name, 1
    group.resources["CPU"] = cpus
_internal_kv_put(
    ray._raylet.GCS_AUTOSCALER_CLUSTER_CONFIG_KEY.encode(), config.SerializeToString(), overwrite=True,
    namespace=ray._raylet.GCS_AUTOSCALER_STATE_NAMESPACE.encode(),
)
print(ray._private.state.state.get_max_resources_from_cluster_config()["CPU"])
"""


def write_inputs(folder: Path) -> Path:
    inputs = folder / "in"
    inputs.mkdir()
    for f in range(FILES):
        rows = [
            {"id": f * 1000 + i, "messages": [{"role": "user", "content": f"question {i} of file {f}"}]}
            for i in range(ROWS_PER_FILE)
        ]
        (inputs / f"part-{f:02d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return inputs


def wait_for_line(path: Path, needle: str, process: subprocess.Popen) -> str:
    deadline = time.monotonic() + PLAN_TIMEOUT_S
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        found = [line for line in text.splitlines() if needle in line]
        if found:
            return found[0]
        assert process.poll() is None, text[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"the job never logged {needle!r}:\n" + path.read_text(errors="replace")[-3000:])


def test_a_node_that_joins_after_the_job_started_takes_reads(tmp_path):
    inputs = write_inputs(tmp_path)
    config = tmp_path / "pipeline.yaml"
    step = StepSpec("tests.support.job_steps:NodeStamp", {"delay_s": DELAY_S})
    config.write_text(json.dumps({"steps": [step.to_config()]}))
    out, log = tmp_path / "out", tmp_path / "job.log"
    with LocalHead(num_cpus=1, object_store_memory=200 * 1024 * 1024, auth_mode="token") as head:
        reported = subprocess.run(
            [sys.executable, "-c", REPORT_CLUSTER_CONFIG, head.address],
            capture_output=True, text=True, env=head.env, timeout=120, cwd=REPO_ROOT,
        )  # fmt: skip
        assert reported.returncode == 0 and reported.stdout.split()[-1] == "3", reported.stderr[-3000:]
        command = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", "--address", head.address,
                   "--config", str(config), "--input", str(inputs), "--output", str(out), "--no-progress"]  # fmt: skip
        with open(log, "wb") as sink:
            job = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=head.env, cwd=REPO_ROOT)
        try:
            plan = wait_for_line(log, "read planned for", job)
            assert "read planned for 3 CPU(s): 6 whole-file task(s), at most 3 at once" in plan
            with worker_node(head, [], num_cpus=2, log=tmp_path / "node.log") as (node_id, _):
                assert job.wait(timeout=240) == 0, log.read_text(errors="replace")[-4000:]
        finally:
            if job.poll() is None:
                job.kill()
    kept = read_outputs(out)["kept_lines"]
    nodes = [json.loads(line)["node"] for line in kept]
    assert len(nodes) == FILES * ROWS_PER_FILE
    # the job started on the head alone (1 CPU); the node that joined read some of the files
    assert nodes.count(node_id) >= ROWS_PER_FILE, {n[:8]: nodes.count(n) for n in set(nodes)}
