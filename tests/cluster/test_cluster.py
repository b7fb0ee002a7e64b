"""The cluster helper: address resolution, one auth mode for every process, and the job path
``ray start --head`` -> ``ray job submit --working-dir . -- ...`` on a real head started here."""

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
from twinkle_agentic.cluster import ClusterConfigError, LocalHead, resolve_address, resolve_auth_mode
from twinkle_agentic.cluster.auth import ray_environment


def test_resolve_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resolve_address() is None
    assert resolve_address("10.0.0.1:6379") == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert resolve_address() == "ray://head:10001"
    assert resolve_address("h:1") == "h:1"  # explicit wins
    monkeypatch.setenv("RAY_ADDRESS", "  ")
    assert resolve_address() is None


def test_auth_mode(monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert resolve_auth_mode() == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "Disabled")
    assert resolve_auth_mode() == "disabled"
    with pytest.raises(ClusterConfigError, match="RAY_AUTH_MODE='k8s' is not supported"):
        resolve_auth_mode("k8s")


def test_clusters_started_here_keep_their_workers_and_prestart_none(monkeypatch):
    from twinkle_agentic.cluster.worker_pool import IDLE_WORKER_KEEP_MS, worker_pool_config

    monkeypatch.delenv("RAY_num_workers_soft_limit", raising=False)
    monkeypatch.delenv("RAY_idle_worker_killing_time_threshold_ms", raising=False)
    wanted = {"num_workers_soft_limit": 0, "idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS}
    assert worker_pool_config() == wanted
    assert f"--system-config={json.dumps(wanted)}" in LocalHead(num_cpus=2).command("/tmp/x")
    monkeypatch.setenv("RAY_num_workers_soft_limit", "3")  # Ray reads it itself; ours must not compete
    assert worker_pool_config() == {"idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS}
    monkeypatch.setenv("RAY_idle_worker_killing_time_threshold_ms", "1000")
    assert worker_pool_config() == {}
    assert not any(a.startswith("--system-config") for a in LocalHead(num_cpus=2).command("/tmp/x"))


def test_worker_pool_preloads_the_modules_named(monkeypatch):
    from twinkle_agentic.cluster.worker_pool import worker_pool_config

    monkeypatch.delenv("RAY_preload_python_modules", raising=False)
    assert "preload_python_modules" not in worker_pool_config()
    config = worker_pool_config(("ray.data", "twinkle_agentic.jobs.preprocess.stages"))
    assert config["preload_python_modules"] == ["ray.data", "twinkle_agentic.jobs.preprocess.stages"]
    json.dumps(config)  # Ray takes the system config as JSON
    monkeypatch.setenv("RAY_preload_python_modules", "numpy")  # Ray reads it itself
    assert "preload_python_modules" not in worker_pool_config(("ray.data",))


def test_child_environment_is_consistent(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    env = ray_environment()
    assert env["RAY_AUTH_MODE"] == "disabled" and os.environ["RAY_AUTH_MODE"] == "disabled"
    assert os.path.dirname(sys.executable) in env["PATH"].split(os.pathsep)


@pytest.mark.integration  # starts a Ray cluster
def test_embedded_cluster_via_cli():
    """``twinkle-agentic cluster info`` with no address starts an embedded cluster sized to the machine."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(
        [sys.executable, "-m", "twinkle_agentic.cli", "cluster", "info"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "embedded local cluster at" in out.stdout
    assert f"{os.cpu_count()} CPUs" in out.stdout and "auth=token" in out.stdout


def live_members(pgid: int) -> list[str]:
    rows = subprocess.run(["ps", "-eo", "pgid=,stat=,args="], capture_output=True, text=True).stdout.splitlines()
    return [r for r in rows if r.split()[0] == str(pgid) and not r.split()[1].startswith("Z")]


@pytest.fixture(scope="module")
def head():
    """A head on free ports in its own process group; stopping it must leave no process behind."""
    with LocalHead(num_cpus=2, object_store_memory=300 * 1024 * 1024, auth_mode="token") as h:
        pgid = h.pid
        assert len(live_members(pgid)) >= 3  # ray start, gcs_server, raylet, ...
        yield h
    assert h.process is None and live_members(pgid) == []


@pytest.mark.integration  # starts a Ray cluster
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_cluster_head_cli_stops_its_cluster_on_a_signal(stop_signal):
    """``twinkle-agentic cluster head`` started by a script (in the background, SIGINT ignored as
    a shell does for background jobs) stops its whole cluster on SIGTERM or SIGINT."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "twinkle_agentic.cli", "cluster", "head", "--num-cpus", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    pgid = None
    try:
        lines = []
        for line in cli.stdout:
            lines.append(line)
            if match := re.search(r"Ray head at \S+ \(pid (\d+)\)", line):
                pgid = int(match.group(1))
            if "Ctrl-C stops it." in line:
                break
        assert pgid is not None and len(live_members(pgid)) >= 3, "".join(lines)[-2000:]
        cli.send_signal(stop_signal)
        assert cli.wait(timeout=60) == 0
        assert live_members(pgid) == []
    finally:
        for group in (pgid, cli.pid):
            if group is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
        cli.wait(timeout=10)


JOB = textwrap.dedent(
    """
    import ray
    from twinkle_agentic.remote import remote_class

    @remote_class(num_cpus=0)
    class Doubler:
        def __call__(self, x):
            return 2 * x

    ray.init()
    print("JOB-RESULT", ray.get(Doubler.remote().__call__.remote(21)), ray.cluster_resources()["CPU"])
    """
)


@pytest.mark.integration  # starts a Ray cluster
def test_ray_job_submit_cli_against_local_head(head, tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    out = subprocess.run(
        ["ray", "job", "submit", "--address", head.dashboard_url, "--working-dir", str(tmp_path), "--",
         "python", "job.py"],
        capture_output=True, text=True, env=head.env, timeout=180,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "JOB-RESULT 42 2.0" in out.stdout
    assert "succeeded" in out.stdout


@pytest.mark.integration  # starts a Ray cluster
def test_cluster_submit_helper(head, tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    out = subprocess.run(
        [sys.executable, "-m", "twinkle_agentic.cli", "cluster", "submit", "--address", head.dashboard_url,
         "--working-dir", str(tmp_path), "--", "python", "job.py"],
        capture_output=True, text=True, env=head.env, timeout=180,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "JOB-RESULT 42 2.0" in out.stdout and ": SUCCEEDED" in out.stdout


@pytest.mark.integration  # starts a Ray cluster
def test_failed_job_exits_non_zero(head, tmp_path):
    (tmp_path / "job.py").write_text("raise SystemExit(3)\n")
    out = subprocess.run(
        [sys.executable, "-m", "twinkle_agentic.cli", "cluster", "submit", "--address", head.dashboard_url,
         "--working-dir", str(tmp_path), "--", "python", "job.py"],
        capture_output=True, text=True, env=head.env, timeout=180,
    )
    assert out.returncode == 1 and ": FAILED" in out.stdout


@pytest.mark.integration  # starts a Ray head
def test_a_head_whose_agent_port_is_taken_starts_again_on_fresh_ports(caplog):
    """A port picked free can be taken before Ray binds it; the dashboard agent then never comes up,
    and the head is retried on new ports after saying why, the failed attempt's processes stopped."""
    head = LocalHead(num_cpus=0, object_store_memory=200 * 1024 * 1024, auth_mode="token")
    taken = head.agent_port
    with socket.socket() as squatter, caplog.at_level(logging.WARNING, "twinkle_agentic.cluster.head"):
        squatter.bind((head.host, taken))  # bound, not listening: the agent cannot bind, nothing answers
        try:
            head.start(timeout_s=15, attempts=2)
            assert head.agent_port != taken
        finally:
            head.stop()
    assert head.process is None
    (retry,) = [r.getMessage() for r in caplog.records]
    assert "start 1 of 2 failed; retrying on new ports" in retry
    assert f"the dashboard agent's port {taken} was closed" in retry
    assert "address already in use" in retry  # from the agent's own log
