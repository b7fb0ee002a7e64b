"""Start and stop a Ray head node on this machine, owned by one process tree.

``ray stop`` kills every Ray process on the machine, including other people's clusters, so a head
started here runs ``ray start --head --block`` in its own process group on free ports and is stopped
by signalling that group.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from twinkle_agentic.net import free_ports

from .auth import auth_headers, ray_environment
from .worker_pool import worker_pool_config

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 90.0
START_ATTEMPTS = 2
# Logs of the head's processes that say why a part did not come up, by file name in the session.
PORT_FIELDS = ("gcs_port", "dashboard_port", "agent_port")
COMPONENT_LOGS = ("dashboard.log", "dashboard_agent.log", "gcs_server.err", "raylet.err")


class HeadStartError(RuntimeError):
    """The head did not come up; carries the tail of its log."""


# The dashboard, its modules and the agents exit within about a second of SIGTERM; a node's GCS,
# raylet and its `ray start --block` were still running 15 s later, so a longer grace only delays the SIGKILL.
STOP_GRACE_S = 2.0


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
    temp_dir: Path | None = None
    _picked: tuple[str, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        self._picked = tuple(n for n in PORT_FIELDS if not getattr(self, n))
        self._pick_ports()

    def _pick_ports(self) -> None:
        given = tuple(getattr(self, n) for n in PORT_FIELDS if n not in self._picked)
        ports = free_ports(len(self._picked), self.host, exclude=given)
        for name, port in zip(self._picked, ports, strict=True):
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

    def start(self, timeout_s: float = START_TIMEOUT_S, attempts: int = START_ATTEMPTS) -> LocalHead:
        """Start the head and wait until it takes jobs. A port picked free can be taken by another
        process before Ray binds it, so a failed start is retried on freshly picked ports (those
        given explicitly are kept), ``attempts`` times in all, each with ``timeout_s``."""
        if self.process is not None:
            raise RuntimeError("this head is already started")
        if attempts < 1:
            raise ValueError(f"attempts={attempts}: must be >= 1")
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(timeout_s)
            except HeadStartError as e:
                if attempt == attempts:
                    raise
                logger.warning("Ray head start %d of %d failed; retrying on new ports: %s", attempt, attempts, e)
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> LocalHead:
        # Short path: Ray's unix sockets live under the temp dir and have a ~107-byte limit.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))
        self.log_path = self.temp_dir / "head.log"
        self.env = ray_environment(self.auth_mode)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(str(self.temp_dir)),
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
        dashboard = agent = "not tried"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HeadStartError(f"ray start exited with {self.process.returncode}:\n{self.diagnosis()}")
            dashboard = _http_status(request)
            agent = "open" if _port_open(self.host, self.agent_port) else "closed"
            if dashboard == "HTTP 200" and agent == "open":
                return
            time.sleep(0.5)
        raise HeadStartError(
            f"head not ready after {timeout_s:.0f}s: the dashboard at {self.dashboard_url} gave "
            f"{dashboard}; the dashboard agent's port {self.agent_port} was {agent}.\n{self.diagnosis()}"
        )

    def diagnosis(self, lines: int = 15) -> str:
        """The tail of ``ray start``'s output and of each head process's log that has one."""
        parts = [f"ray start:\n{self.log_tail(40)}"]
        for name in COMPONENT_LOGS if self.temp_dir else ():
            path = self.temp_dir / "session_latest" / "logs" / name
            tail = "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""
            if tail:
                parts.append(f"{name}:\n{tail}")
        return "\n".join(parts)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the head and every process in its group: SIGTERM, a grace period, then SIGKILL."""
        proc, self.process = self.process, None
        if proc is not None:
            stop_process_group(proc, grace_s)

    def __enter__(self) -> LocalHead:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _http_status(request: urllib.request.Request) -> str:
    """``HTTP <status>``, or why there was no answer."""
    try:
        with urllib.request.urlopen(request, timeout=2) as resp:
            return f"HTTP {resp.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except OSError as e:
        return f"no answer ({e})"


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def stop_process_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
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
