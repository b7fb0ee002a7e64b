"""The preprocess job on a cluster of several nodes: a head where the driver runs, a second node that
does not see part of the driver's disk, and (last) a third node that joins while a job runs.

The head has no CPU, so every task of the job runs on the other nodes. The second node's
``ray start`` runs in a mount namespace of its own, where a tmpfs covers the test's ``private``
folder: the view of a second machine that lacks the driver's local disk. ``shared`` is seen by every
node, as a shared volume would be. Hiding it needs ``unshare`` and the right to mount (root, or
unprivileged user namespaces); the tests of that folder are skipped where the machine allows
neither. The tests share one cluster (its start is most of their time); the one that grows it runs
last.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from twinkle_agentic.cluster import LocalHead
from twinkle_agentic.cluster.auth import auth_headers
from twinkle_agentic.cluster.head import stop_process_group
from twinkle_agentic.jobs.preprocess.steps import StepSpec, build_step

from tests.support.job_data import read_outputs, reference_outputs
from tests.support.paths import REPO_ROOT
from twinkle_agentic.net import free_ports
from twinkle_agentic.preprocessor import run_pipeline

pytestmark = pytest.mark.integration

STEPS = [StepSpec("HardFilter", {"min_user_chars": 10}), StepSpec("DedupFilter")]
NODE_TIMEOUT_S = 120
# The growing cluster: 12 files of 2.5 s each, in 8 read tasks, 4 at once (4 of two files first).
FILES, ROWS_PER_FILE, DELAY_S = 12, 25, 0.1
PLAN_TIMEOUT_S = 120

# The cluster config an autoscaler v2 reports, written into the GCS as it does: a head of no CPU and
# up to two workers of 2 CPUs, so the job plans its read for 4 CPUs while the cluster has 2.
REPORT_CLUSTER_CONFIG = """
import sys, ray
from ray.core.generated import autoscaler_pb2
from ray.experimental.internal_kv import _internal_kv_put
ray.init(address=sys.argv[1], log_to_driver=False)
config = autoscaler_pb2.ClusterConfig()
for name, cpus, count in (("head", 0, 1), ("cpu_worker", 2, 2)):
    group = config.node_group_configs.add()
    group.name, group.max_count = name, count
    group.resources["CPU"] = cpus
_internal_kv_put(
    ray._raylet.GCS_AUTOSCALER_CLUSTER_CONFIG_KEY.encode(), config.SerializeToString(), overwrite=True,
    namespace=ray._raylet.GCS_AUTOSCALER_STATE_NAMESPACE.encode(),
)
print(ray._private.state.state.get_max_resources_from_cluster_config()["CPU"])
"""


def hide_command(folder: Path) -> list[str] | None:
    """A command prefix that runs the rest in a mount namespace where ``folder`` is an empty tmpfs:
    a plain mount namespace where this process may mount, else one inside a user namespace; None
    when neither works here."""
    if shutil.which("unshare") is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    mount = ["sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"', str(folder)]
    namespaces = [["--mount"], ["--user", "--map-root-user", "--mount"]]
    for flags in namespaces if os.geteuid() == 0 else namespaces[1:]:
        prefix = ["unshare", *flags, "--propagation", "private", "--", *mount]
        if subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0:
            return prefix
    return None


@contextlib.contextmanager
def worker_node(head: LocalHead, hide: list[str], num_cpus: int, log: Path) -> Iterator[tuple[str, Path]]:
    """A Ray node joined to ``head``, started under ``hide`` (:func:`hide_command`); yields its node
    id and the root of its view of the file system (``/proc/<pid>/root`` of its processes)."""
    joined = {n["node_id"] for n in worker_nodes(head)}
    ray_cli = str(Path(sys.executable).with_name("ray"))
    agent, agent_grpc, runtime_env, metrics = free_ports(4)
    command = [
        *hide, ray_cli, "start", "--block", f"--address={head.address}",
        f"--node-ip-address={head.host}", f"--num-cpus={num_cpus}", "--object-store-memory=200000000",
        f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
    ]  # fmt: skip
    for attempt in (1, 2):  # `ray start` gives up after a fixed 30 s when its raylet registers late (a busy machine)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=head.env, start_new_session=True
            )
        try:
            node_id = wait_for_new_node(head, process, log, joined)
            break
        except AssertionError:
            exited = process.poll() is not None  # it gave up starting (else: it never joined, no retry)
            stop_process_group(process)
            if attempt == 2 or not exited:
                raise
    try:
        yield node_id, Path(f"/proc/{process.pid}/root")
    finally:
        stop_process_group(process)


def worker_nodes(head: LocalHead) -> list[dict]:
    """The live nodes other than the head that have their CPUs, from the dashboard."""
    request = urllib.request.Request(f"{head.dashboard_url}/api/v0/nodes", headers=auth_headers(head.env))
    with urllib.request.urlopen(request, timeout=5) as response:
        nodes = json.load(response)["data"]["result"]["result"]
    alive = [n for n in nodes if n["state"] == "ALIVE" and not n["is_head_node"]]
    return [n for n in alive if n.get("resources_total", {}).get("CPU")]


def wait_for_new_node(head: LocalHead, process: subprocess.Popen, log: Path, joined: set[str]) -> str:
    """The id of the node ``process`` started, once it is live: the first one not in ``joined``."""
    deadline = time.monotonic() + NODE_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        with contextlib.suppress(OSError, ValueError, KeyError):
            new = [n["node_id"] for n in worker_nodes(head) if n["node_id"] not in joined]
            if new:
                return new[0]
        time.sleep(0.5)
    raise AssertionError("the node did not join:\n" + log.read_text(errors="replace")[-3000:])


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> Iterator[tuple[LocalHead, str, Path, Path, Path]]:
    """(head, the second node's id, a folder both nodes see, a folder only the head sees, the root
    of the second node's view)."""
    root = tmp_path_factory.mktemp("two_nodes")
    shared, private = root / "shared", root / "private"
    shared.mkdir()
    hide = hide_command(private)
    with (
        LocalHead(num_cpus=0, object_store_memory=200 * 1024 * 1024, auth_mode="token") as head,
        worker_node(head, hide or [], num_cpus=2, log=root / "node.log") as (node_id, view),
    ):
        (private / "probe").write_text("the driver's disk")
        (shared / "probe").write_text("a shared volume")
        assert (view / private.relative_to("/") / "probe").exists() == (hide is None)
        assert (view / shared.relative_to("/") / "probe").exists()
        yield head, node_id, shared, private, view


def skip_unless_hidden(private: Path, view: Path) -> None:
    """The tests of a disk only the driver sees need the second node's own mount namespace."""
    if (view / private.relative_to("/") / "probe").exists():
        pytest.skip("this machine cannot give a Ray node a mount namespace of its own (unshare, mount)")


def preprocess(head: LocalHead, inputs: Path, out: Path, config: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", "--address", head.address, "--config", str(config),
               "--input", str(inputs), "--output", str(out), "--no-progress"]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=head.env, timeout=180, cwd=REPO_ROOT)


def write_inputs(
    chat_inputs: Path, folder: Path, config_dir: Path, steps: list[StepSpec] = STEPS
) -> tuple[Path, Path]:
    inputs = folder / "inputs"
    shutil.copytree(chat_inputs, inputs)
    config = config_dir / "pipeline.yaml"
    config.write_text(json.dumps({"steps": [s.to_config() for s in steps], "dedup_partitions": 3}))
    return inputs, config


def test_on_shared_storage_every_task_runs_on_the_other_node_and_the_output_is_complete(
    two_nodes, chat_inputs
):
    """With a model step on an actor pool of two, loaded once per actor on the other node."""
    head, _, shared, _, _ = two_nodes
    loads = shared / "run1" / "model-loads"
    loads.mkdir(parents=True)
    model = StepSpec("tests.support.job_steps:ModelStep", {"marker_dir": str(loads)}, actors=2)
    steps = [STEPS[0], model, STEPS[1]]
    inputs, config = write_inputs(chat_inputs, shared / "run1", shared / "run1", steps)
    out = shared / "run1" / "out"
    result = preprocess(head, inputs, out, config)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    job = read_outputs(out)
    assert sorted(p.name.split("-")[0] for p in loads.iterdir()) == ["warmup", "warmup"]
    reference_steps = [STEPS[0], StepSpec(model.name, {"marker_dir": str(shared / "run1")}), STEPS[1]]
    reference = reference_outputs(run_pipeline([str(inputs)], [build_step(s) for s in reference_steps]))
    assert job["kept"] == reference["kept"] and job["dropped"] == reference["dropped"]
    assert ("ModelStep", "mentions_sql") in {(step, reason) for step, reason, _ in job["dropped"]}
    assert job["stats"]["kept"] + job["stats"]["dropped"] == job["stats"]["rows_read"] > 0
    assert ": 2 CPUs" in job["stats"]["cluster"]  # the head has none: the other node ran every task
    assert not list(out.glob(".twinkle-run-*"))


def test_inputs_only_the_driver_sees_stop_the_run_naming_the_node(two_nodes, chat_inputs):
    head, node_id, shared, private, view = two_nodes
    skip_unless_hidden(private, view)
    inputs, config = write_inputs(chat_inputs, private / "run2", shared)
    out = shared / "run2-out"
    result = preprocess(head, inputs, out, config)
    assert result.returncode == 2, (result.stdout + result.stderr)[-4000:]
    assert "StorageNotSharedError" in result.stderr
    assert f"no such file, though the driver listed it on node {node_id[:12]} (" in result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert "a node does not see the run's files as the driver does" in last, result.stdout
    assert not (out / "stats.json").exists()


def test_an_output_folder_only_the_driver_sees_gets_no_file_from_the_other_node(two_nodes, chat_inputs):
    """Before the check, this run "succeeded": its part files went to the other node's disk and its
    stats.json to the driver's."""
    head, node_id, shared, private, view = two_nodes
    skip_unless_hidden(private, view)
    inputs, config = write_inputs(chat_inputs, shared / "run3", shared / "run3")
    out = private / "run3-out"
    result = preprocess(head, inputs, out, config)
    assert result.returncode == 2, (result.stdout + result.stderr)[-4000:]
    assert "lacks the marker .twinkle-run-" in result.stderr
    assert f"on node {node_id[:12]} (" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == []  # no stats, no report, the marker removed
    assert not (view / out.relative_to("/")).exists()  # and nothing on the other node's disk


def write_stamped_inputs(folder: Path) -> Path:
    """FILES small JSON Lines files, each row with a distinct id and user turn."""
    inputs = folder / "in"
    inputs.mkdir(parents=True)
    for f in range(FILES):
        rows = [
            {"id": f * 1000 + i, "messages": [{"role": "user", "content": f"question {i} of file {f}"}]}
            for i in range(ROWS_PER_FILE)
        ]
        (inputs / f"part-{f:02d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return inputs


def wait_for_line(path: Path, needle: str, process: subprocess.Popen) -> str:
    """The first line of the log at ``path`` that holds ``needle``, once ``process`` has written it."""
    deadline = time.monotonic() + PLAN_TIMEOUT_S
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        found = [line for line in text.splitlines() if needle in line]
        if found:
            return found[0]
        assert process.poll() is None, text[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"the job never logged {needle!r}:\n" + path.read_text(errors="replace")[-3000:])


def test_a_node_that_joins_after_the_job_started_takes_reads(two_nodes):
    """The read is planned for the cluster's largest size as its autoscaler reports it (4 CPUs, while
    2 are present), so a node that joins after the job started takes reads: a step stamps every row
    with the node that read it. Runs last: it leaves the reported config in the cluster."""
    head, node_id, shared, _, _ = two_nodes
    folder = shared / "grows"
    inputs = write_stamped_inputs(folder)
    config = folder / "pipeline.yaml"
    joined_flag = folder / "joined"  # the reads already running wait for the node to join
    step = StepSpec("tests.support.job_steps:NodeStamp", {"delay_s": DELAY_S, "wait_file": str(joined_flag)})
    config.write_text(json.dumps({"steps": [step.to_config()]}))
    out, log = folder / "out", folder / "job.log"
    reported = subprocess.run(
        [sys.executable, "-c", REPORT_CLUSTER_CONFIG, head.address],
        capture_output=True, text=True, env=head.env, timeout=120, cwd=REPO_ROOT,
    )  # fmt: skip
    assert reported.returncode == 0 and reported.stdout.split()[-1] == "4", reported.stderr[-3000:]
    command = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", "--address", head.address,
               "--config", str(config), "--input", str(inputs), "--output", str(out), "--no-progress"]  # fmt: skip
    with open(log, "wb") as sink:
        job = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=head.env, cwd=REPO_ROOT)
    try:
        plan = wait_for_line(log, "read planned for", job)
        assert "read planned for 4 CPU(s): 8 whole-file task(s), at most 4 at once" in plan
        with worker_node(head, [], num_cpus=2, log=folder / "node.log") as (joined_id, _):
            joined_flag.write_text(joined_id)
            assert job.wait(timeout=240) == 0, log.read_text(errors="replace")[-4000:]
    finally:
        if job.poll() is None:
            job.kill()
    kept = read_outputs(out)["kept_lines"]
    nodes = [json.loads(line)["node"] for line in kept]
    assert len(nodes) == FILES * ROWS_PER_FILE
    # the job started with the second node alone (2 CPUs); the node that joined read some of the files
    assert set(nodes) <= {node_id, joined_id}
    assert nodes.count(joined_id) >= ROWS_PER_FILE, {n[:8]: nodes.count(n) for n in set(nodes)}
