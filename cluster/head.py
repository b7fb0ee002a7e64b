"""Start and stop a Ray head node on this machine, owned by one process tree.

``ray stop`` kills every Ray process on the machine, including other people's clusters, so a head
started here runs ``ray start --head --block`` in its own process group on free ports and is stopped
by signalling that group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from twinkle_agentic.net import free_ports

from .auth import auth_headers, ray_environment
from .worker_pool import worker_pool_config

START_TIMEOUT_S = 180.0


class HeadStartError(RuntimeError):
    """The head did not come up; carries the tail of its log."""


@dataclass
class LocalHead:
    """A Ray head node in a subprocess. Use as a context manager or call ``start``/``stop``."""

    num_cpus: int | None = None
    num_gpus: int | None = None
    object_store_memory: int | None = None
    auth_mode: str | None = None
    host: str = "127.0.0.1"
    # Ports left unset are picked in __post_init__, distinct from each other and from those given.
    gcs_port: int = 0
    dashboard_port: int = 0
    agent_port: int = 0
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [n for n in ("gcs_port", "dashboard_port", "agent_port") if not getattr(self, n)]
        given = (self.gcs_port, self.dashboard_port, self.agent_port)
        for name, port in zip(names, free_ports(len(names), self.host, exclude=given), strict=True):
            setattr(self, name, port)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.host}:{self.dashboard_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def command(self, temp_dir: str) -> list[str]:
        ray_cli = Path(sys.executable).with_name("ray")
        client, agent_grpc, runtime_env, metrics = free_ports(
            4, self.host, exclude=(self.gcs_port, self.dashboard_port, self.agent_port)
        )
        cmd = [
            str(ray_cli) if ray_cli.exists() else "ray",
            "start",
            "--head",
            "--block",
            "--disable-usage-stats",
            f"--node-ip-address={self.host}",
            f"--port={self.gcs_port}",
            "--include-dashboard=true",
            f"--dashboard-host={self.host}",
            f"--dashboard-port={self.dashboard_port}",
            f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={self.agent_port}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--metrics-export-port={metrics}",
            f"--temp-dir={temp_dir}",
        ]
        system_config = worker_pool_config()
        if system_config:
            cmd.append(f"--system-config={json.dumps(system_config)}")
        if self.num_cpus is not None:
            cmd.append(f"--num-cpus={self.num_cpus}")
        if self.num_gpus is not None:
            cmd.append(f"--num-gpus={self.num_gpus}")
        if self.object_store_memory is not None:
            cmd.append(f"--object-store-memory={self.object_store_memory}")
        return cmd

    def start(self, timeout_s: float = START_TIMEOUT_S) -> LocalHead:
        if self.process is not None:
            raise RuntimeError("this head is already started")
        # Short path: Ray's unix sockets live under the temp dir and have a ~107-byte limit.
        temp_dir = tempfile.mkdtemp(prefix="rh", dir="/tmp")
        self.log_path = Path(temp_dir) / "head.log"
        self.env = ray_environment(self.auth_mode)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(temp_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own process group: stop() signals exactly this tree
            )
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        """Wait for the Jobs API and for the node's dashboard agent, which runs submitted jobs: the
        dashboard answers before the agent is up, and a submission in between fails with "No
        available agent to submit job"."""
        deadline = time.monotonic() + timeout_s
        request = urllib.request.Request(f"{self.dashboard_url}/api/version", headers=auth_headers(self.env))
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HeadStartError(f"ray start exited with {self.process.returncode}:\n{self.log_tail()}")
            if _http_ok(request) and _port_open(self.host, self.agent_port):
                return
            time.sleep(0.5)
        raise HeadStartError(f"head not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the head and every process in its group: SIGTERM, a grace period, then SIGKILL."""
        proc, self.process = self.process, None
        if proc is not None:
            stop_process_group(proc, grace_s)

    def __enter__(self) -> LocalHead:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _http_ok(request: urllib.request.Request) -> bool:
    try:
        with urllib.request.urlopen(request, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def stop_process_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Stop a process started with ``start_new_session=True`` and everything in its group (a Ray
    node's raylet, GCS and workers): SIGTERM, a grace period, then SIGKILL."""
    pgid = proc.pid  # start_new_session=True made it its group's leader
    _signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace_s)
    _signal_group(pgid, signal.SIGKILL)  # whatever is left of the tree
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
